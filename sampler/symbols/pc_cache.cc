// The symbolizer's compact answer cache: see pc_cache.h.
#include "sampler/symbols/pc_cache.h"

#include <mimalloc.h>

#include <algorithm>
#include <cstring>

namespace flightrec::sampler {

StringPool::~StringPool() { Clear(); }

char* StringPool::Store(std::string_view s) {
  if (s.size() > kChunkBytes / 4) {
    // A long one (a C++ name with its parameters) gets a chunk of its own,
    // slipped in before the current one so that one keeps filling.
    char* own = static_cast<char*>(mi_malloc(s.size()));
    if (!own) return nullptr;
    chunks_.insert(chunks_.empty() ? chunks_.end() : chunks_.end() - 1, own);
    memcpy(own, s.data(), s.size());
    return own;
  }
  if (kChunkBytes - chunk_used_ < s.size()) {
    char* chunk = static_cast<char*>(mi_malloc(kChunkBytes));
    if (!chunk) return nullptr;
    chunks_.push_back(chunk);
    chunk_used_ = 0;
  }
  char* at = chunks_.back() + chunk_used_;
  memcpy(at, s.data(), s.size());
  chunk_used_ += s.size();
  return at;
}

uint32_t StringPool::Intern(std::string_view s) {
  if (s.empty()) return 0;
  if (auto it = ids_.find(s); it != ids_.end()) return it->second;
  char* at = Store(s);
  if (!at) return 0;  // out of memory: the frame goes unnamed rather than wrong
  const std::string_view stored(at, s.size());
  texts_.push_back(stored);
  const uint32_t id = static_cast<uint32_t>(texts_.size());
  ids_.emplace(stored, id);
  return id;
}

void StringPool::Clear() {
  for (char* c : chunks_) mi_free(c);
  chunks_.clear();
  chunk_used_ = kChunkBytes;
  texts_.clear();
  ids_.clear();
}

const PcCache::Entry* PcCache::Find(uint64_t pc) const {
  auto it = entries_.find(pc);
  return it == entries_.end() ? nullptr : &it->second;
}

const PcCache::Entry& PcCache::Store(uint64_t pc, const Resolution& r) {
  const size_t n = std::min<size_t>(r.frames.size(), UINT16_MAX);
  if (entries_.size() >= kMaxPcs || frames_.size() + n > kMaxFrames) Clear();
  Entry& e = entries_[pc];
  // A pc asked again (unknown or transient before) reuses its frames' room
  // when the new answer fits there.
  if (n > e.frame_count || e.frame_count == 0) e.first_frame = static_cast<uint32_t>(frames_.size());
  if (e.first_frame == frames_.size()) frames_.resize(frames_.size() + n);
  for (size_t i = 0; i < n; i++) {
    const ResolvedFrame& f = r.frames[i];
    frames_[e.first_frame + i] = Frame{strings_.Intern(f.function), strings_.Intern(f.file), f.line};
  }
  e.frame_count = static_cast<uint16_t>(n);
  e.mapping = r.mapping;
  e.maps_generation = r.maps_generation;
  e.transient = r.transient;
  return e;
}

void PcCache::Clear() {
  entries_.clear();
  frames_.clear();
  strings_.Clear();
}

}  // namespace flightrec::sampler
