#include "tessera/parallel/ps/shm_channel.h"

#include <cstring>
#include <random>

#include "tessera/core/error.h"

namespace tessera::parallel::ps {

using tessera::detail::concat;

namespace {

struct Header {
  uint64_t magic;
  ShmNonce nonce;
  int64_t dense;
};
static_assert(sizeof(Header) <= kShmChannelHeaderBytes);

}  // namespace

ShmChannel ShmChannel::create(int64_t dense) {
  TESSERA_CHECK(dense > 0, "[ps] a shared-memory channel needs dense values, got ", dense);
  ShmChannel c;
  c.segment_ = dist::detail::ShmSegment::create(bytes_for(dense));
  c.dense_ = dense;
  std::random_device device;
  for (auto& b : c.nonce_) b = static_cast<uint8_t>(device());
  Header h{kShmChannelMagic, c.nonce_, dense};
  std::memcpy(c.segment_.data(), &h, sizeof h);
  return c;
}

ShmChannel ShmChannel::open(const std::string& name, size_t bytes, int64_t dense, const ShmNonce& nonce) {
  if (dense <= 0 || bytes != bytes_for(dense))
    throw IoError(concat("segment ", name, " of ", bytes, " bytes does not hold ", dense, " dense values each way"));
  if (name.rfind("/tessera-shm-", 0) != 0 || name.find('/', 1) != std::string::npos)
    throw IoError(concat("'", name, "' is not the name of a tessera shared-memory segment"));
  ShmChannel c;
  c.segment_ = dist::detail::ShmSegment::open(name, bytes);
  Header h{};
  std::memcpy(&h, c.segment_.data(), sizeof h);
  if (h.magic != kShmChannelMagic || h.nonce != nonce || h.dense != dense)
    throw IoError(concat("segment ", name, " is not the one the worker made (its header differs)"));
  c.dense_ = dense;
  c.nonce_ = nonce;
  return c;
}

}  // namespace tessera::parallel::ps
