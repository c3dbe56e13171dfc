// tessera bench train-step | matmul | comm | ddp | ps | zero | model-parallel | tp-overlap | plan | infer | serve | ray | live
#include "bench/bench.h"
#include "cli/commands.h"

namespace tessera::cli {

Command add_bench_command(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "Benchmarks, measured beside the reference in the same run");
  bench->require_subcommand(1);

  auto ts = std::make_shared<bench::TrainStepOptions>();
  ts->script = std::string(TESSERA_SOURCE_DIR) + "/bench/torch_train_step.py";
  auto* train_step = bench->add_subcommand("train-step", "Forward+backward+SGD step, MLP and CNN at batch 128, vs PyTorch");
  train_step->add_option("--threads-list", ts->threads, "Comma-separated thread counts")->capture_default_str();
  train_step->add_option("--models", ts->models, "Comma-separated models (mlp, cnn, gpt)")->capture_default_str();
  train_step->add_option("--repeats", ts->repeats, "Timed repeats per cell")->capture_default_str()->check(CLI::Range(1, 100));
  train_step->add_option("--mlp-steps", ts->mlp_steps, "Steps per MLP repeat")->capture_default_str()->check(CLI::Range(1, 100000));
  train_step->add_option("--cnn-steps", ts->cnn_steps, "Steps per CNN repeat")->capture_default_str()->check(CLI::Range(1, 100000));
  train_step->add_option("--gpt-steps", ts->gpt_steps, "Steps per GPT repeat")->capture_default_str()->check(CLI::Range(1, 100000));
  train_step->add_flag("!--no-torch", ts->with_torch, "Skip the PyTorch reference");
  train_step->add_option("--python", ts->python, "Python with torch (default: the venv of scripts/setup.sh --bench)")
      ->capture_default_str();
  train_step->add_flag("!--no-compile", ts->with_compile, "Skip the torch.compile column");
  train_step->add_option("--torch-script", ts->script, "Path of torch_train_step.py")->capture_default_str();
  ts->python_script = std::string(TESSERA_SOURCE_DIR) + "/bench/python_train_step.py";
  ts->python_path = std::string(TESSERA_BINARY_DIR) + "/python";
  train_step->add_option("--precision", ts->precision, "fp32, bf16 or fp16 (mixed precision: autograd/autocast.h)")
      ->capture_default_str();
  train_step->add_option("--device", ts->device, "cpu, or cuda[:N]: tessera and PyTorch on that GPU")
      ->capture_default_str();
  train_step->add_flag("!--no-python", ts->with_python, "Skip the same step written in Python (tessera's module)");
  train_step->add_option("--python-path", ts->python_path, "Directory holding the tessera Python package")
      ->capture_default_str();

  struct MatmulOptions {
    int n = 1024, repeats = 5;
    std::string threads = "1,2";
    std::string device = "cpu";
  };
  auto mm = std::make_shared<MatmulOptions>();
  auto cuda_mm = std::make_shared<bench::CudaMatmulOptions>();
  cuda_mm->script = std::string(TESSERA_SOURCE_DIR) + "/bench/torch_matmul.py";
  auto* matmul = bench->add_subcommand("matmul", "GEMM GFLOP/s: on the CPU against the measured FP32 peak, on a CUDA "
                                                 "device (--device cuda:N) beside torch.matmul");
  matmul->add_option("-n", mm->n, "Matrix size (CPU)")->capture_default_str()->check(CLI::Range(1, 16384));
  matmul->add_option("--threads-list", mm->threads, "Comma-separated thread counts (CPU)")->capture_default_str();
  matmul->add_option("--repeats", mm->repeats, "Timed repeats")->capture_default_str()->check(CLI::Range(1, 1000));
  matmul->add_option("--device", mm->device, "cpu or cuda:N")->capture_default_str();
  matmul->add_option("--sizes", cuda_mm->sizes, "Comma-separated n (CUDA)")->capture_default_str();
  matmul->add_option("--precisions", cuda_mm->precisions, "Comma-separated fp32, tf32, bf16 (CUDA)")->capture_default_str();
  matmul->add_option("--iters", cuda_mm->iters, "Products per timed batch (CUDA)")->capture_default_str()->check(CLI::Range(1, 10000));
  matmul->add_flag("!--no-torch", cuda_mm->with_torch, "Skip the PyTorch reference (CUDA)");
  matmul->add_option("--python", cuda_mm->python, "Interpreter of the PyTorch reference (default: the bench venv's, else /usr/bin/python3)");
  matmul->add_option("--script", cuda_mm->script, "Path of bench/torch_matmul.py");

