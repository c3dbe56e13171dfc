#include "tessera/train/config.h"

#include <algorithm>
#include <functional>
#include <sstream>
#include <toml++/toml.h>
#include <variant>

#include "tessera/core/device.h"
#include "tessera/core/error.h"
#include "tessera/io/atomic_file.h"

namespace tessera::train {

namespace {

using Field = std::variant<std::string*, int64_t*, uint64_t*, double*, bool*, std::vector<int64_t>*>;

struct Key {
  std::string name;
  Field field;
};

// The one declaration of every key.
std::vector<Key> keys_of(TrainConfig& c) {
  return {
      {"model.name", &c.model.name}, {"model.hidden", &c.model.hidden}, {"model.dropout", &c.model.dropout},
      {"model.layers", &c.model.layers}, {"model.heads", &c.model.heads}, {"model.embed_dim", &c.model.embed_dim},
      {"model.context", &c.model.context}, {"model.input_dim", &c.model.input_dim}, {"model.activation_checkpointing", &c.model.activation_checkpointing},
      {"model.experts", &c.model.experts}, {"model.expert_top_k", &c.model.expert_top_k},
      {"model.capacity_factor", &c.model.capacity_factor}, {"model.aux_loss_weight", &c.model.aux_loss_weight},
      {"model.text_encoder", &c.model.text_encoder}, {"model.temperature", &c.model.temperature},
      {"data.dataset", &c.data.dataset}, {"data.dir", &c.data.dir}, {"data.path", &c.data.path},
      {"data.test_path", &c.data.test_path}, {"data.label", &c.data.label},
      {"data.val_fraction", &c.data.val_fraction}, {"data.samples", &c.data.samples},
      {"data.test_samples", &c.data.test_samples}, {"data.classes", &c.data.classes},
      {"data.vocab_size", &c.data.vocab_size}, {"data.bag_length", &c.data.bag_length},
      {"data.topic_words", &c.data.topic_words}, {"data.prefetch", &c.data.prefetch},
      {"data.streaming", &c.data.streaming},
      {"optimizer.name", &c.optimizer.name}, {"optimizer.lr", &c.optimizer.lr},
      {"optimizer.momentum", &c.optimizer.momentum}, {"optimizer.weight_decay", &c.optimizer.weight_decay},
      {"optimizer.beta1", &c.optimizer.beta1}, {"optimizer.beta2", &c.optimizer.beta2}, {"optimizer.eps", &c.optimizer.eps},
      {"optimizer.nesterov", &c.optimizer.nesterov}, {"optimizer.clip_grad_norm", &c.optimizer.clip_grad_norm},
      {"optimizer.trust_coefficient", &c.optimizer.trust_coefficient},
      {"optimizer.exclude_bias_and_norm", &c.optimizer.exclude_bias_and_norm},
      {"optimizer.scale_lr", &c.optimizer.scale_lr},
      {"schedule.name", &c.schedule.name}, {"schedule.warmup_steps", &c.schedule.warmup_steps},
      {"schedule.step_size", &c.schedule.step_size}, {"schedule.gamma", &c.schedule.gamma},
      {"schedule.min_lr", &c.schedule.min_lr},
      {"train.epochs", &c.train.epochs}, {"train.batch_size", &c.train.batch_size},
      {"train.global_batch_size", &c.train.global_batch_size},
      {"train.eval_batch_size", &c.train.eval_batch_size}, {"train.seed", &c.train.seed},
      {"train.threads", &c.train.threads}, {"train.memory_budget_mb", &c.train.memory_budget_mb},
      {"train.output_dir", &c.train.output_dir}, {"train.precision", &c.train.precision},
      {"train.device", &c.train.device}, {"train.allow_tf32", &c.train.allow_tf32},
      {"train.loss_scale_init", &c.train.loss_scale_init},
      {"train.loss_scale_growth_interval", &c.train.loss_scale_growth_interval},
      {"train.log_every", &c.train.log_every}, {"train.checkpoint_every", &c.train.checkpoint_every},
      {"train.keep_checkpoints", &c.train.keep_checkpoints}, {"train.max_steps", &c.train.max_steps},
      {"train.checkpoint_async", &c.train.checkpoint_async},
      {"train.checkpoint_verify", &c.train.checkpoint_verify},
      {"train.checkpoint_format", &c.train.checkpoint_format},
      {"train.overwrite", &c.train.overwrite},
      {"distributed.strategy", &c.distributed.strategy}, {"distributed.servers", &c.distributed.servers},
      {"distributed.zero_stage", &c.distributed.zero_stage},
      {"distributed.zero_wrap_policy", &c.distributed.zero_wrap_policy},
      {"distributed.zero_min_unit_mb", &c.distributed.zero_min_unit_mb},
      {"distributed.hsdp_shard_size", &c.distributed.hsdp_shard_size},
      {"distributed.local_sgd", &c.distributed.local_sgd},
      {"distributed.outer_lr", &c.distributed.outer_lr},
      {"distributed.outer_momentum", &c.distributed.outer_momentum},
      {"distributed.ps_mode", &c.distributed.ps_mode}, {"distributed.staleness", &c.distributed.staleness},
      {"distributed.ps_host", &c.distributed.ps_host},
      {"distributed.debug_slow_rank", &c.distributed.debug_slow_rank},
      {"distributed.debug_slow_ms", &c.distributed.debug_slow_ms},
      {"distributed.debug_kill_rank", &c.distributed.debug_kill_rank},
      {"distributed.debug_kill_step", &c.distributed.debug_kill_step},
      {"distributed.debug_kill_point", &c.distributed.debug_kill_point},
      {"distributed.debug_stop_rank", &c.distributed.debug_stop_rank},
      {"distributed.debug_stop_step", &c.distributed.debug_stop_step},
      {"distributed.live_membership", &c.distributed.live_membership},
      {"distributed.live_settle_ms", &c.distributed.live_settle_ms},
      {"distributed.backend", &c.distributed.backend}, {"distributed.timeout_s", &c.distributed.timeout_s},
      {"distributed.bucket_cap_mb", &c.distributed.bucket_cap_mb}, {"distributed.comm_hook", &c.distributed.comm_hook},
      {"distributed.reduce_dtype", &c.distributed.reduce_dtype},
      {"distributed.find_unused_parameters", &c.distributed.find_unused_parameters},
      {"distributed.sync_batchnorm", &c.distributed.sync_batchnorm},
      {"distributed.powersgd_rank", &c.distributed.powersgd_rank},
      {"distributed.powersgd_start_iter", &c.distributed.powersgd_start_iter},
      {"distributed.topk_ratio", &c.distributed.topk_ratio},
      {"parallel.dp", &c.parallel.dp}, {"parallel.pp", &c.parallel.pp}, {"parallel.tp", &c.parallel.tp},
      {"parallel.sequence_parallel", &c.parallel.sequence_parallel},
      {"parallel.tp_overlap_chunks", &c.parallel.tp_overlap_chunks},
      {"parallel.ep", &c.parallel.ep}, {"parallel.cp", &c.parallel.cp},
      {"parallel.cp_attention", &c.parallel.cp_attention},
      {"parallel.schedule", &c.parallel.schedule}, {"parallel.microbatches", &c.parallel.microbatches},
      {"parallel.virtual_stages", &c.parallel.virtual_stages},
      {"parallel.balance", &c.parallel.balance},
      {"observability.tensorboard", &c.observability.tensorboard}, {"observability.trace", &c.observability.trace},
  };
}

// Levenshtein distance of a and b, or `limit` when it is at least `limit`: rows stop once their
// smallest entry reaches it, so comparing a key with ~150 names costs little past the first close one.
size_t edit_distance(const std::string& a, const std::string& b, size_t limit) {
  const size_t length_gap = a.size() > b.size() ? a.size() - b.size() : b.size() - a.size();
  if (length_gap >= limit) return limit;
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    size_t row_min = row[0];
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      row_min = std::min(row_min, row[j]);
      diag = up;
    }
    if (row_min >= limit) return limit;
  }
  return std::min(row[b.size()], limit);
}

