// Whole-file reads and crash-safe writes. A checkpoint must never be left half-written: a crash
// (or a full disk) during write_file_atomic leaves the old file intact, because the new content
// goes to a temporary file in the same directory (same filesystem, so rename is atomic), is
// fsync'd, and only then renamed over the target; the directory is fsync'd so the rename itself
// survives a power loss (see "Files are hard", Pillai et al., OSDI 2014).
#pragma once
#include <string>
#include <string_view>

namespace tessera::io {

// Replaces `path` with `data` atomically. IoError "[write_file_atomic] <path>: ..." on failure,
// after removing the temporary file.
void write_file_atomic(const std::string& path, std::string_view data);

// The whole content of `path`. IoError "[read_file] <path>: <strerror>" if it can't be read.
std::string read_file(const std::string& path);

// Makes renames and creations inside `dir` durable. IoError "[fsync_directory] <dir>: ...".
void fsync_directory(const std::string& dir);

}  // namespace tessera::io