  auto cm = std::make_shared<bench::CommOptions>();
  auto* comm = bench->add_subcommand(
      "comm", "Collective bandwidth (nccl-tests table); run under `tessera run --nproc-per-node N --` or mpirun");
  comm->add_option("--backend", cm->backend, "auto, gloo, tcp, shm or mpi")->capture_default_str();
  comm->add_option("--op", cm->op, "allreduce, broadcast, allgather, reduce_scatter or alltoall")->capture_default_str();
  comm->add_option("--min-bytes", cm->min_bytes, "Smallest size")->capture_default_str();
  comm->add_option("--max-bytes", cm->max_bytes, "Largest size (doubling from --min-bytes)")->capture_default_str();
  comm->add_option("--iters", cm->iters, "Timed calls per size (0: about 64 MiB of traffic, 5..200)")->capture_default_str();
  comm->add_option("--warmup", cm->warmup, "Untimed calls per size")->capture_default_str();
  comm->add_option("--timeout-ms", cm->timeout_ms, "Per-operation timeout")->capture_default_str();
  comm->add_flag("--json", cm->json, "One JSON object per size instead of the table");
  comm->add_flag("--cold", cm->cold,
                 "Evict the caches (a 64 MiB write) and meet at a barrier before each timed call, as inside a "
                 "training step; the mean of the calls alone");
  comm->add_flag("--symmetric", cm->symmetric,
                 "allreduce: buffers in symmetric memory (ProcessGroup::symmetric_zeros, as DDP's buckets)");

  auto dd = std::make_shared<bench::DdpBenchOptions>();
  dd->script = std::string(TESSERA_SOURCE_DIR) + "/bench/torch_ddp.py";
  auto* ddp = bench->add_subcommand("ddp", "DDP training samples/s with N processes x 1 thread, vs PyTorch DDP (gloo)");
  ddp->add_option("--models", dd->models, "Comma-separated models (mlp, cnn, gpt)")->capture_default_str();
  ddp->add_option("--nproc", dd->nproc, "Processes")->capture_default_str()->check(CLI::Range(1, 64));
  ddp->add_option("--batch", dd->batch, "Batch per process")->capture_default_str()->check(CLI::Range(1, 65536));
  ddp->add_option("--steps", dd->steps, "Timed steps")->capture_default_str()->check(CLI::Range(1, 100000));
  ddp->add_option("--warmup", dd->warmup, "Untimed steps first")->capture_default_str()->check(CLI::Range(0, 100000));
  ddp->add_option("--repeats", dd->repeats, "Runs of each, alternating")->capture_default_str()->check(CLI::Range(1, 100));
  ddp->add_option("--backend", dd->backend, "auto, gloo, tcp, shm or mpi")->capture_default_str();
  ddp->add_option("--comm-hook", dd->comm_hook, "none, fp16, bf16, powersgd or topk")->capture_default_str();
  ddp->add_option("--bucket-mb", dd->bucket_mb, "DDP bucket cap in MiB (the first bucket: at most 1); 0: DDP's auto")
      ->check(CLI::Range(0.0, 4096.0))
      ->capture_default_str();
  ddp->add_flag("!--no-torch", dd->with_torch, "Skip the PyTorch reference");
  ddp->add_option("--python", dd->python, "Python with torch (default: the venv of scripts/setup.sh --bench)")
      ->capture_default_str();
  ddp->add_flag("!--no-compile", dd->with_compile, "Skip PyTorch's DDP under torch.compile");
  ddp->add_option("--hosts", dd->hosts, "Run across this many test hosts (scripts/cluster.sh; needs root), --nproc on each")
      ->capture_default_str()
      ->check(CLI::Range(1, 16));
  ddp->add_option("--links", dd->links, "With --hosts: comma-separated link rates (unshaped, or tc rates such as 1gbit)")
      ->capture_default_str();
  ddp->add_option("--comm-hooks", dd->comm_hooks, "With --hosts: comma-separated comm hooks to compare")->capture_default_str();
  ddp->add_flag("--worker", dd->worker, "Internal: one rank of a measured job")->group("");

