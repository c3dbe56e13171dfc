// Tables split into CSV partitions, each rank reading only its own files (as Spark's and Dask's
// workers do): logistic regression by full-batch gradient descent, whose gradient is summed over the
// ranks and divided by the global row count, and k-means with one all-reduce per iteration. Both
// follow one process on the whole table. Without data it writes a synthetic table first.
//
//   build/tessera run --nproc-per-node 4 -- build/examples/cpp/tabular [--steps 300] [--out DIR]
#include <filesystem>
#include <fstream>
#include <random>

#include "common.h"
#include "tessera/data/csv.h"
#include "tessera/io/atomic_file.h"
#include "tessera/parallel/kmeans.h"

using namespace tessera;

// `files` partitions of `rows` rows each: 10 features around one of 3 class centres, label last.
void write_table(const std::string& dir, int files, int rows, uint64_t stream) {
  std::filesystem::create_directories(dir);
  std::mt19937_64 centres_rng(11), rng(100 + stream);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::vector<float>> centre(3, std::vector<float>(10));
  for (auto& c : centre)
    for (float& v : c) v = 1.5f * normal(centres_rng);
  for (int file = 0; file < files; ++file) {
    std::ostringstream out;
    out << "x0,x1,x2,x3,x4,x5,x6,x7,x8,x9,label\n";
    for (int row = 0; row < rows; ++row) {
      const int label = static_cast<int>(rng() % 3);
      for (float v : centre[static_cast<size_t>(label)]) out << v + normal(rng) << ",";
      out << label << "\n";
    }
    char name[32];
    std::snprintf(name, sizeof name, "/part-%05d.csv", file);
    io::write_file_atomic(dir + name, out.str());
  }
}

int main(int argc, char** argv) {
  example::Args args = example::parse_args(argc, argv);
  const int64_t steps = args.steps == 200 ? 300 : args.steps;
  dist::ProcessGroupPtr group = dist::init_process_group();
  const int rank = group->rank(), world = group->size();
  const std::string dir = args.out + "/tabular-data";
  if (rank == 0 && !std::filesystem::exists(dir + "/test/part-00001.csv")) {
    write_table(dir + "/train", 8, 500, 0);
    write_table(dir + "/test", 4, 250, 1);
  }
  group->barrier()->wait();
  auto mine = [&](const std::string& split) {
    return data::load_csv(data::csv_partition_of(data::csv_files(dir + "/" + split), rank, world)).data;
  };
  auto train = mine("train");
  auto sum = [&](float v) {  // over the ranks
    Tensor t = full({1}, v);
    group->allreduce(t)->wait();
    return t.item<float>();
  };
  const float rows = sum(static_cast<float>(train->size()));

  // Softmax regression from zero weights: the mean loss over all rows, summed from each rank's part.
  auto model = std::make_shared<nn::Linear>(10, 3);
  {
    NoGradGuard no_grad;  // written in place: not a step to differentiate
    fill_(model->weight, 0.0f), fill_(model->bias, 0.0f);
  }
  optim::SGD optimizer(model->parameters(), optim::SGDOptions{.lr = 0.5});
  for (int64_t step = 1; step <= steps; ++step) {
    Tensor loss = mul(cross_entropy((*model)(train->inputs()), train->targets()), train->size() / rows);
    optimizer.zero_grad();
    loss.backward();
    for (const Tensor& p : model->parameters()) group->allreduce(p.grad())->wait();
    optimizer.step();
    const float total = sum(loss.item<float>());
    if (rank == 0 && (step == 1 || step % 100 == 0)) std::printf("step %lld loss %.4f\n", static_cast<long long>(step), total);
  }
  auto test = mine("test");
  NoGradGuard no_grad;
  const Tensor hits = eq(argmax((*model)(test->inputs()), 1), test->targets());
  const float accuracy = sum(tessera::sum(hits).item<float>()) / sum(static_cast<float>(test->size()));

  // k-means over the same partitions, from the first 3 rows of the first file (every rank reads them).
  Tensor first = data::load_csv({data::csv_files(dir + "/train").front()}).data->inputs();
  parallel::KMeansResult km = parallel::kmeans(train->inputs(), contiguous(slice(first, 0, 0, 3)), {}, group.get());
  if (rank == 0) {
    std::printf("%d rank(s), %.0f training rows: test accuracy %.4f; k-means inertia %.3f after %lld iterations\n",
                world, rows, accuracy, km.inertia, static_cast<long long>(km.iterations));
    io::save_safetensors(args.out + "/tabular-result.safetensors",
                         {{"weight", model->weight}, {"bias", model->bias}, {"centroids", km.centroids}});
  }
  return 0;
}
