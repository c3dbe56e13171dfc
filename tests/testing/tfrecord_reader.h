// A reader of TensorBoard event files written from the format's specification alone (TFRecord framing
// with masked CRC-32C, the Event / Summary / Value protobuf messages), sharing no code with
// tessera/observe/tensorboard.cpp: its CRC is the bit-by-bit definition, its protobuf decoder skips
// any field it does not know, as a real reader must.
#pragma once
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace tessera::testing {

inline uint32_t crc32c_bitwise(const std::string& data) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char byte : data) {
    crc ^= byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}

inline uint32_t masked(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

struct ScalarValue {
  std::string tag;
  float value = 0;
};

struct Event {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  std::vector<ScalarValue> values;
};

class ProtoReader {
 public:
  explicit ProtoReader(const std::string& bytes) : b_(bytes) {}
  bool done() const { return pos_ >= b_.size(); }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= b_.size()) throw std::runtime_error("varint runs past the message");
      const uint8_t c = static_cast<uint8_t>(b_[pos_++]);
      v |= static_cast<uint64_t>(c & 0x7f) << shift;
      if (!(c & 0x80)) return v;
    }
    throw std::runtime_error("varint longer than 10 bytes");
  }
  std::string take(size_t n) {
    if (n > b_.size() - pos_) throw std::runtime_error("field runs past the message");
    std::string s = b_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  // The next field's (number, wire type).
  std::pair<uint64_t, int> key() {
    const uint64_t k = varint();
    return {k >> 3, static_cast<int>(k & 7)};
  }
  void skip(int wire) {
    if (wire == 0) varint();
    else if (wire == 1) take(8);
    else if (wire == 2) take(varint());
    else if (wire == 5) take(4);
    else throw std::runtime_error("unknown wire type " + std::to_string(wire));
  }

 private:
  std::string b_;
  size_t pos_ = 0;
};

inline ScalarValue parse_value(const std::string& bytes) {
  ProtoReader r(bytes);
  ScalarValue v;
  while (!r.done()) {
    auto [field, wire] = r.key();
    if (field == 1 && wire == 2) v.tag = r.take(r.varint());
    else if (field == 2 && wire == 5) {
      const std::string f = r.take(4);
      std::memcpy(&v.value, f.data(), 4);
    } else r.skip(wire);
  }
  return v;
}

inline Event parse_event(const std::string& bytes) {
  ProtoReader r(bytes);
  Event e;
  while (!r.done()) {
    auto [field, wire] = r.key();
    if (field == 1 && wire == 1) {
      const std::string f = r.take(8);
      std::memcpy(&e.wall_time, f.data(), 8);
    } else if (field == 2 && wire == 0) {
      e.step = static_cast<int64_t>(r.varint());
    } else if (field == 3 && wire == 2) {
      e.file_version = r.take(r.varint());
    } else if (field == 5 && wire == 2) {
      ProtoReader summary(r.take(r.varint()));
      while (!summary.done()) {
        auto [f, w] = summary.key();
        if (f == 1 && w == 2) e.values.push_back(parse_value(summary.take(summary.varint())));
        else summary.skip(w);
      }
    } else {
      r.skip(wire);
    }
  }
  return e;
}

// Every event of a file; std::runtime_error naming the record on a bad length or CRC.
inline std::vector<Event> read_event_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  const std::string bytes = s.str();
  std::vector<Event> events;
  size_t pos = 0;
  while (pos < bytes.size()) {
    const std::string where = "record " + std::to_string(events.size()) + " of " + path;
    if (bytes.size() - pos < 12) throw std::runtime_error(where + ": truncated header");
    const std::string length_bytes = bytes.substr(pos, 8);
    uint64_t length = 0;
    uint32_t length_crc = 0, data_crc = 0;
    std::memcpy(&length, length_bytes.data(), 8);
    std::memcpy(&length_crc, bytes.data() + pos + 8, 4);
    if (length_crc != masked(crc32c_bitwise(length_bytes))) throw std::runtime_error(where + ": length CRC mismatch");
    if (length > bytes.size() - pos - 16) throw std::runtime_error(where + ": truncated data");
    const std::string data = bytes.substr(pos + 12, length);
    std::memcpy(&data_crc, bytes.data() + pos + 12 + length, 4);
    if (data_crc != masked(crc32c_bitwise(data))) throw std::runtime_error(where + ": data CRC mismatch");
    events.push_back(parse_event(data));
    pos += 16 + length;
  }
  return events;
}

}  // namespace tessera::testing