  auto pb = std::make_shared<bench::PsBenchOptions>();
  auto* psb = bench->add_subcommand("ps", "Parameter-server samples/s and bytes per step (sync, async, ssp) vs DDP, "
                                          "for the MLP and a 1M-row bag-of-words embedding");
  psb->add_option("--models", pb->models, "Comma-separated models (mlp, bow)")->capture_default_str();
  psb->add_option("--modes", pb->modes, "Comma-separated modes (ddp, sync, async, ssp)")->capture_default_str();
  psb->add_option("--workers", pb->workers, "Worker processes")->capture_default_str()->check(CLI::Range(1, 64));
  psb->add_option("--servers", pb->servers, "Server processes")->capture_default_str()->check(CLI::Range(1, 64));
  psb->add_option("--batch", pb->batch, "Batch per worker")->capture_default_str()->check(CLI::Range(1, 65536));
  psb->add_option("--steps", pb->steps, "Timed steps")->capture_default_str()->check(CLI::Range(1, 100000));
  psb->add_option("--warmup", pb->warmup, "Untimed steps first")->capture_default_str()->check(CLI::Range(0, 100000));
  psb->add_option("--repeats", pb->repeats, "Runs of each")->capture_default_str()->check(CLI::Range(1, 100));
  psb->add_option("--vocab", pb->vocab, "Rows of the bow embedding")->capture_default_str()->check(CLI::Range(1, 1 << 30));
  psb->add_option("--staleness", pb->staleness, "Bound of the ssp mode")->capture_default_str()->check(CLI::Range(0, 1000));
  psb->add_option("--hosts", pb->hosts, "Run across this many test hosts (scripts/cluster.sh; needs root), --workers "
                                       "and --servers on each")
      ->capture_default_str()
      ->check(CLI::Range(1, 16));
  psb->add_option("--links", pb->links, "With --hosts: comma-separated link rates (unshaped, or tc rates such as 1gbit)")
      ->capture_default_str();
  psb->add_flag("--worker", pb->worker, "Internal: one process of a measured job")->group("");

  auto zo = std::make_shared<bench::ZeroBenchOptions>();
  auto* zb = bench->add_subcommand("zero", "Per-rank memory (parameters, gradients, optimizer state, activations) and "
                                           "samples/s of DDP and ZeRO stages 1-3, and the largest GPT under a memory cap");
  zb->add_option("--nprocs", zo->nprocs, "Comma-separated world sizes")->capture_default_str();
  zb->add_option("--modes", zo->modes, "Comma-separated modes (ddp, zero1, zero2, zero3)")->capture_default_str();
  zb->add_option("--embed", zo->embed, "GPT width d")->capture_default_str()->check(CLI::Range(8, 8192));
  zb->add_option("--heads", zo->heads, "Attention heads")->capture_default_str()->check(CLI::Range(1, 256));
  zb->add_option("--layers", zo->layers, "Blocks of the throughput table's GPT")->capture_default_str()->check(CLI::Range(1, 1024));
  zb->add_option("--context", zo->context, "Sequence length")->capture_default_str()->check(CLI::Range(1, 8192));
  zb->add_option("--batch", zo->batch, "Sequences per process and step")->capture_default_str()->check(CLI::Range(1, 65536));
  zb->add_option("--steps", zo->steps, "Timed steps")->capture_default_str()->check(CLI::Range(1, 100000));
  zb->add_option("--warmup", zo->warmup, "Untimed steps first")->capture_default_str()->check(CLI::Range(0, 100000));
  zb->add_option("--cap-mb", zo->cap_mb, "Per-process memory budget of the largest-model search (0: skip it)")
      ->capture_default_str()->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  zb->add_option("--max-layers", zo->max_layers, "Upper end of the search")->capture_default_str()->check(CLI::Range(1, 4096));
  zb->add_flag("--activation-checkpointing", zo->checkpointing, "Checkpoint every transformer block's activations");
  zb->add_flag("--worker", zo->worker, "Internal: one rank of a measured job")->group("");
  zb->add_option("--mode", zo->mode, "Internal")->group("");

