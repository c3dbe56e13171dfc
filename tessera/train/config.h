// The training configuration: a TOML file (parsed by toml++) plus `--set key=value` overrides.
// Every key is declared once in config.cpp with its type and default; an unknown key is an error that
// names it and suggests the nearest known one.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/core/dtype.h"

namespace tessera::train {

struct ModelConfig {
  std::string name = "mlp";                  // mlp | cnn | transformer | bow | logistic | linear | milnce
  std::vector<int64_t> hidden = {512, 256};  // mlp hidden sizes
  double dropout = 0.0;                      // mlp (between hidden layers) and transformer
  int64_t layers = 4, heads = 4, embed_dim = 128, context = 64;  // transformer; bow uses embed_dim
  int64_t input_dim = 784;  // mlp, logistic and linear: features per sample (a CSV table's feature columns)
  // transformer: each block keeps only its input and recomputes the rest in backward (nn/checkpoint.h)
  bool activation_checkpointing = false;
  // transformer: experts > 0 makes every block's MLP a mixture of that many experts
  // (nn/mixture_of_experts.h): each token goes to its expert_top_k, each expert takes at most
  // capacity_factor × its even share of a rank's tokens, and aux_loss_weight scales the
  // load-balancing loss added to the training loss.
  int64_t experts = 0, expert_top_k = 2;
  double capacity_factor = 1.25, aux_loss_weight = 0.01;
  // milnce (data.dataset = "clip-text"): the text branch ("bag", or "transformer" of model.layers
  // blocks of model.heads heads), the embedding width model.embed_dim, the video MLP's width
  // model.hidden[0], and the loss's temperature.
  std::string text_encoder = "bag";
  double temperature = 0.1;
};

struct DataConfig {
  std::string dataset = "fashion-mnist";  // fashion-mnist | text | synthetic | bag-of-words
  std::string dir = "/usr/share/datasets/fashion-mnist";
  std::string path = "/usr/share/games/fortunes";  // text corpus, or the csv training table: a file or a directory
  std::string test_path;        // csv: the test table (a file or a directory of *.csv)
  std::string label = "label";  // csv: the label column (logistic, mlp: class ids in [0, classes); linear: numbers)
  double val_fraction = 0.1;                       // text
  int64_t samples = 2048, test_samples = 512, classes = 10;  // synthetic and bag-of-words
  int64_t vocab_size = 100000, bag_length = 32, topic_words = 200;  // bag-of-words (make_bag_of_words)
  int64_t prefetch = 2;
  // csv: read the tables where they lie instead of loading them (csv_stream.h). Each replica scans
  // only its byte range of the table and keeps an index; for tables larger than memory.
  bool streaming = false;
};

struct OptimizerConfig {
  std::string name = "adam";  // sgd | adam | adamw | lars | lamb
  double lr = 1e-3, momentum = 0.9, weight_decay = 0.0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  bool nesterov = false;
  double clip_grad_norm = 0.0;        // 0: off
  double trust_coefficient = 0.001;   // lars: eta
  bool exclude_bias_and_norm = true;  // lars: 1-D parameters get no weight decay or trust ratio
  std::string scale_lr = "none";      // none | linear | sqrt: lr times world size or its root (lr_scaling.h)
};

struct ScheduleConfig {
  std::string name = "constant";  // constant | step | cosine
  int64_t warmup_steps = 0;
  int64_t step_size = 1000;  // step: decay every step_size steps by gamma
  double gamma = 0.1;
  double min_lr = 0.0;  // cosine: final learning rate
};

struct RunConfig {
  int64_t epochs = 5;
  int64_t batch_size = 128;
  // The batch of one step over all ranks; 0: batch_size × world size (batch_size is then per rank).
  // When set, each of W ranks reads global_batch_size / W (an error unless W divides it), so the step,
  // the schedule and the data order stay the same when an elastic job changes its world size; the
  // lr is then not scaled with the world size (optimizer.scale_lr must be "none").
  int64_t global_batch_size = 0;
  int64_t eval_batch_size = 1000;
  uint64_t seed = 0;
  int64_t threads = 0;            // 0: TESSERA_NUM_THREADS or all cores
  int64_t memory_budget_mb = 0;   // MiB live tensors may hold (cpu_allocator.h); 0: TESSERA_MEMORY_BUDGET
  std::string output_dir = "runs/default";
  // fp32, bf16 or fp16: matrix products (matmul, linear, conv, attention) with operands in bfloat16
  // or float16 and fp32 accumulation; everything else and the parameters, gradients and optimizer
  // state in fp32 (autograd/autocast.h). fp16 adds dynamic loss scaling (optim/grad_scaler.h).
  std::string precision = "fp32";
  // Where the model trains: "cpu", "cuda" or "cuda:N" (one process so far; the CUDA kernel table's
  // ops: docs/gpu.md). The CLI's --device sets it.
  std::string device = "cpu";
  // On a GPU, float32 matrix products and convolutions on TF32 tensor cores (10-bit mantissas, float32
  // accumulation: faster, less exact), as torch.backends.cuda.matmul.allow_tf32. Off by default.
  bool allow_tf32 = false;
  double loss_scale_init = 65536;          // fp16: the first loss scale
  int64_t loss_scale_growth_interval = 2000;  // fp16: steps without an overflow before the scale doubles
  int64_t log_every = 50;         // steps between log lines (metrics.jsonl gets every step)
  int64_t checkpoint_every = 0;   // steps between checkpoints; 0: at the end of each epoch only
  int64_t keep_checkpoints = 2;   // older ones are deleted
  // Write checkpoints in the background (train/background_save.h): the step copies the state to host
  // memory and goes on. Sharded checkpoints are written in the foreground still.
  bool checkpoint_async = false;
  // What a checkpoint holds: "whole" (the model and optimizer state gathered on rank 0 under
  // single-process names) or "sharded" (each rank writes its own pieces of them with a manifest,
  // io/checkpoint_manifest.h: no rank ever holds the whole state). Both resume at any layout and
  // world size and are read by `tessera eval`/`generate`/`serve`.
  std::string checkpoint_format = "whole";
  // "checksums": a save is complete (a step directory, `latest`) only once its files read back with
  // every tensor's checksum matching; "reload": that, and a sharded step's state assembled whole from
  // its pieces (reloaded at another layout); "none": written and fsync'd only (io::Verify).
  std::string checkpoint_verify = "checksums";
  int64_t max_steps = 0;          // stop (with a checkpoint) after this many steps in total; 0: no limit
  // A fresh run (no --resume) in an output_dir that holds another run's checkpoints is refused,
  // unless this is set: then that run's checkpoints and metrics are moved aside, to
  // <output_dir>/previous-<its run id>/, never deleted.
  bool overwrite = false;
};

// How the job trains when it has several ranks (tessera train --nproc N, tessera run, mpirun):
// synchronous data parallelism (DDP), or parameter servers (strategy "ps"). train.batch_size is per
// rank (per worker), as in PyTorch's DDP.
struct DistributedConfig {
  // ddp | zero | hsdp | ps | mesh (train/strategy.h); pp · tp > 1 means mesh. A ddp, zero or hsdp
  // job of one process trains locally.
  std::string strategy = "ddp";
  // Sharded data parallelism (strategy = "zero"; tessera/parallel/zero): 1 shards the optimizer
  // state, 2 also the gradients, 3 also the parameters. Stage 3 gathers one unit at a time: each
  // layer ("layer") or consecutive layers of at least zero_min_unit_mb ("size").
  int64_t zero_stage = 2;
  std::string zero_wrap_policy = "layer";
  double zero_min_unit_mb = 1;
  // Hybrid sharding (strategy = "hsdp", parallel/zero/hybrid_groups.h): ZeRO at zero_stage inside
  // replicas of this many consecutive ranks, all-reduced across them; 0: the ranks of a host.
  int64_t hsdp_shard_size = 0;
  // Local SGD / DiLoCo (train/local_sgd_strategy.h): 0, off; H > 0: the replicas train alone for H
  // steps, then meet in one outer step (SGD at outer_lr with Nesterov momentum outer_momentum; DiLoCo's
  // 0.7 and 0.9) on the average of their moves.
  int64_t local_sgd = 0;
  double outer_lr = 0.7;
  double outer_momentum = 0.9;
  std::string backend = "auto";        // auto | gloo | shm | mpi
  double timeout_s = 300;              // rendezvous and every collective
  double bucket_cap_mb = 0;            // DDP gradient buckets; 0: auto (parallel/ddp/reducer.h)
  std::string comm_hook = "none";      // none | fp16 | bf16 | powersgd | topk
  // The type gradients and activations travel in between ranks (DDP without a comm_hook, ZeRO's
  // reduce-scatter, the mesh's data-parallel all-reduce, its pipeline's activations and gradients,
  // its tensor-parallel all-reduces): "auto" is bf16 when train.precision = "bf16", else fp32. The
  // backends sum bf16 in fp32 and results arrive as fp32, so mostly the bytes on the wire change.
  std::string reduce_dtype = "auto";   // auto | fp32 | bf16
  int64_t powersgd_rank = 4;           // r of the low-rank approximation
  int64_t powersgd_start_iter = 10;    // plain all-reduce before this step
  double topk_ratio = 0.01;            // fraction of each bucket sent
  bool find_unused_parameters = false;
  bool sync_batchnorm = false;         // BatchNorm layers normalise over the global batch
  // Parameter servers (strategy = "ps"; tessera/parallel/ps). The optimizer runs on the servers.
  int64_t servers = 1;                 // server processes `tessera train --nproc N` starts beside N workers
  std::string ps_mode = "sync";        // sync | async | ssp (bounded staleness)
  int64_t staleness = 2;               // ssp: the most steps a worker may run ahead of the slowest
  // The address servers listen on (and publish to workers); "auto": loopback when the job's master
  // is on this machine's loopback, else the address of the interface that reaches the master.
  std::string ps_host = "auto";
  // Fault injection for tests and drills: worker debug_slow_rank sleeps debug_slow_ms every step;
  // worker debug_kill_rank sends itself SIGKILL at step debug_kill_step. -1: off.
  int64_t debug_slow_rank = -1, debug_slow_ms = 0;
  int64_t debug_kill_rank = -1, debug_kill_step = 0;
  // Where in step debug_kill_step: "step" (after it), or "commit" (after its optimizer update,
  // before a live ZeRO job's pieces go to the neighbour: the members then redo that step).
  std::string debug_kill_point = "step";
  // Worker debug_stop_rank sends itself SIGSTOP at step debug_stop_step (a stalled process). Under the
  // elastic agent both fire in generation 0 only, so the restarted job does not fail again.
  int64_t debug_stop_rank = -1, debug_stop_step = 0;
  // Live membership (train/trainer_live.cpp, dist/live_membership.h): a lost rank's peers go on
  // without restarting, and new ranks join the running job. "auto": on for a DDP job under the
  // elastic agent (`tessera run --nnodes MIN:MAX`); "on": under any `tessera run` too; "off": a
  // lost rank ends the generation and every worker restarts from the survivors' save.
  std::string live_membership = "auto";
  int64_t live_settle_ms = 300;  // a membership round closes once nobody has arrived for this long
};

// Model parallelism (tessera/parallel/pipeline, tessera/parallel/tensor) on a DP × PP × TP mesh
// (device_mesh.h). Used when pp · tp > 1; train.batch_size is then per data-parallel replica.
struct ParallelConfig {
  int64_t dp = 0;                    // data-parallel replicas; 0: the world size / (pp · tp)
  int64_t pp = 1;                    // pipeline stages
  int64_t tp = 1;                    // tensor-parallel ranks (the transformer only)
  bool sequence_parallel = false;    // with tp: LayerNorms and dropout on each rank's tokens (parallel/tensor/sequence_parallel.h)
  int64_t tp_overlap_chunks = 4;     // with sequence_parallel: pieces its all-gathers / reduce-scatters are cut into, overlapped with the matmuls (1: none)
  int64_t ep = 1;                    // expert-parallel ranks: the data-parallel ranks spread each mixture's experts
  int64_t cp = 1;                    // context-parallel ranks: each sequence cut over that many data-parallel ranks (the transformer)
  std::string cp_attention = "ring";  // ring | ulysses: how attention spans the cut sequence (parallel/context)
  std::string schedule = "1f1b";     // gpipe | 1f1b | interleaved | zb-h1 | zb-v (parallel/pipeline/schedule.h)
  int64_t microbatches = 4;          // per step; train.batch_size must be a multiple
  int64_t virtual_stages = 1;        // model chunks per stage: 2 or more with the interleaved schedule (zb-v: always 2)
  std::string balance = "parameters";  // parameters | time: how layers are cut into stages
};

// What a run writes beside metrics.jsonl for people to look at (tessera/observe).
struct ObservabilityConfig {
  std::string tensorboard;  // a directory: TensorBoard event files of every metric (rank 0); "" = none
  bool trace = false;       // each rank's timeline in <output_dir>/trace/rank-R.json (observe/trace.h)
};

struct TrainConfig {
  ModelConfig model;
  DataConfig data;
  OptimizerConfig optimizer;
  ScheduleConfig schedule;
  RunConfig train;
  DistributedConfig distributed;
  ParallelConfig parallel;
  ObservabilityConfig observability;
};

// True when the config asks for pipeline or tensor parallelism.
inline bool uses_model_parallelism(const TrainConfig& c) { return c.parallel.pp * c.parallel.tp > 1; }
// distributed.timeout_s as the process groups, stores and rendezvous take it.
inline std::chrono::milliseconds collective_timeout(const TrainConfig& c) {
  return std::chrono::milliseconds(static_cast<int64_t>(c.distributed.timeout_s * 1000.0));
}
// The type gradients and activations travel in between ranks: distributed.reduce_dtype, "auto"
// following train.precision (bfloat16 under bf16, else float32).
inline DType wire_dtype(const TrainConfig& c) {
  const bool bf16 =
      c.distributed.reduce_dtype == "bf16" || (c.distributed.reduce_dtype == "auto" && c.train.precision == "bf16");
  return bf16 ? DType::BFloat16 : DType::Float32;
}
// The autocast precision train.precision names (autograd/autocast.h).
inline DType precision_dtype(const TrainConfig& c) {
  return c.train.precision == "bf16" ? DType::BFloat16 : c.train.precision == "fp16" ? DType::Float16 : DType::Float32;
}

// Parses TOML text; `source` names the file in errors.
TrainConfig parse_config(const std::string& toml_text, const std::string& source);
TrainConfig load_config(const std::string& path);
// Applies one "section.key=value" override (the value parsed as the key's type).
void apply_override(TrainConfig& config, const std::string& assignment);
// Checks values (names, ranges) and that the model fits the rest (its dataset, keys and layouts:
// train/model_registry.h); throws ValueError naming the key. config_validation.cpp.
void validate(const TrainConfig& config);
// The checks that need no model: every setting's name and range, and how settings combine.
void check_settings(const TrainConfig& config);
// Canonical TOML of every key (stored in checkpoints, so `tessera eval` can rebuild the run).
std::string to_toml(const TrainConfig& config);
// All known dotted keys (for help and suggestions).
std::vector<std::string> known_keys();

}  // namespace tessera::train
