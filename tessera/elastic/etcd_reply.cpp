#include "tessera/elastic/etcd_reply.h"

#include <cctype>
#include <charconv>
#include <cstring>

#include "tessera/core/error.h"

namespace tessera::elastic {

namespace {

using nlohmann::json;
using tessera::detail::concat;

// Decodes an HTTP/1.1 chunked body: "<hex size>[;ext]\r\n<bytes>\r\n" ... "0\r\n\r\n".
std::string dechunk(const std::string& body, const std::string& what) {
  std::string out;
  size_t pos = 0;
  while (true) {
    const size_t eol = body.find("\r\n", pos);
    if (eol == std::string::npos) throw IoError(concat("[etcd] ", what, ": a chunked reply ends inside a chunk header"));
    uint64_t n = 0;
    const char* first = body.data() + pos;
    const char* last = body.data() + eol;
    auto [end, ec] = std::from_chars(first, last, n, 16);
    if (ec != std::errc() || end == first || (end != last && *end != ';'))
      throw IoError(concat("[etcd] ", what, ": malformed chunk size '", body.substr(pos, std::min<size_t>(eol - pos, 32)), "'"));
    if (n == 0) return out;
    const size_t data = eol + 2;
    if (n > body.size() - data) throw IoError(concat("[etcd] ", what, ": a chunk of ", n, " bytes runs past the reply"));
    out.append(body, data, n);
    pos = data + n;
    if (body.compare(pos, 2, "\r\n") != 0) throw IoError(concat("[etcd] ", what, ": a chunk is not followed by CRLF"));
    pos += 2;
  }
}

}  // namespace

json parse_etcd_reply(const std::string& response, const std::string& what) {
  const size_t head_end = response.find("\r\n\r\n");
  if (response.compare(0, 5, "HTTP/") != 0 || head_end == std::string::npos)
    throw IoError(concat("[etcd] ", what, ": malformed reply"));
  const std::string head = response.substr(0, head_end);
  std::string text = response.substr(head_end + 4);
  std::string lower = head;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower.find("transfer-encoding: chunked") != std::string::npos) text = dechunk(text, what);
  const size_t space = head.find(' ');
  int status = 0;
  if (space != std::string::npos) {
    const char* first = head.data() + space + 1;
    std::from_chars(first, head.data() + head.size(), status);
  }
  if (status != 200) throw IoError(concat("[etcd] ", what, " answered ", status, ": ", text.substr(0, 512)));
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw IoError(concat("[etcd] ", what, ": the reply is not JSON (", e.what(), ")"));
  }
}

std::optional<std::string> first_value(const json& r, const std::string& what) {
  if (!r.is_object()) throw IoError(concat("[etcd] ", what, ": the reply is not a JSON object"));
  auto kvs = r.find("kvs");
  if (kvs == r.end() || (kvs->is_array() && kvs->empty())) return std::nullopt;
  if (!kvs->is_array() || !(*kvs)[0].is_object())
    throw IoError(concat("[etcd] ", what, ": \"kvs\" is not a list of key-value objects"));
  auto value = (*kvs)[0].find("value");
  if (value == (*kvs)[0].end()) return std::string();  // an empty value is omitted
  if (!value->is_string()) throw IoError(concat("[etcd] ", what, ": a value is not a base64 string"));
  try {
    return base64_decode(value->get<std::string>());
  } catch (const ValueError& e) {
    throw IoError(concat("[etcd] ", what, ": ", e.what()));
  }
}

int64_t parse_counter(const std::string& text, const std::string& key) {
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty())
    throw IoError(concat("[etcd] the counter '", key, "' holds '", text.substr(0, 64), "', not an integer"));
  return value;
}

}  // namespace tessera::elastic
