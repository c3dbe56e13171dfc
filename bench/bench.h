// `tessera bench ...`: speed measured side by side with the reference in the same run.
#pragma once
#include <functional>
#include <nlohmann/json.hpp>
#include <vector>
#include <string>

namespace tessera::bench {

// The interpreter of the PyTorch references: the virtual environment `scripts/setup.sh --bench` makes
// (.venv in the source tree: the newest PyTorch 2 from PyPI), else Debian's /usr/bin/python3
// (python3-torch 1.13). Every bench prints the version that ran.
std::string reference_python();

struct TrainStepOptions {
  std::string threads = "1,2";   // thread counts to measure
  std::string models = "mlp,cnn";
  int repeats = 3;
  int mlp_steps = 30;
  int cnn_steps = 10;
  int gpt_steps = 4;
  bool with_torch = true;        // also run bench/torch_train_step.py under reference_python()
  std::string python = reference_python();
  bool with_compile = true;      // also PyTorch under torch.compile (a second column)
  std::string script;            // path of torch_train_step.py (defaults to the source tree's)
  // Also the same step from Python (bench/python_train_step.py over the tessera module in
  // python_path), when that module was built.
  bool with_python = true;
  std::string precision = "fp32";  // or bf16 / fp16: every column's steps under autocast
  // cpu, or cuda[:N]: both sides' steps on that GPU (one row per model; threads do not apply)
  std::string device = "cpu";
  std::string python_script, python_path;
  // tessera's module is built for Debian's interpreter (CMakeLists.txt), not the reference's venv.
  std::string module_python = "/usr/bin/python3";
};

int train_step(const TrainStepOptions& options);

struct CommOptions {
  std::string backend = "auto";
  std::string op = "allreduce";  // allreduce, broadcast, allgather, reduce_scatter, alltoall
  size_t min_bytes = 4096;
  size_t max_bytes = 256u << 20;
  int iters = 0;   // timed calls per size; 0: about 64 MiB of traffic per size, 5..200 calls
  int warmup = 2;
  int timeout_ms = 120000;
  bool json = false;  // one JSON object per size (for bench/compare_comm.py)
  // allreduce over ProcessGroup::symmetric_zeros buffers (as DDP's buckets; nccl-tests' registered
  // buffers); reported as tessera-<backend>+symmetric
  bool symmetric = false;
  // Before each timed call every rank writes a 64 MiB scratch buffer (evicting the caches, as the
  // compute between a training step's collectives does), then the ranks meet at a barrier; the time
  // is the mean of the calls alone. The figure a collective inside a step can reach.
  bool cold = false;
};
struct DdpBenchOptions {
  std::string models = "mlp,cnn";
  int nproc = 2;
  int batch = 64;  // per process: 2 × 64 is the 128 of bench train-step
  int steps = 30;
  int warmup = 5;
  int repeats = 3;
  std::string backend = "auto";
  std::string comm_hook = "none";
  double bucket_mb = 0;         // DDP's bucket cap (PyTorch's bucket_cap_mb; 0: DDP's auto); the first bucket is min(1, this)
  bool with_torch = true;
  std::string python = reference_python();
  bool with_compile = true;  // also PyTorch's DDP under torch.compile
  std::string script;  // bench/torch_ddp.py
  bool worker = false;  // internal: one rank of a measured job (model = models)
  std::string model;
  // Across test hosts (bench/ddp_hosts.cpp) when hosts > 1: nproc processes on each host.
  int hosts = 1;
  std::string links = "unshaped,1gbit,200mbit";
  std::string comm_hooks = "none,fp16,bf16,powersgd,topk";
};
// DDP samples/s beside PyTorch's DDP (gloo), and the fraction of all-reduce time hidden behind backward.
int ddp(const DdpBenchOptions& options);
// The same loop across `hosts` test hosts at each link rate and comm hook; `one_process` measures the
// single-process reference of a model.
int ddp_across_hosts(const DdpBenchOptions& options, const std::function<nlohmann::json(const std::string& model)>& one_process);

struct ZeroBenchOptions {
  std::string nprocs = "1,2,4";
  std::string modes = "ddp,zero1,zero2,zero3";
  // The GPT of the throughput table (vocabulary 96) and of the largest-model search (d = embed).
  int64_t embed = 512, heads = 8, layers = 4, context = 32;
  int batch = 4;  // sequences per process
  int steps = 5;
  int warmup = 2;
  int64_t cap_mb = 2048;     // per-process memory budget of the largest-model search; 0: skip the search
  int64_t max_layers = 96;   // the search's upper end
  bool checkpointing = false;  // each block recomputes its activations in backward (nn/checkpoint.h)
  bool worker = false;       // internal: one rank of a measured job
  std::string mode;
};
// Per-rank memory by category and samples/s for DDP and each ZeRO stage at each world size, and the
// largest GPT (by layers) that trains under a per-process memory cap in each.
int zero(const ZeroBenchOptions& options);

struct PsBenchOptions {
  std::string models = "mlp,bow";
  std::string modes = "ddp,sync,async,ssp";  // ddp: the all-reduce baseline
  int workers = 2;
  int servers = 2;
  int batch = 64;          // per worker
  int steps = 30;
  int warmup = 5;
  int repeats = 1;
  int64_t vocab = 1000000;  // bow: rows of the embedding
  int64_t staleness = 2;
  bool worker = false;      // internal: one process of a measured job
  std::string model, mode;
  // Across test hosts (bench/ps_hosts.cpp) when hosts > 1: `workers` and `servers` on each host.
  int hosts = 1;
  std::string links = "unshaped,1gbit";
};
// Parameter-server samples/s and bytes per step in each mode against DDP, for the MLP and for an
// embedding-heavy bag-of-words model where only the rows a batch touches move.
int ps(const PsBenchOptions& options);
// The same jobs across `hosts` test hosts at each link rate (needs root).
int ps_across_hosts(const PsBenchOptions& options);

struct ModelParallelBenchOptions {
  int64_t embed = 128, layers = 8, heads = 4, context = 64;
  int64_t batch = 32;  // sequences per replica and step
  int steps = 5;
  int warmup = 2;
  std::string bubble_microbatches = "1,4,8,16";
  int bubble_stages = 2;
  std::string schedules = "gpipe,1f1b,interleaved,zb-h1,zb-v";
  int64_t virtual_stages = 2;  // of the interleaved schedule
  bool no_layouts = false;
  bool worker = false;  // internal: one rank of a measured job
  int dp = 1, pp = 1, tp = 1;
  bool sequence_parallel = false;
  std::string schedule = "1f1b";
  int64_t microbatches = 1;
};
// Pipeline bubble of each schedule against its theory (schedule.h) with the cost of one p2p message,
// peak memory per rank and tokens/s per layout (DP, PP, TP).
int model_parallel(const ModelParallelBenchOptions& options);

struct TpOverlapBenchOptions {
  int64_t embed = 256, heads = 4, context = 256;
  int64_t batch = 8;
  std::string chunks = "2,4,8";  // the overlapped variants' chunk counts
  int iters = 20;
  int warmup = 3;
  bool worker = false;  // internal: one rank of the measured job
};
// Sequence-parallel TP=2 with its collectives overlapped in chunks against one chunk (nothing
// overlapped) and plain TP, one GPT block's forward and backward: the share of the communication hidden.
int tp_overlap(const TpOverlapBenchOptions& options);

struct PlanBenchOptions {
  // model:layout:world, layout one of ddp, zero1, zero2, zero3, mesh-dpXppYtpZ.
  std::string layouts =
      "mlp:ddp:2,mlp:zero1:2,mlp:zero3:2,mlp:mesh-dp1pp2tp1:2,mlp:ddp:4,mlp:zero3:4,"
      "gpt:ddp:2,gpt:zero3:2,gpt:mesh-dp1pp2tp1:2,gpt:mesh-dp1pp1tp2:2,gpt:ddp:4,gpt:mesh-dp1pp2tp2:4,gpt:mesh-dp2pp1tp2:4";
  int steps = 30;
  std::string dir;  // where the runs write ("": under the system's temp)
};
// tessera plan --predict against real jobs of each layout: predicted and measured step times, the
// error, its mean and the rank correlation per world size.
int plan(const PlanBenchOptions& options);

struct ServeBenchOptions {
  std::string checkpoint;            // a run or checkpoint directory (the CNN of examples/cnn.toml)
  std::string batches = "1,8,32,64";  // bench infer: batch sizes
  std::string clients = "1,8,64";    // bench serve: concurrent wrk connections
  int seconds = 5;                   // per measured cell
  int64_t max_batch = 32;
  double max_wait_ms = 5;
  std::string batch_wait = "adaptive";
  int replicas = 1;
};
// Offline batched inference: samples/s of the checkpoint's model at each batch size (no HTTP).
int infer(const ServeBenchOptions& options);
// `tessera serve` under wrk (Debian's wrk) at each client count: requests/s and p50/p99 latency,
// beside the offline throughput of the same model at the server's max batch, in the same run.
int serve(const ServeBenchOptions& options);

// Shared by the benchmarks that run jobs under the launcher: the last JSON object a job's output
// holds (rank 0's report line), a file's text, and median [min-max] cells.
nlohmann::json last_json_line(const std::string& text);

struct RayBenchOptions {
  std::string parts = "train,tune,serve";
  std::string python = reference_python();  // with Ray and PyTorch (scripts/setup.sh --bench)
  // train: tessera.ray's DDP beside Ray Train's TorchTrainer
  std::string models = "mlp,cnn";
  int workers = 2, epochs = 1, repeats = 1;
  // tune: tessera tune beside Ray Tune, both with ASHA
  int trials = 16, tune_epochs = 9;
  // serve: tessera serve beside Ray Serve (@serve.batch) under wrk
  std::string clients = "1,8,64";
  int seconds = 5;
  int timeout_s = 3600;  // per part
};
// tessera and Ray doing the same training, search and serving in one run (bench/ray.cpp).
int ray(const RayBenchOptions& options);

struct LiveBenchOptions {
  int steps = 400, kill_step = 230, repeats = 3;
  std::string strategy = "ddp";  // tessera's jobs: ddp, zero1 or zero2 (torchrun's stays DDP)
  bool with_torch = true;
  std::string python = reference_python();  // torchrun beside it (scripts/setup.sh --bench)
  int timeout_s = 600;                      // per job
};
// What losing one worker of four costs: live membership, tessera's restart path, torchrun (bench/live.cpp).
int live(const LiveBenchOptions& options);

struct CheckpointBenchOptions {
  double megabytes = 512;
  int repeats = 3;
  std::string dir;  // where to write ("": a directory under the system's temp)
};

// How long a checkpoint save stalls training, foreground vs train.checkpoint_async.
int checkpoint(const CheckpointBenchOptions& options);

// Runs a shell command under coreutils' timeout (a wedged reference fails its cell instead of hanging
// the bench): its stdout, and whether it exited 0.
struct CommandOutput {
  bool ok = false;
  std::string out;
};
CommandOutput run_capture(const std::string& command, int timeout_s);
std::string read_all(const std::string& path);
double median(std::vector<double> values);
std::string median_cell(const std::vector<double>& values);

struct CudaMatmulOptions {
  std::string device = "cuda:0";
  std::string sizes = "2048,4096,8192";
  std::string precisions = "fp32,tf32,bf16";
  int repeats = 5;
  int iters = 20;
  bool with_torch = true;
  std::string python = reference_python();
  std::string script;  // bench/torch_matmul.py
};
// TFLOP/s of cuda::gemm (cuBLASLt) beside torch.matmul on the same GPU, as a ratio.
int matmul_cuda(const CudaMatmulOptions& options);

// nccl-tests-style table of one collective over the job's process group; exit 1 if a result was wrong.
int comm(const CommOptions& options);
// GFLOP/s of the sgemm path at n×n against the measured FMA peak of the same threads.
int matmul(int n, const std::string& threads, int repeats);
// Peak FP32 GFLOP/s of `threads` cores from a register-resident FMA loop (AVX-512 when the CPU has it).
double measure_fma_peak_gflops(int threads);
// The bf16 dot-product peak (AVX-512 BF16 `vdpbf16ps`, register-resident); 0 without the instruction.
double measure_bf16_peak_gflops(int threads);

}  // namespace tessera::bench