[[noreturn]] void unknown_key(const std::string& key, const std::string& source) {
  // A key longer than any real one gets no suggestion, and the message shows only its start: the
  // edit distance costs |key| x |name| per known key, and a hostile file's 64 KiB key made each parse
  // take milliseconds (found by profiling fuzz_config, 41% of its time in edit_distance).
  constexpr size_t kLongestSuggestible = 64;
  if (key.size() > kLongestSuggestible)
    throw ValueError("[config] unknown key '" + key.substr(0, kLongestSuggestible) + "...' (" +
                     std::to_string(key.size()) + " characters) in " + source);
  TrainConfig dummy;
  std::string best;
  size_t best_d = SIZE_MAX;
  const std::string key_leaf = key.substr(key.find('.') + 1);
  for (auto& k : keys_of(dummy)) {
    // Compare whole keys and also the last component alone (a key put in the wrong section).
    const std::string leaf = k.name.substr(k.name.find('.') + 1);
    size_t d = edit_distance(key, k.name, best_d);
    if (best_d > 1) d = std::min(d, edit_distance(key_leaf, leaf, best_d - 1) + 1);
    if (d < best_d) {
      best_d = d;
      best = k.name;
    }
  }
  throw ValueError("[config] unknown key '" + key + "' in " + source + "; did you mean '" + best + "'?");
}

