// Without libFuzzer (a GCC build), each target is this driver: it runs every file of the corpus
// directories (or files) given through the target once. The suite runs it on the seed corpora, under
// the sanitizers in their builds; scripts/fuzz.sh fuzzes for real with clang's libFuzzer.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  int inputs = 0;
  auto run = [&](const fs::path& file) {
    std::ifstream in(file, std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
    ++inputs;
  };
  for (int i = 1; i < argc; ++i) {
    if (fs::is_directory(argv[i])) {
      for (const auto& entry : fs::recursive_directory_iterator(argv[i]))
        if (entry.is_regular_file()) run(entry.path());
    } else {
      run(argv[i]);
    }
  }
  std::printf("replayed %d input(s)\n", inputs);
  return inputs > 0 ? 0 : 1;
}