  auto mo = std::make_shared<bench::ModelParallelBenchOptions>();
  auto* mpb = bench->add_subcommand("model-parallel", "Pipeline bubble vs theory, peak memory per rank and tokens/s "
                                                      "per layout (PP, TP, DP x PP, DP x TP) of a GPT-style model");
  mpb->add_option("--embed", mo->embed, "Embedding width")->capture_default_str()->check(CLI::Range(8, 8192));
  mpb->add_option("--layers", mo->layers, "Transformer blocks")->capture_default_str()->check(CLI::Range(2, 256));
  mpb->add_option("--heads", mo->heads, "Attention heads")->capture_default_str()->check(CLI::Range(1, 256));
  mpb->add_option("--context", mo->context, "Sequence length")->capture_default_str()->check(CLI::Range(1, 8192));
  mpb->add_option("--batch", mo->batch, "Sequences per replica and step")->capture_default_str()->check(CLI::Range(1, 65536));
  mpb->add_option("--steps", mo->steps, "Timed steps")->capture_default_str()->check(CLI::Range(1, 100000));
  mpb->add_option("--warmup", mo->warmup, "Untimed steps first")->capture_default_str()->check(CLI::Range(0, 100000));
  mpb->add_option("--bubble-microbatches", mo->bubble_microbatches, "Micro-batch counts of the bubble sweep")
      ->capture_default_str();
  mpb->add_option("--bubble-stages", mo->bubble_stages, "Pipeline stages of the bubble sweep")
      ->capture_default_str()->check(CLI::Range(2, 64));
  mpb->add_option("--schedules", mo->schedules, "Schedules of the bubble sweep (gpipe, 1f1b, interleaved, zb-h1, zb-v)")
      ->capture_default_str();
  mpb->add_option("--virtual-stages", mo->virtual_stages, "Model chunks per stage of the interleaved schedule")
      ->capture_default_str()->check(CLI::Range(2, 64));
  mpb->add_flag("--no-layouts", mo->no_layouts, "Only the bubble sweep, not the table of layouts");
  mpb->add_flag("--worker", mo->worker, "Internal: one rank of a measured job")->group("");
  mpb->add_option("--dp", mo->dp, "Internal")->group("");
  mpb->add_option("--pp", mo->pp, "Internal")->group("");
  mpb->add_option("--tp", mo->tp, "Internal")->group("");
  mpb->add_flag("--sequence-parallel", mo->sequence_parallel, "Internal")->group("");
  mpb->add_option("--schedule", mo->schedule, "Internal")->group("");
  mpb->add_option("--microbatches", mo->microbatches, "Internal")->group("");