Key* find_key(std::vector<Key>& keys, const std::string& name) {
  for (auto& k : keys)
    if (k.name == name) return &k;
  return nullptr;
}

const char* type_name(const Field& f) {
  return std::visit([](auto* p) -> const char* {
    using T = std::remove_pointer_t<decltype(p)>;
    if constexpr (std::is_same_v<T, std::string>) return "a string";
    else if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, uint64_t>) return "an integer";
    else if constexpr (std::is_same_v<T, double>) return "a number";
    else if constexpr (std::is_same_v<T, bool>) return "true or false";
    else return "a list of integers";
  }, f);
}

void set_from_node(Key& key, const toml::node& node, const std::string& source) {
  auto bad = [&] {
    throw ValueError("[config] key '" + key.name + "' in " + source + " must be " + type_name(key.field));
  };
  std::visit([&](auto* p) {
    using T = std::remove_pointer_t<decltype(p)>;
    if constexpr (std::is_same_v<T, std::string>) {
      if (!node.is_string()) bad();
      *p = node.value<std::string>().value();
    } else if constexpr (std::is_same_v<T, int64_t>) {
      if (!node.is_integer()) bad();
      *p = node.value<int64_t>().value();
    } else if constexpr (std::is_same_v<T, uint64_t>) {
      if (!node.is_integer() || node.value<int64_t>().value() < 0) bad();
      *p = static_cast<uint64_t>(node.value<int64_t>().value());
    } else if constexpr (std::is_same_v<T, double>) {
      if (!node.is_number()) bad();
      *p = node.value<double>().value();
    } else if constexpr (std::is_same_v<T, bool>) {
      if (!node.is_boolean()) bad();
      *p = node.value<bool>().value();
    } else {
      if (!node.is_array()) bad();
      p->clear();
      for (auto& item : *node.as_array()) {
        if (!item.is_integer()) bad();
        p->push_back(item.value<int64_t>().value());
      }
    }
  }, key.field);
}

void walk(const toml::table& table, const std::string& prefix, std::vector<Key>& keys, const std::string& source) {
  for (auto& [k, node] : table) {
    std::string name = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    if (node.is_table() && prefix.empty()) {
      walk(*node.as_table(), name, keys, source);
      continue;
    }
    Key* key = find_key(keys, name);
    if (!key) unknown_key(name, source);
    set_from_node(*key, node, source);
  }
}

}  // namespace

TrainConfig parse_config(const std::string& text, const std::string& source) {
  TrainConfig config;
  toml::table table;
  try {
    table = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    std::ostringstream msg;
    msg << "[config] " << source << ":" << e.source().begin.line << ":" << e.source().begin.column << ": "
        << e.description();
    throw ValueError(msg.str());
  }
  auto keys = keys_of(config);
  walk(table, "", keys, source);
  return config;
}

TrainConfig load_config(const std::string& path) { return parse_config(io::read_file(path), path); }

