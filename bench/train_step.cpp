// tessera bench train-step: forward + backward + SGD step at batch 128 for the MLP and the CNN, and
// 16 sequences of 128 tokens for the GPT (4 layers, d 256, 4 heads); on a GPU also GPT-2 124M's shape
// (gpt2: 8 sequences of 1024 tokens, with its model FLOP utilisation); with each thread count, in
// float32 or mixed precision (--precision bf16|fp16), beside the same step written in Python over
// tessera's module (what the bindings cost) and PyTorch's best configuration (with its CPU bf16
// autocast for bf16), all measured in the same run. --device cuda runs both sides on the GPU
// (PyTorch with its CUDA autocast), each timed repeat closed by a device synchronisation.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "bench/bench.h"
#include "bench/test_hosts.h"
#include "tessera/autograd/autocast.h"
#include "tessera/backend/cuda/device_info.h"
#include "tessera/nn/char_transformer.h"
#include "tessera/nn/models.h"
#include "tessera/ops/ops.h"
#include "tessera/optim/sgd.h"
#include "tessera/util/task_progress.h"
#include "tessera/util/thread_pool.h"

namespace tessera::bench {

namespace {

constexpr int64_t kBatch = 128;
// The GPT of issue 17: 4 layers, d 256, 4 heads, context 128, a character vocabulary; 16 sequences a
// step. Its figures are tokens/s.
constexpr int64_t kGptVocab = 96, kGptContext = 128, kGptBatch = 16;
// GPT-2 124M's shape (12 layers, d 768, 12 heads, context 1024, GPT-2's 50257-token vocabulary), 8
// sequences a step: the GPU's benchmark (--device cuda only), with its model FLOP utilisation.
constexpr int64_t kGpt2Vocab = 50257, kGpt2Context = 1024, kGpt2Batch = 8, kGpt2Dim = 768, kGpt2Layers = 12;

struct LanguageShape {
  int64_t vocab, context, batch;
};
LanguageShape language_shape(const std::string& model) {
  return model == "gpt2" ? LanguageShape{kGpt2Vocab, kGpt2Context, kGpt2Batch} : LanguageShape{kGptVocab, kGptContext, kGptBatch};
}

// Training FLOPs per token: 6 per parameter (forward and backward of every product) plus attention's
// two products, 12 · layers · context · d (PaLM's appendix B count, causal masking not discounted).
double gpt2_flops_per_token(int64_t parameters) {
  return 6.0 * static_cast<double>(parameters) + 12.0 * kGpt2Layers * kGpt2Context * kGpt2Dim;
}

// Dense bf16 tensor-core peak of the GPUs this project is lent (NVIDIA's datasheets, SXM), or 0.
double dense_bf16_peak_tflops(const std::string& gpu_name) {
  if (gpu_name.find("H100") != std::string::npos || gpu_name.find("H200") != std::string::npos) return 989.4;
  return 0.0;
}

std::shared_ptr<nn::Module> make_model(const std::string& name) {
  if (name == "mlp") return nn::make_mlp({784, 512, 256, 10});
  if (name == "cnn") return nn::make_cnn();
  nn::CharTransformerConfig c;
  if (name == "gpt2") {
    c.vocab_size = kGpt2Vocab;
    c.context = kGpt2Context;
    c.embed_dim = kGpt2Dim;
    c.heads = 12;
    c.layers = kGpt2Layers;
    return std::make_shared<nn::CharTransformer>(c);
  }
  c.vocab_size = kGptVocab;
  c.context = kGptContext;
  c.embed_dim = 256;
  c.heads = 4;
  c.layers = 4;
  return std::make_shared<nn::CharTransformer>(c);
}
constexpr int kTorchTimeoutSeconds = 900;

struct Stats {
  double median = 0, min = 0, max = 0;
  int64_t parameters = 0;  // the model's (time_tessera's)
};

Stats summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

Stats time_tessera(const std::string& model_name, int steps, int repeats, DType precision, Device device) {
  Autocast mixed(precision);
  manual_seed(0);
  auto model = make_model(model_name);
  model->to(device);
  Generator g(1);
  const bool gpt = model_name == "gpt" || model_name == "gpt2";
  const LanguageShape lm = language_shape(model_name);
  Tensor x = (gpt ? randint(0, lm.vocab, {lm.batch, lm.context}, g)
                  : model_name == "mlp" ? randn({kBatch, 784}, g) : randn({kBatch, 1, 28, 28}, g)).to(device);
  Tensor y = (gpt ? randint(0, lm.vocab, {lm.batch * lm.context}, g) : randint(0, 10, {kBatch}, g)).to(device);
  // A GPU's steps are queued: each timed stretch ends when the device has run them.
  auto wait_for_device = [&] {
    if (!device.is_cpu()) cuda::synchronize(device.index);
  };
  const int64_t per_step = gpt ? lm.batch * lm.context : kBatch;  // tokens for the GPTs
  optim::SGD opt(model->parameters(), optim::SGDOptions{0.01, 0.9});
  auto step = [&] {
    opt.zero_grad();
    Tensor out = (*model)(x);
    if (gpt) out = reshape(out, {-1, lm.vocab});
    Tensor loss = cross_entropy(out, y);
    loss.backward();
    opt.step();
  };
  for (int i = 0; i < 5; ++i) step();
  wait_for_device();
  std::vector<double> rates;
  TaskProgress progress("bench train-step " + model_name + ": repeats", repeats);  // drawn between timed repeats
  for (int r = 0; r < repeats; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) step();
    wait_for_device();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rates.push_back(static_cast<double>(per_step) * steps / s);
    progress.advance();
  }
  Stats stats = summarize(rates);
  stats.parameters = model->num_parameters();
  return stats;
}

struct TorchResult {
  bool ok = false;
  Stats stats;
  std::string config, error, version;
};

// Runs a reference script (PyTorch's, or tessera's own step from Python) whose last stdout line is
// one JSON object with samples_per_s_median/min/max.
TorchResult time_script(const std::string& command, const std::string& what) {
  TorchResult r;
  const CommandOutput run = run_capture(command + " 2>/dev/null", kTorchTimeoutSeconds);
  if (!run.ok) {
    r.error = what + " run failed or timed out (" + std::to_string(kTorchTimeoutSeconds) + " s): " + command;
    return r;
  }
  try {
    const nlohmann::json j = last_json_line(run.out);
    r.stats = {j.at("samples_per_s_median"), j.at("samples_per_s_min"), j.at("samples_per_s_max")};
    r.config = j.value("best_config", "-");
    r.version = j.value("torch_version", "");
    r.ok = true;
  } catch (const std::exception& e) {
    r.error = "could not parse the " + what + " output: " + e.what();
  }
  return r;
}

// PyTorch's best configuration, eager or under torch.compile (Inductor's C++ kernels for this CPU).
TorchResult time_torch(const TrainStepOptions& o, const std::string& model, int threads, int steps, bool compiled) {
  return time_script(o.python + " " + o.script + " --model " + model + " --threads " + std::to_string(threads) +
                         " --steps " + std::to_string(steps) + " --repeats " + std::to_string(o.repeats) +
                         " --precision " + o.precision + " --device " + o.device + (compiled ? " --compile" : ""),
                     std::string("PyTorch ") + (compiled ? "compiled" : "eager") +
                         " (scripts/setup.sh --bench installs it)");
}

TorchResult time_python(const TrainStepOptions& o, const std::string& model, int threads, int steps) {
  return time_script("env PYTHONPATH=" + o.python_path + " PYTHONDONTWRITEBYTECODE=1 " + o.module_python + " " +
                         o.python_script + " --model " + model + " --threads " + std::to_string(threads) +
                         " --steps " + std::to_string(steps) + " --repeats " + std::to_string(o.repeats) +
                         " --precision " + o.precision,
                     "tessera from Python (was the Python module built?)");
}

std::vector<int> parse_threads(const std::string& s) {
  std::vector<int> out;
  for (const auto& item : split_list(s)) {
    int n = 0;
    try {
      n = std::stoi(item);
    } catch (const std::exception&) {
    }
    TESSERA_CHECK(n >= 1 && n <= 1024, "[bench train-step] bad thread count '", item, "' in --threads-list");
    out.push_back(n);
  }
  return out;
}

}  // namespace

