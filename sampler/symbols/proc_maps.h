// /proc/<pid>/maps reader: the process's mappings with offsets and paths,
// so a pc can be attributed to the file (and file offset) it came from.
//
// Used on recorder threads only (symbolizer, sampler init). Storage comes from
// mimalloc, never the host heap.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <string_view>

#include "format/mi_containers.h"

namespace flightrec::sampler {

struct MapEntry {
  uint64_t start = 0, end = 0;  // [start, end)
  uint64_t offset = 0;          // file offset of start
  uint64_t inode = 0;
  bool readable = false, writable = false, executable = false;
  format::MiString path;  // "" for anonymous; "[vdso]", "[stack]", ... kept as is
};

// Parses one line of /proc/<pid>/maps. Returns false for a malformed line.
// The path is everything after the inode column, leading blanks removed
// (it may contain spaces, and ends in " (deleted)" for unlinked files).
bool ParseMapsLine(std::string_view line, MapEntry* out);

// Finds the mapping of our own process that contains addr: [*lo, *hi).
// Streams /proc/self/maps through a stack buffer: no allocation, no stdio,
// so it is usable on application threads (thread start, inside hooks).
// Not async-signal-safe only because open/read of /proc may block briefly.
bool FindSelfMappingNoAlloc(uint64_t addr, uint64_t* lo, uint64_t* hi);

class ProcMaps {
 public:
  // Re-reads /proc/<pid>/maps (pid 0 = self). Returns false if it cannot be
  // read; the previous contents are then kept.
  bool Load(pid_t pid = 0);
  // Parses a whole maps text (unit tests, and Load itself).
  void LoadFromText(std::string_view text);
  // The mapping containing addr, or nullptr. Binary search: entries are sorted.
  const MapEntry* Find(uint64_t addr) const;
  const format::MiVector<MapEntry>& entries() const { return entries_; }
  // A fingerprint of the executable file-backed mappings; changes when a
  // library is loaded or unloaded.
  uint64_t code_fingerprint() const { return code_fingerprint_; }

 private:
  format::MiVector<MapEntry> entries_;
  uint64_t code_fingerprint_ = 0;
};

}  // namespace flightrec::sampler