void apply_override(TrainConfig& config, const std::string& assignment) {
  size_t eq = assignment.find('=');
  TESSERA_CHECK(eq != std::string::npos && eq > 0, "[config] --set expects key=value, got '", assignment, "'");
  std::string key = assignment.substr(0, eq), value = assignment.substr(eq + 1);
  auto keys = keys_of(config);
  Key* k = find_key(keys, key);
  if (!k) unknown_key(key, "--set");
  // Let TOML parse the value (numbers, booleans, lists, quoted strings); a bare word is a string.
  try {
    toml::table t = toml::parse("v = " + value);
    set_from_node(*k, *t.get("v"), "--set");
  } catch (const toml::parse_error&) {
    set_from_node(*k, toml::value<std::string>(value), "--set");
  }
}

namespace {

// model.experts and parallel.ep: a mixture of experts, and the ranks its experts are spread over;
// parallel.cp: the ranks each sequence is cut over.
void check_experts_and_context(const TrainConfig& c) {
  const auto& m = c.model;
  TESSERA_CHECK(m.experts >= 0, "[config] model.experts must be 0 (no mixture) or positive, got ", m.experts);
  TESSERA_CHECK(c.parallel.ep >= 1, "[config] parallel.ep must be at least 1, got ", c.parallel.ep);
  if (m.experts > 0) {
    TESSERA_CHECK(m.expert_top_k >= 1 && m.expert_top_k <= m.experts, "[config] model.expert_top_k must be in [1, "
                  "model.experts = ", m.experts, "], got ", m.expert_top_k);
    TESSERA_CHECK(m.capacity_factor > 0 && m.aux_loss_weight >= 0, "[config] model.capacity_factor must be positive "
                  "and model.aux_loss_weight not negative, got ", m.capacity_factor, " and ", m.aux_loss_weight);
    TESSERA_CHECK(!uses_model_parallelism(c) && c.distributed.strategy != "mesh", "[config] model.experts: a "
                  "mixture of experts trains under ddp, zero, local SGD or parameter servers, not parallel.pp / "
                  "parallel.tp (yet); spread the experts with parallel.ep");
    // Checkpointing's first forward runs without gradients: the balancing loss would train nothing.
    TESSERA_CHECK(!m.activation_checkpointing, "[config] model.experts with model.activation_checkpointing: the "
                  "load-balancing loss needs the router's forward with gradients; turn one of them off");
  }
  TESSERA_CHECK((m.experts == 0 && c.parallel.cp == 1) || c.train.device == "cpu", "[config] ",
                m.experts > 0 ? "model.experts" : "parallel.cp", " runs on the CPU only (not yet on GPUs), not "
                "train.device = '", c.train.device, "'");
  TESSERA_CHECK(c.parallel.cp >= 1, "[config] parallel.cp must be at least 1, got ", c.parallel.cp);
  TESSERA_CHECK(c.parallel.cp_attention == "ring" || c.parallel.cp_attention == "ulysses", "[config] "
                "parallel.cp_attention must be 'ring' or 'ulysses', got '", c.parallel.cp_attention, "'");
  if (c.parallel.cp > 1) {
    const bool ring = c.parallel.cp_attention == "ring";
    TESSERA_CHECK(c.model.name == "transformer", "[config] parallel.cp cuts the sequences of model.name = "
                  "'transformer', not '", c.model.name, "'");
    TESSERA_CHECK(c.model.context % (ring ? 2 * c.parallel.cp : c.parallel.cp) == 0, "[config] parallel.cp = ",
                  c.parallel.cp, ": model.context (", c.model.context, ") must be a multiple of ",
                  ring ? "2 · parallel.cp (ring attention: two chunks per rank)" : "it (Ulysses)");
    TESSERA_CHECK(ring || c.model.heads % (c.parallel.cp * c.parallel.tp) == 0, "[config] parallel.cp = ",
                  c.parallel.cp, " with Ulysses: model.heads (", c.model.heads, ") must be a multiple of it",
                  c.parallel.tp > 1 ? " · parallel.tp (each tensor-parallel rank's heads are spread)" : "",
                  " (each rank attends with whole heads)");
    const std::string& s = c.distributed.strategy;
    TESSERA_CHECK((s == "ddp" || s == "zero" || s == "hsdp" || s == "mesh") && c.distributed.local_sgd == 0 &&
                      c.parallel.ep == 1,
                  "[config] parallel.cp needs distributed.strategy = 'ddp', 'zero' or 'hsdp' (context parallelism "
                  "over the data-parallel ranks, also inside the mesh of parallel.pp / tp), without parallel.ep or "
                  "local SGD (not yet)");
  }
  if (c.parallel.ep == 1) return;
  TESSERA_CHECK(m.experts > 0 && m.experts % c.parallel.ep == 0, "[config] parallel.ep = ", c.parallel.ep,
                " spreads a mixture's experts over that many ranks: model.experts (", m.experts,
                ") must be a positive multiple of it");
  TESSERA_CHECK(c.distributed.strategy == "ddp" && c.distributed.local_sgd == 0, "[config] parallel.ep needs "
                "distributed.strategy = 'ddp' (expert parallelism over the data-parallel ranks), got '",
                c.distributed.strategy, "'", c.distributed.local_sgd > 0 ? " with local SGD" : "");
  TESSERA_CHECK(c.distributed.comm_hook == "none" && !c.distributed.find_unused_parameters, "[config] parallel.ep: "
                "distributed.comm_hook and find_unused_parameters are not supported with expert parallelism");
}

}  // namespace