int train_step(const TrainStepOptions& o) {
  TESSERA_CHECK(o.precision == "fp32" || o.precision == "bf16" || o.precision == "fp16",
                "[bench train-step] --precision is fp32, bf16 or fp16, got '", o.precision, "'");
  const DType precision = o.precision == "bf16" ? DType::BFloat16 : o.precision == "fp16" ? DType::Float16 : DType::Float32;
  const Device device = parse_device(o.device);
  const bool gpu = !device.is_cpu();
  std::printf("tessera bench train-step: batch %ld (gpt: %ld x %ld tokens, figures in tokens/s), SGD(momentum 0.9), "
              "%s on %s, median [min-max] of %d repeats\n",
              static_cast<long>(kBatch), static_cast<long>(kGptBatch), static_cast<long>(kGptContext),
              o.precision.c_str(), device.str().c_str(), o.repeats);
  std::printf("%-5s %-7s %-24s %-24s %-7s %-24s %-6s %-24s %-6s %s\n", "model", "threads", "tessera samples/s",
              "from python samples/s", "py/c++", "pytorch eager", "ratio", "pytorch compiled", "ratio", "pytorch config");
  int worst = 0;
  std::string torch_version;
  for (const std::string& model : split_list(o.models)) {
    TESSERA_CHECK(model == "mlp" || model == "cnn" || model == "gpt" || model == "gpt2", "[bench train-step] unknown model '",
                  model, "' (expected mlp, cnn, gpt or gpt2)");
    TESSERA_CHECK(model != "gpt2" || gpu, "[bench train-step] gpt2 (GPT-2 124M's shape) is the GPU's benchmark: add "
                  "--device cuda");
    int steps = model == "mlp" ? o.mlp_steps : model == "cnn" ? o.cnn_steps : o.gpt_steps;
    // On a GPU the host's thread count hardly matters: one row, with one thread.
    for (int threads : gpu ? std::vector<int>{1} : parse_threads(o.threads)) {
      set_num_threads(threads);
      Stats t;
      try {
        t = time_tessera(model, steps, o.repeats, precision, device);
      } catch (const NotSupportedError& e) {  // an op without a kernel on this device: say which, go on
        std::printf("%-5s %-7d %s\n", model.c_str(), threads, e.what());
        worst = 1;
        continue;
      }
      char ts[64], pys[64] = "-", py_ratio[16] = "-";
      std::snprintf(ts, sizeof ts, "%.0f [%.0f-%.0f]", t.median, t.min, t.max);
      if (o.with_python && model != "gpt" && !gpu) {  // bench/python_train_step.py has the MLP and the CNN
        TorchResult py = time_python(o, model, threads, steps);
        if (py.ok) {
          std::snprintf(pys, sizeof pys, "%.0f [%.0f-%.0f]", py.stats.median, py.stats.min, py.stats.max);
          std::snprintf(py_ratio, sizeof py_ratio, "%.3f", py.stats.median / t.median);
        } else {
          std::snprintf(pys, sizeof pys, "failed");
          std::fprintf(stderr, "%s\n", py.error.c_str());
          worst = 1;
        }
      }
      // Two PyTorch columns, eager and compiled, each its best configuration; the ratio is ours over it.
      struct Column {
        std::string cell = "-", ratio = "-";
      } eager, compiled;
      std::string config = "-";
      auto measure = [&](bool compile, Column& column) {
        TorchResult p = time_torch(o, model, threads, steps, compile);
        if (!p.ok) {
          column.cell = "failed";
          config = p.error;
          worst = 1;
          return;
        }
        char cell[64], ratio[16];
        std::snprintf(cell, sizeof cell, "%.0f [%.0f-%.0f]", p.stats.median, p.stats.min, p.stats.max);
        std::snprintf(ratio, sizeof ratio, "%.2fx", t.median / p.stats.median);
        column = {cell, ratio};
        if (!compile) config = p.config;
        if (torch_version.empty() && !p.version.empty()) {
          torch_version = p.version;
          std::fprintf(stderr, "bench train-step: reference pytorch %s under %s\n", torch_version.c_str(), o.python.c_str());
        }
      };
      if (o.with_torch) measure(false, eager);
      if (o.with_torch && o.with_compile) measure(true, compiled);
      std::printf("%-5s %-7d %-24s %-24s %-7s %-24s %-6s %-24s %-6s %s\n", model.c_str(), threads, ts, pys, py_ratio,
                  eager.cell.c_str(), eager.ratio.c_str(), compiled.cell.c_str(), compiled.ratio.c_str(), config.c_str());
      if (model == "gpt2") {
        const double tflops = t.median * gpt2_flops_per_token(t.parameters) / 1e12;
        const std::string name = cuda::device_properties(device.index).name;
        const double peak = dense_bf16_peak_tflops(name);
        std::printf("gpt2: %lld parameters, %.1f TFLOP/s (6N + attention per token)", static_cast<long long>(t.parameters),
                    tflops);
        if (peak > 0) std::printf(", MFU %.1f%% of the %s's dense bf16 peak %.0f TFLOP/s", 100.0 * tflops / peak,
                                  name.c_str(), peak);
        std::printf("\n");
      }
      std::fflush(stdout);
    }
  }
  if (o.with_torch)
    std::printf("reference: pytorch %s (%s)\n", torch_version.empty() ? "did not run" : torch_version.c_str(),
                o.python.c_str());
  if (gpu) return worst;  // the CPU's matmul table below is no reference for a GPU run (bench matmul --device)
  std::printf("\n");
  matmul(1024, o.threads, 5);
  return worst;
}

}  // namespace tessera::bench
