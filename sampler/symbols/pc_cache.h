// The symbolizer's answers, one per pc, kept compact (issue #44).
//
// A long-lived process keeps meeting pcs it has not described yet: every
// sampled instruction of a hot function is one. A PostgreSQL backend under
// pgbench meets about five new ones a second for minutes. Each answer used
// to be a hash node holding a vector of frames, each frame two strings of
// its own: about 200 bytes per pc, the same function and file names copied
// once per pc, for the life of the process. Here a pc costs one hash node
// (pc, mapping, where its frames start) plus 12 bytes per frame, and every
// function and file name is stored once, in a StringPool.
//
// Bounded: past kMaxPcs answers, or kMaxFrames frames (re-resolving a pc
// whose answer grew appends its frames), everything is dropped at once and
// described afresh, as before.
//
// The symbolizer's thread only (the flush thread); not thread-safe.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "format/mi_containers.h"

namespace flightrec::sampler {

// One frame of an answer as libdw gave it: function (demangled), file, line.
struct ResolvedFrame {
  format::MiString function, file;
  uint32_t line = 0;
};

// What the symbolizer found for one pc, before it is stored.
struct Resolution {
  int32_t mapping = -1;          // index into the symbolizer's mappings, -1 = pc in no mapping
  uint64_t maps_generation = 0;  // for unknown pcs: retry once this changes
  // Resolved while files could not be opened (the host held every fd), or
  // named by nothing yet in a JIT's map: not final, retried like an unknown pc.
  bool transient = false;
  format::MiVector<ResolvedFrame> frames;  // innermost (inlined) first
};

// Strings stored once each, named by a 32-bit id (0: the empty string).
// Text lives in fixed chunks that never move, so the ids' views stay valid
// until Clear.
class StringPool {
 public:
  StringPool() = default;
  ~StringPool();
  StringPool(const StringPool&) = delete;
  StringPool& operator=(const StringPool&) = delete;

  uint32_t Intern(std::string_view s);
  std::string_view Get(uint32_t id) const { return id == 0 ? std::string_view() : texts_[id - 1]; }
  size_t size() const { return texts_.size(); }
  void Clear();

 private:
  static constexpr size_t kChunkBytes = 16 << 10;
  char* Store(std::string_view s);

  format::MiVector<char*> chunks_;
  size_t chunk_used_ = kChunkBytes;           // in the last chunk (full: none yet)
  format::MiVector<std::string_view> texts_;  // id - 1 -> text
  format::MiHashMap<std::string_view, uint32_t> ids_;
};

class PcCache {
 public:
  struct Frame {
    uint32_t function = 0, file = 0;  // StringPool ids
    uint32_t line = 0;
  };
  struct Entry {
    uint64_t maps_generation = 0;
    int32_t mapping = -1;
    uint32_t first_frame = 0;  // into the frame table
    uint16_t frame_count = 0;
    bool transient = false;
  };

  static constexpr size_t kMaxPcs = 1 << 18;
  static constexpr size_t kMaxFrames = 4 * kMaxPcs;

  // pc's stored answer, or null.
  const Entry* Find(uint64_t pc) const;
  // Stores (or replaces) pc's answer; the result stays valid until the next
  // Store or Clear. May drop every other answer first (the bounds above).
  const Entry& Store(uint64_t pc, const Resolution& r);
  const Frame* FramesOf(const Entry& e) const { return frames_.data() + e.first_frame; }
  std::string_view Text(uint32_t id) const { return strings_.Get(id); }

  size_t size() const { return entries_.size(); }
  size_t frame_count() const { return frames_.size(); }
  size_t string_count() const { return strings_.size(); }
  void Clear();

 private:
  format::MiHashMap<uint64_t, Entry> entries_;
  format::MiVector<Frame> frames_;
  StringPool strings_;
};

}  // namespace flightrec::sampler