  auto to = std::make_shared<bench::TpOverlapBenchOptions>();
  auto* tpo = bench->add_subcommand("tp-overlap", "Sequence-parallel TP=2: the share of its communication that the "
                                                  "chunked overlap with the matmuls hides, one GPT block");
  tpo->add_option("--embed", to->embed, "Embedding width")->capture_default_str()->check(CLI::Range(8, 8192));
  tpo->add_option("--heads", to->heads, "Attention heads (even)")->capture_default_str()->check(CLI::Range(2, 256));
  tpo->add_option("--context", to->context, "Sequence length (even)")->capture_default_str()->check(CLI::Range(2, 65536));
  tpo->add_option("--batch", to->batch, "Sequences per pass")->capture_default_str()->check(CLI::Range(1, 65536));
  tpo->add_option("--chunks", to->chunks, "Comma-separated chunk counts of the overlapped variants")->capture_default_str();
  tpo->add_option("--iters", to->iters, "Timed rounds")->capture_default_str()->check(CLI::Range(1, 100000));
  tpo->add_option("--warmup", to->warmup, "Untimed rounds first")->capture_default_str()->check(CLI::Range(0, 100000));
  tpo->add_flag("--worker", to->worker, "Internal: one rank of the measured job")->group("");

  auto plo = std::make_shared<bench::PlanBenchOptions>();
  auto* plb = bench->add_subcommand("plan", "tessera plan --predict against real jobs: predicted and measured step "
                                            "times, their error and rank correlation");
  plb->add_option("--layouts", plo->layouts, "Comma-separated model:layout:world (ddp, zero1-3, mesh-dpXppYtpZ)")
      ->capture_default_str();
  plb->add_option("--steps", plo->steps, "Steps of each real run (the step time: the median from step 6)")
      ->capture_default_str()
      ->check(CLI::Range(10, 100000));
  plb->add_option("--dir", plo->dir, "Where the runs write (default: under the system's temp)");

  auto so = std::make_shared<bench::ServeBenchOptions>();
  auto* infer = bench->add_subcommand("infer", "Offline batched inference samples/s of a checkpoint's model");
  infer->add_option("checkpoint", so->checkpoint, "A run or checkpoint directory")->required();
  infer->add_option("--batches", so->batches, "Comma-separated batch sizes")->capture_default_str();
  infer->add_option("--seconds", so->seconds, "Seconds per cell")->capture_default_str()->check(CLI::Range(1, 600));
  auto* serve = bench->add_subcommand("serve", "tessera serve under wrk: requests/s, p50/p99 at each client count, vs "
                                               "offline inference");
  serve->add_option("checkpoint", so->checkpoint, "A run or checkpoint directory (e.g. runs/cnn)")->required();
  serve->add_option("--clients", so->clients, "Comma-separated concurrent connections")->capture_default_str();
  serve->add_option("--seconds", so->seconds, "Seconds per cell")->capture_default_str()->check(CLI::Range(1, 600));
  serve->add_option("--max-batch", so->max_batch, "The server's --max-batch")->capture_default_str();
  serve->add_option("--max-wait-ms", so->max_wait_ms, "The server's --max-wait-ms")->capture_default_str();
  serve->add_option("--replicas", so->replicas, "The server's --replicas")->capture_default_str();
  serve->add_option("--batch-wait", so->batch_wait, "The server's --batch-wait (adaptive, fixed)")->capture_default_str();

  auto ro = std::make_shared<bench::RayBenchOptions>();
  auto* rayb = bench->add_subcommand("ray", "tessera beside Ray on this machine: tessera.ray's DDP vs Ray Train's "
                                            "TorchTrainer, tessera tune vs Ray Tune (ASHA), tessera serve vs Ray Serve");
  rayb->add_option("--parts", ro->parts, "Comma-separated parts: train, tune, serve")->capture_default_str();
  rayb->add_option("--python", ro->python, "Python with Ray and PyTorch (default: the bench venv's)")->capture_default_str();
  rayb->add_option("--models", ro->models, "train: comma-separated models (mlp, cnn)")->capture_default_str();
  rayb->add_option("--workers", ro->workers, "train: workers of one CPU each")->capture_default_str()->check(CLI::Range(1, 64));
  rayb->add_option("--epochs", ro->epochs, "train: epochs of Fashion-MNIST")->capture_default_str()->check(CLI::Range(1, 100));
  rayb->add_option("--repeats", ro->repeats, "train: repeats (medians)")->capture_default_str()->check(CLI::Range(1, 20));
  rayb->add_option("--trials", ro->trials, "tune: trials")->capture_default_str()->check(CLI::Range(1, 1000));
  rayb->add_option("--tune-epochs", ro->tune_epochs, "tune: a trial's most epochs (ASHA's top rung)")
      ->capture_default_str()->check(CLI::Range(1, 100));
  rayb->add_option("--clients", ro->clients, "serve: comma-separated wrk connections")->capture_default_str();
  rayb->add_option("--seconds", ro->seconds, "serve: seconds per cell")->capture_default_str()->check(CLI::Range(1, 600));

