// PerfMap: names for JIT-compiled code, read from /tmp/perf-<pid>.map, the
// file JIT runtimes write for Linux perf (node --perf-basic-prof, Python 3.12
// -X perf, a JVM with perf-map-agent, LuaJIT, ...). Each line is
// "START SIZE name", START and SIZE in hex, one per compiled function,
// appended as code is compiled; a later line for the same start wins (the
// code was replaced).
//
// The file is read incrementally (only what was appended since the last
// read) and only if it is a regular file owned by this process's user or
// root, as perf itself requires: anyone can create files in /tmp.
// Symbolizer thread only; allocates from the recorder's heap.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <map>

#include "format/mi_containers.h"

namespace flightrec::sampler {

class PerfMap {
 public:
  // Reads what was appended since the last call. True if names were added.
  // A new pid (a forked child) starts over with its own file.
  bool Refresh();
  // The name of the function containing pc, or null.
  const char* Find(uint64_t pc) const;
  // The file existed (and was acceptable) at the last Refresh.
  bool present() const { return present_; }
  size_t size() const { return entries_.size(); }

  // Parses one line; false if it is not "START SIZE name". (For tests.)
  static bool ParseLine(const char* line, size_t len, uint64_t* start, uint64_t* size, format::MiString* name);

  // Bounds the memory a runaway map can take.
  static constexpr size_t kMaxEntries = 1 << 20;

 private:
  struct Code {
    uint64_t size = 0;
    format::MiString name;
  };
  void Add(const char* line, size_t len);

  pid_t pid_ = 0;
  bool present_ = false;
  off_t offset_ = 0;          // bytes of the file consumed
  format::MiString partial_;  // an incomplete last line, until its newline arrives
  std::map<uint64_t, Code, std::less<uint64_t>, mi_stl_allocator<std::pair<const uint64_t, Code>>> entries_;
};

}  // namespace flightrec::sampler