void check_settings(const TrainConfig& c) {
  auto one_of = [](const std::string& key, const std::string& v, std::initializer_list<const char*> options) {
    std::string list;
    for (const char* o : options) {
      if (v == o) return;
      list += std::string(list.empty() ? "" : ", ") + o;
    }
    throw ValueError("[config] " + key + " = '" + v + "' is not one of: " + list);
  };
  auto positive = [](const std::string& key, double v) {
    TESSERA_CHECK(v > 0, "[config] ", key, " must be positive, got ", v);
  };
  auto non_negative = [](const std::string& key, double v) {
    TESSERA_CHECK(v >= 0, "[config] ", key, " must be >= 0, got ", v);
  };
  one_of("data.dataset", c.data.dataset, {"fashion-mnist", "text", "synthetic", "bag-of-words", "csv", "image-folder", "clip-text"});
  TESSERA_CHECK(c.data.dataset != "csv" || !c.data.test_path.empty(),
                "[config] data.dataset = 'csv' needs data.test_path, the table to evaluate on");
  TESSERA_CHECK(!c.data.streaming || c.data.dataset == "csv", "[config] data.streaming reads csv tables where they lie; "
                "data.dataset is '", c.data.dataset, "'");
  positive("model.input_dim", static_cast<double>(c.model.input_dim));
  one_of("optimizer.name", c.optimizer.name, {"sgd", "adam", "adamw", "lars", "lamb"});
  one_of("train.precision", c.train.precision, {"fp32", "bf16", "fp16"});
  try {
    parse_device(c.train.device);
  } catch (const ValueError&) {
    throw ValueError("[config] train.device = '" + c.train.device + "' is not a device: expected cpu, cuda or cuda:N");
  }
  positive("train.loss_scale_init", c.train.loss_scale_init);
  positive("train.loss_scale_growth_interval", static_cast<double>(c.train.loss_scale_growth_interval));
  TESSERA_CHECK(c.train.precision != "fp16" || c.distributed.strategy != "ps",
                "[config] train.precision = 'fp16' skips the steps whose gradients overflow, which the parameter "
                "servers' workers cannot agree on (they never wait for each other); use 'bf16' (no loss scaling "
                "needed) or 'fp32' with distributed.strategy = 'ps'");
  one_of("optimizer.scale_lr", c.optimizer.scale_lr, {"none", "linear", "sqrt"});
  one_of("schedule.name", c.schedule.name, {"constant", "step", "cosine"});
  for (int64_t h : c.model.hidden) positive("model.hidden", static_cast<double>(h));
  TESSERA_CHECK(c.model.dropout >= 0 && c.model.dropout < 1, "[config] model.dropout must be in [0, 1), got ",
                c.model.dropout);
  positive("model.layers", c.model.layers);
  positive("model.heads", c.model.heads);
  positive("model.embed_dim", c.model.embed_dim);
  positive("model.context", c.model.context);
  TESSERA_CHECK(c.data.val_fraction > 0 && c.data.val_fraction < 1, "[config] data.val_fraction must be in (0, 1)");
  positive("data.samples", c.data.samples);
  positive("data.test_samples", c.data.test_samples);
  positive("data.classes", c.data.classes);
  TESSERA_CHECK(c.data.classes >= 2 || (c.data.dataset != "synthetic" && c.data.dataset != "bag-of-words"),
                "[config] data.classes must be at least 2 for data.dataset = '", c.data.dataset, "', got ",
                c.data.classes);
  positive("data.vocab_size", c.data.vocab_size);
  positive("data.bag_length", c.data.bag_length);
  positive("data.topic_words", c.data.topic_words);
  positive("data.prefetch", c.data.prefetch);
  non_negative("optimizer.lr", c.optimizer.lr);
  non_negative("optimizer.momentum", c.optimizer.momentum);
  non_negative("optimizer.weight_decay", c.optimizer.weight_decay);
  non_negative("optimizer.clip_grad_norm", c.optimizer.clip_grad_norm);
  positive("optimizer.trust_coefficient", c.optimizer.trust_coefficient);
  non_negative("schedule.warmup_steps", c.schedule.warmup_steps);
  positive("schedule.step_size", c.schedule.step_size);
  non_negative("schedule.min_lr", c.schedule.min_lr);
  positive("train.epochs", c.train.epochs);
  positive("train.batch_size", c.train.batch_size);
  positive("train.eval_batch_size", c.train.eval_batch_size);
  non_negative("train.global_batch_size", c.train.global_batch_size);
  TESSERA_CHECK(c.train.global_batch_size == 0 || c.optimizer.scale_lr == "none",
                "[config] train.global_batch_size keeps the global batch fixed whatever the world size, so "
                "optimizer.scale_lr must be \"none\" (got \"", c.optimizer.scale_lr,
                "\"); set optimizer.lr to the rate for the global batch instead");
  non_negative("train.threads", c.train.threads);
  non_negative("train.memory_budget_mb", c.train.memory_budget_mb);
  TESSERA_CHECK(c.train.memory_budget_mb < (int64_t{1} << 40), "[config] train.memory_budget_mb ",
                c.train.memory_budget_mb, " MiB is past any machine; use 0 for no budget");
  positive("train.log_every", c.train.log_every);
  non_negative("train.checkpoint_every", c.train.checkpoint_every);
  positive("train.keep_checkpoints", c.train.keep_checkpoints);
  one_of("train.checkpoint_verify", c.train.checkpoint_verify, {"checksums", "reload", "none"});
  one_of("train.checkpoint_format", c.train.checkpoint_format, {"whole", "sharded"});
  non_negative("train.max_steps", c.train.max_steps);
  TESSERA_CHECK(!c.train.output_dir.empty(), "[config] train.output_dir must not be empty");
  one_of("distributed.backend", c.distributed.backend, {"auto", "gloo", "tcp", "shm", "mpi"});
  one_of("distributed.strategy", c.distributed.strategy, {"ddp", "zero", "hsdp", "ps", "mesh"});
  non_negative("distributed.hsdp_shard_size", c.distributed.hsdp_shard_size);
  non_negative("distributed.local_sgd", c.distributed.local_sgd);
  if (c.distributed.local_sgd > 0) {
    TESSERA_CHECK(c.distributed.strategy == "ddp" && c.distributed.comm_hook == "none" && !c.distributed.sync_batchnorm,
                  "[config] distributed.local_sgd replaces DDP's gradient all-reduce: it takes strategy = \"ddp\" "
                  "without a comm_hook or sync_batchnorm, not strategy = \"", c.distributed.strategy, "\"");
    TESSERA_CHECK(c.train.precision != "fp16", "[config] distributed.local_sgd: fp16's loss scaling would skip steps "
                  "on one replica and not another; use bf16 or fp32");
    TESSERA_CHECK(c.distributed.outer_lr > 0 && c.distributed.outer_momentum >= 0 && c.distributed.outer_momentum < 1,
                  "[config] distributed.outer_lr must be positive and outer_momentum in [0, 1)");
  }
  TESSERA_CHECK(c.distributed.zero_stage >= 1 && c.distributed.zero_stage <= 3,
                "[config] distributed.zero_stage must be 1, 2 or 3, got ", c.distributed.zero_stage);
  one_of("distributed.zero_wrap_policy", c.distributed.zero_wrap_policy, {"layer", "size"});
  positive("distributed.zero_min_unit_mb", c.distributed.zero_min_unit_mb);
  if (c.distributed.strategy == "zero" || c.distributed.strategy == "hsdp")
    TESSERA_CHECK(c.distributed.comm_hook == "none" && !c.distributed.sync_batchnorm &&
                      !c.distributed.find_unused_parameters,
                  "[config] distributed.comm_hook, sync_batchnorm and find_unused_parameters apply to ddp, not to "
                  "strategy = \"", c.distributed.strategy, "\"");
  one_of("distributed.ps_mode", c.distributed.ps_mode, {"sync", "async", "ssp"});
  positive("distributed.servers", c.distributed.servers);
  non_negative("distributed.staleness", c.distributed.staleness);
  non_negative("distributed.debug_slow_ms", c.distributed.debug_slow_ms);
  if (c.distributed.strategy == "ps")
    one_of("optimizer.name (the parameter servers run it)", c.optimizer.name, {"sgd", "adam", "adamw"});
  one_of("distributed.comm_hook", c.distributed.comm_hook, {"none", "fp16", "bf16", "powersgd", "topk"});
  one_of("distributed.live_membership", c.distributed.live_membership, {"auto", "on", "off"});
  one_of("distributed.debug_kill_point", c.distributed.debug_kill_point, {"step", "commit"});
  TESSERA_CHECK(c.distributed.live_settle_ms >= 10 && c.distributed.live_settle_ms <= 60000,
                "[config] distributed.live_settle_ms must be between 10 and 60000, got ", c.distributed.live_settle_ms);
  one_of("distributed.reduce_dtype", c.distributed.reduce_dtype, {"auto", "fp32", "bf16"});
  TESSERA_CHECK(c.distributed.reduce_dtype != "bf16" || c.distributed.comm_hook == "none",
                "[config] distributed.reduce_dtype = 'bf16' sets how the plain all-reduce sends gradients; "
                "distributed.comm_hook = '", c.distributed.comm_hook, "' sends them its own way. Set one of the two");
  positive("distributed.timeout_s", c.distributed.timeout_s);
  non_negative("distributed.bucket_cap_mb", c.distributed.bucket_cap_mb);
  positive("distributed.powersgd_rank", c.distributed.powersgd_rank);
  non_negative("distributed.powersgd_start_iter", c.distributed.powersgd_start_iter);
  TESSERA_CHECK(c.distributed.topk_ratio > 0 && c.distributed.topk_ratio <= 1,
                "[config] distributed.topk_ratio must be in (0, 1], got ", c.distributed.topk_ratio);
  non_negative("parallel.dp", static_cast<double>(c.parallel.dp));
  positive("parallel.pp", static_cast<double>(c.parallel.pp));
  positive("parallel.tp", static_cast<double>(c.parallel.tp));
  positive("parallel.microbatches", static_cast<double>(c.parallel.microbatches));
  positive("parallel.tp_overlap_chunks", static_cast<double>(c.parallel.tp_overlap_chunks));
  if (c.parallel.sequence_parallel) {
    TESSERA_CHECK(c.parallel.tp > 1, "[config] parallel.sequence_parallel cuts the tokens over the tensor-parallel "
                  "ranks; it needs parallel.tp > 1, got ", c.parallel.tp);
    TESSERA_CHECK(c.model.context % (c.parallel.tp * c.parallel.cp) == 0, "[config] parallel.sequence_parallel needs "
                  "model.context ", c.model.context, " to be a multiple of parallel.tp ", c.parallel.tp,
                  c.parallel.cp > 1 ? " · parallel.cp " + std::to_string(c.parallel.cp) : std::string(),
                  " (each rank takes the same number of tokens)");
  }
  one_of("parallel.schedule", c.parallel.schedule, {"gpipe", "1f1b", "interleaved", "zb-h1", "zb-v"});
  positive("parallel.virtual_stages", static_cast<double>(c.parallel.virtual_stages));
  if (c.parallel.schedule == "interleaved") {
    TESSERA_CHECK(c.parallel.pp >= 2 && c.parallel.virtual_stages >= 2, "[config] parallel.schedule = 'interleaved' "
                  "needs parallel.pp >= 2 and parallel.virtual_stages >= 2 (model chunks per stage), got pp ",
                  c.parallel.pp, " and virtual_stages ", c.parallel.virtual_stages);
    TESSERA_CHECK(c.parallel.microbatches % c.parallel.pp == 0, "[config] parallel.schedule = 'interleaved' runs "
                  "micro-batches in groups of parallel.pp, so parallel.microbatches ", c.parallel.microbatches,
                  " must be a multiple of parallel.pp ", c.parallel.pp);
  } else if (c.parallel.schedule == "zb-v") {
    TESSERA_CHECK(c.parallel.pp >= 2, "[config] parallel.schedule = 'zb-v' needs parallel.pp >= 2, got ", c.parallel.pp);
    TESSERA_CHECK(c.parallel.virtual_stages == 1 || c.parallel.virtual_stages == 2, "[config] parallel.schedule = "
                  "'zb-v' runs 2 model chunks per stage (a V); parallel.virtual_stages ", c.parallel.virtual_stages,
                  " cannot change that (leave it at 1, or 2)");
  } else {
    TESSERA_CHECK(c.parallel.virtual_stages == 1, "[config] parallel.virtual_stages ", c.parallel.virtual_stages,
                  " needs parallel.schedule = 'interleaved' (the '", c.parallel.schedule,
                  "' schedule runs one model chunk per stage)");
  }
  one_of("parallel.balance", c.parallel.balance, {"parameters", "time"});
  check_experts_and_context(c);
  if (uses_model_parallelism(c) || c.distributed.strategy == "mesh") {
    TESSERA_CHECK(c.distributed.strategy != "ps", "[config] parallel.pp / parallel.tp need distributed.strategy = "
                  "'mesh' or 'ddp' (data parallelism across pipelines), not 'ps'");
    TESSERA_CHECK(c.parallel.tp == 1 || c.model.heads % c.parallel.tp == 0, "[config] model.heads ", c.model.heads,
                  " must be divisible by parallel.tp ", c.parallel.tp, " (each rank takes whole heads)");
    TESSERA_CHECK(c.train.batch_size % c.parallel.microbatches == 0, "[config] train.batch_size ",
                  c.train.batch_size, " must be a multiple of parallel.microbatches ", c.parallel.microbatches);
    TESSERA_CHECK(c.train.global_batch_size == 0, "[config] train.global_batch_size (elastic data parallelism) does not "
                  "apply with parallel.pp / parallel.tp; set train.batch_size per replica");
    TESSERA_CHECK(c.distributed.comm_hook == "none" && !c.distributed.sync_batchnorm,
                  "[config] distributed.comm_hook and sync_batchnorm apply to plain DDP, not to parallel.pp / tp");
  }
}