  auto lo = std::make_shared<bench::LiveBenchOptions>();
  auto* liveb = bench->add_subcommand("live", "What losing one of 4 workers costs a DDP job: live membership, tessera's "
                                              "restart path and torchrun's elastic restart, side by side");
  liveb->add_option("--steps", lo->steps, "Steps of the job")->capture_default_str()->check(CLI::Range(20, 100000));
  liveb->add_option("--kill-step", lo->kill_step, "The step after which rank 2 is lost")
      ->capture_default_str()->check(CLI::Range(2, 100000));
  liveb->add_option("--repeats", lo->repeats, "Repeats (medians)")->capture_default_str()->check(CLI::Range(1, 20));
  liveb->add_option("--strategy", lo->strategy, "tessera's strategy: ddp, zero1 or zero2 (ZeRO keeps each rank's pieces "
                                                "on a neighbour under live membership)")
      ->capture_default_str()
      ->check(CLI::IsMember({"ddp", "zero1", "zero2"}));
  liveb->add_option("--python", lo->python, "Python whose torchrun is the reference")->capture_default_str();
  liveb->add_flag("!--no-torch", lo->with_torch, "Leave torchrun out");

  auto co = std::make_shared<bench::CheckpointBenchOptions>();
  auto* ckpt = bench->add_subcommand("checkpoint", "How long a checkpoint save stalls training: foreground vs "
                                                   "train.checkpoint_async, for a state of --mb MiB");
  ckpt->add_option("--mb", co->megabytes, "MiB of state (a third weights, two thirds optimizer moments)")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 65536.0));
  ckpt->add_option("--repeats", co->repeats, "Saves of each kind")->capture_default_str()->check(CLI::Range(1, 100));
  ckpt->add_option("--dir", co->dir, "Directory to write in (default: under the system's temp)");

  return {bench, [=]() -> int {
    if (ckpt->parsed()) return bench::checkpoint(*co);
    if (rayb->parsed()) return bench::ray(*ro);
    if (liveb->parsed()) {
      TESSERA_CHECK(lo->kill_step < lo->steps, "[bench live] --kill-step ", lo->kill_step, " must come before the last step ",
                    lo->steps);
      return bench::live(*lo);
    }
    if (infer->parsed()) return bench::infer(*so);
    if (serve->parsed()) return bench::serve(*so);
    if (mpb->parsed()) return bench::model_parallel(*mo);
    if (tpo->parsed()) return bench::tp_overlap(*to);
    if (plb->parsed()) return bench::plan(*plo);
    if (train_step->parsed()) return bench::train_step(*ts);
    if (psb->parsed()) return bench::ps(*pb);
    if (zb->parsed()) return bench::zero(*zo);
    if (ddp->parsed()) {
      bench::DdpBenchOptions o = *dd;
      o.model = o.models;
      return bench::ddp(o);
    }
    if (comm->parsed()) return bench::comm(*cm);
    if (mm->device != "cpu") {
      bench::CudaMatmulOptions o = *cuda_mm;
      o.device = mm->device;
      o.repeats = mm->repeats;
      return bench::matmul_cuda(o);
    }
    return bench::matmul(mm->n, mm->threads, mm->repeats);
  }};
}

}  // namespace tessera::cli
