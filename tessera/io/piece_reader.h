// Reading a sharded checkpoint (the format: checkpoint_manifest.h) at any layout: a rank asks for the
// regions it holds, and only the pieces that overlap them are read, each whole and checked against
// its CRC-32 before a byte of it is used.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tessera/core/tensor.h"
#include "tessera/io/checkpoint_manifest.h"
#include "tessera/nn/module.h"

namespace tessera::io {

class PieceReader {
 public:
  // Reads and checks `dir`'s manifest: IoError when there is none (a save that did not finish) or its
  // pieces do not cover every tensor.
  explicit PieceReader(std::string dir);

  const std::string& dir() const { return dir_; }
  const Manifest& manifest() const { return manifest_; }
  // The logical tensor `name`, or null where the checkpoint has none.
  const LogicalTensor* find(const std::string& name) const;
  // IoError naming the tensor and the directory where it has none.
  const LogicalTensor& tensor(const std::string& name) const;
  // The names of the logical tensors that begin with `prefix`, in the manifest's order.
  std::vector<std::string> names_with_prefix(const std::string& prefix) const;

  // The elements of `region` of tensor `name`: a new contiguous CPU tensor of region.shape(). IoError
  // naming the tensor and the file for a piece file that is missing, truncated, does not hold the
  // piece the manifest names, or whose bytes fail their checksum.
  Tensor read(const std::string& name, const Region& region);
  Tensor read_whole(const std::string& name);
  // Reads every piece and checks it against the manifest (what verify_checkpoint does with one).
  void verify_all();

  // The piece bytes read so far: a rank that holds part of the state reads only the pieces it needs.
  uint64_t bytes_read() const { return bytes_read_; }

 private:
  struct Entry {  // a tensor of a piece file, as its header says
    std::string dtype;
    uint64_t begin = 0, end = 0;
  };
  const std::string& piece_bytes(const LogicalTensor& tensor, const PieceRecord& piece);
  const std::map<std::string, Entry>& header_of(const LogicalTensor& tensor, const PieceRecord& piece);

  std::string dir_;
  Manifest manifest_;
  std::map<std::string, size_t> index_;                    // name -> manifest_.tensors
  std::map<std::string, std::map<std::string, Entry>> headers_;  // file -> its tensors
  std::string cached_file_, cached_key_, cached_bytes_;   // the last piece read (a tensor-parallel shard of
                                                           // `blocks` regions reads one piece several times)
  uint64_t bytes_read_ = 0;
};

// The whole state a checkpoint holds, as one process holds it: the model's tensors (model/<name>)
// and the optimizer's state ("step", "lr", "<index>.<buffer>"), each read whole, prefixes removed.
struct WholeState {
  nn::StateDict model, optimizer;
};
WholeState read_whole_state(PieceReader& reader);

}  // namespace tessera::io
