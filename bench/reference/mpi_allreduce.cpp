// The Open MPI reference for `tessera bench comm`: MPI_Allreduce (float32, sum) at the same sizes
// and with the same method (check, warm-up, barrier, timed calls, slowest rank's mean), printing
// the same JSON lines. Built as tessera_ref_mpi_allreduce when CMake finds MPI; run with
//   mpirun --allow-run-as-root --oversubscribe -np N build/tessera_ref_mpi_allreduce [min max]
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  size_t min_bytes = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 4096;
  size_t max_bytes = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : (256u << 20);
  for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
    long count = static_cast<long>(bytes / 4) / world * world;
    if (count == 0) continue;
    std::vector<float> data(static_cast<size_t>(count));
    auto value = [](int r, long i) { return static_cast<float>((r + 1) + i % 7); };
    for (long i = 0; i < count; ++i) data[static_cast<size_t>(i)] = value(rank, i);
    MPI_Allreduce(MPI_IN_PLACE, data.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    long wrong = 0;
    for (long i = 0; i < count; ++i) {
      float want = 0;
      for (int r = 0; r < world; ++r) want += value(r, i);
      wrong += data[static_cast<size_t>(i)] != want;
    }
    int iters = static_cast<int>(std::clamp(64.0 * (1 << 20) / static_cast<double>(bytes), 5.0, 200.0));
    for (int i = 0; i < 2; ++i)
      MPI_Allreduce(MPI_IN_PLACE, data.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double start = MPI_Wtime();
    for (int i = 0; i < iters; ++i)
      MPI_Allreduce(MPI_IN_PLACE, data.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double mean = (MPI_Wtime() - start) / iters, slowest = 0;
    long all_wrong = 0;
    MPI_Allreduce(&mean, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(&wrong, &all_wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
      double size = static_cast<double>(count) * 4, algbw = size / slowest / 1e9;
      double busbw = world > 1 ? algbw * 2.0 * (world - 1) / world : algbw;
      std::printf("{\"impl\": \"openmpi\", \"op\": \"allreduce\", \"ranks\": %d, \"bytes\": %ld, \"time_us\": %.2f, "
                  "\"algbw\": %.4f, \"busbw\": %.4f, \"wrong\": %ld}\n",
                  world, count * 4, slowest * 1e6, algbw, busbw, all_wrong);
      std::fflush(stdout);
    }
  }
  MPI_Finalize();
  return 0;
}
