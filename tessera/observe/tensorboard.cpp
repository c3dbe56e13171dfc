#include "tessera/observe/tensorboard.h"

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <unistd.h>

#include "tessera/core/error.h"

namespace tessera::observe {

namespace {

// CRC-32C, reflected polynomial 0x82F63B78, one table of 256 (a record is small; speed is no concern).
constexpr std::array<uint32_t, 256> kCrcTable = [] {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}();

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}

template <typename T>
void put_fixed(std::string& out, T v) {  // little-endian, as this machine stores it
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));
  out.append(bytes, sizeof(T));
}

void put_bytes_field(std::string& out, int field, std::string_view bytes) {
  put_varint(out, static_cast<uint64_t>(field) << 3 | 2);  // wire type 2: length-delimited
  put_varint(out, bytes.size());
  out.append(bytes);
}

std::string event_head(double wall_time) {
  std::string e;
  put_varint(e, 1 << 3 | 1);  // wall_time: wire type 1, 64-bit
  put_fixed(e, wall_time);
  return e;
}

}  // namespace

std::vector<std::pair<std::string, double>> scalars_of_record(const nlohmann::json& record) {
  std::vector<std::pair<std::string, double>> out;
  const std::string type = record.contains("type") && record["type"].is_string() ? record["type"].get<std::string>() : "run";
  for (const auto& [key, value] : record.items())
    if (value.is_number() && key != "step" && key != "epoch" && key != "unix_time") out.emplace_back(type + "/" + key, value.get<double>());
  return out;
}

uint32_t crc32c(std::string_view data) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : data) c = kCrcTable[(c ^ b) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(std::string_view data) {
  const uint32_t c = crc32c(data);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string encode_file_version_event(double wall_time) {
  std::string e = event_head(wall_time);
  put_bytes_field(e, 3, "brain.Event:2");
  return e;
}

std::string encode_scalar_event(int64_t step, double wall_time, const std::vector<std::pair<std::string, double>>& scalars) {
  std::string e = event_head(wall_time);
  put_varint(e, 2 << 3 | 0);  // step: varint (two's complement for negatives, as protobuf's int64)
  put_varint(e, static_cast<uint64_t>(step));
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string v;
    put_bytes_field(v, 1, tag);
    put_varint(v, 2 << 3 | 5);  // simple_value: wire type 5, 32-bit
    put_fixed(v, static_cast<float>(value));
    put_bytes_field(summary, 1, v);
  }
  put_bytes_field(e, 5, summary);
  return e;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw IoError("[tensorboard] cannot create " + dir + ": " + ec.message());
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  const auto now = std::chrono::system_clock::now();
  const long long seconds = std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count();
  // The pid keeps two writers started in the same second (a restarted rank, a test) apart.
  path_ = (fs::path(dir) / ("events.out.tfevents." + std::to_string(seconds) + "." + host + "." +
                            std::to_string(::getpid()) + ".tessera"))
              .string();
  file_ = std::fopen(path_.c_str(), "ab");
  if (file_ == nullptr) throw IoError("[tensorboard] cannot write " + path_ + ": " + std::strerror(errno));
  write_record(encode_file_version_event(std::chrono::duration<double>(now.time_since_epoch()).count()));
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_) std::fclose(file_);
}

void TensorBoardWriter::write_record(const std::string& data) {
  std::string r;
  put_fixed<uint64_t>(r, data.size());
  const std::string length_bytes = r;
  put_fixed<uint32_t>(r, masked_crc32c(length_bytes));
  r += data;
  put_fixed<uint32_t>(r, masked_crc32c(data));
  if (std::fwrite(r.data(), 1, r.size(), file_) != r.size() || std::fflush(file_) != 0)
    throw IoError("[tensorboard] writing " + path_ + " failed: " + std::strerror(errno));
}

void TensorBoardWriter::write_scalars(int64_t step, const std::vector<std::pair<std::string, double>>& scalars,
                                      double wall_time) {
  write_record(encode_scalar_event(step, wall_time, scalars));
}

}  // namespace tessera::observe
