// TensorBoard's event files, written without TensorFlow: what `[observability] tensorboard = DIR`
// makes the trainer write, so `tensorboard --logdir DIR` plots a run's scalars.
//
// The format (TensorFlow's tensorflow/core/lib/io/record_writer.cc and util/event.proto):
//   a file named events.out.tfevents.<unix seconds>.<host>[.<suffix>], a sequence of TFRecords
//     uint64 length (little-endian) | uint32 masked_crc32c(length bytes) | data | uint32 masked_crc32c(data)
//   with masked_crc32c(x) = rotate_right(crc32c(x), 15) + 0xa282ead8 (CRC-32C: Castagnoli, reflected);
//   each data an `Event` protobuf:
//     Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//     Summary { repeated Value value = 1; }   Value { string tag = 1; float simple_value = 2; }
//   the first record {wall_time, file_version: "brain.Event:2"}, then one Event per (step, scalars).
#pragma once
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tessera::observe {

uint32_t crc32c(std::string_view data);
uint32_t masked_crc32c(std::string_view data);

class TensorBoardWriter {
 public:
  // Creates `dir` and a new event file in it (a resumed run adds a file; TensorBoard reads them all).
  // IoError naming the path when it cannot.
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One Event holding every (tag, value) at `step`; flushed, so a live TensorBoard sees it.
  void write_scalars(int64_t step, const std::vector<std::pair<std::string, double>>& scalars, double wall_time);
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& data);
  std::FILE* file_ = nullptr;
  std::string path_;
};

// The scalars of a metrics.jsonl record: each number but "step", "epoch" and "unix_time" (the
// event's wall time), tagged
// "<record type>/<key>" ("step/loss", "epoch/eval_accuracy"), in the record's key order.
std::vector<std::pair<std::string, double>> scalars_of_record(const nlohmann::json& record);

// The protobuf bytes of an Event (exposed for tests).
std::string encode_scalar_event(int64_t step, double wall_time, const std::vector<std::pair<std::string, double>>& scalars);
std::string encode_file_version_event(double wall_time);

}  // namespace tessera::observe