std::string to_toml(const TrainConfig& config) {
  TrainConfig copy = config;
  toml::table root;
  for (auto& k : keys_of(copy)) {
    std::string section = k.name.substr(0, k.name.find('.')), leaf = k.name.substr(k.name.find('.') + 1);
    if (!root.contains(section)) root.insert(section, toml::table{});
    toml::table& t = *root.get(section)->as_table();
    std::visit([&](auto* p) {
      using T = std::remove_pointer_t<decltype(p)>;
      if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
        toml::array a;
        for (int64_t v : *p) a.push_back(v);
        t.insert(leaf, a);
      } else if constexpr (std::is_same_v<T, uint64_t>) {
        t.insert(leaf, static_cast<int64_t>(*p));
      } else {
        t.insert(leaf, *p);
      }
    }, k.field);
  }
  // Strings as basic ones, escaped: toml++ would write one that holds a newline as a multi-line string
  // (whose first newline TOML drops on reading) or a literal one (where a newline is refused), and the
  // text would not read back (found by fuzz_config).
  constexpr auto kFlags = toml::toml_formatter::default_flags & ~toml::format_flags::allow_multi_line_strings &
                          ~toml::format_flags::allow_literal_strings;
  std::ostringstream out;
  out << toml::toml_formatter(root, kFlags);
  return out.str();
}

std::vector<std::string> known_keys() {
  TrainConfig dummy;
  std::vector<std::string> out;
  for (auto& k : keys_of(dummy)) out.push_back(k.name);
  return out;
}

}  // namespace tessera::train
