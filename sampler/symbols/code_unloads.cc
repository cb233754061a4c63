// Code unloads: see code_unloads.h.
//
// Each ring slot carries seq = 2 * index + 1 while unload `index` is being
// written into it and 2 * index + 2 once it is complete. The fields are
// stored as atomic words, so a reader racing with a writer reads a torn
// record, never undefined behaviour, and the seq check after the copy tells
// it to throw the record away. (Ordered word by word rather than with
// fences, which TSan cannot check.)
#include "sampler/symbols/code_unloads.h"

#include <atomic>
#include <cstring>

namespace flightrec::sampler {

namespace {
constexpr size_t kWords = sizeof(UnloadedObject) / 8;
static_assert(sizeof(UnloadedObject) % 8 == 0);

struct Slot {
  std::atomic<uint64_t> seq{0};
  std::atomic<uint64_t> words[kWords];
};
Slot g_ring[kUnloadRingSize];
std::atomic<uint64_t> g_count{0};
}  // namespace

void NoteCodeUnloaded(const UnloadedObject& obj) {
  const uint64_t index = g_count.fetch_add(1, std::memory_order_relaxed);
  Slot& s = g_ring[index % kUnloadRingSize];
  s.seq.store(2 * index + 1, std::memory_order_relaxed);
  uint64_t words[kWords];
  std::memcpy(words, &obj, sizeof(words));
  // Release: a reader that sees any word sees the odd seq before it.
  for (size_t i = 0; i < kWords; i++) s.words[i].store(words[i], std::memory_order_release);
  s.seq.store(2 * index + 2, std::memory_order_release);
}

uint64_t CodeUnloadCount() { return g_count.load(std::memory_order_acquire); }

bool ReadCodeUnload(uint64_t index, UnloadedObject* out, bool* lost) {
  *lost = false;
  const Slot& s = g_ring[index % kUnloadRingSize];
  const uint64_t before = s.seq.load(std::memory_order_acquire);
  if (before != 2 * index + 2) {
    *lost = before > 2 * index + 2;
    return false;
  }
  uint64_t words[kWords];
  // Acquire: the seq check below cannot be done before the words are read.
  for (size_t i = 0; i < kWords; i++) words[i] = s.words[i].load(std::memory_order_acquire);
  if (s.seq.load(std::memory_order_relaxed) != before) {
    *lost = true;
    return false;
  }
  std::memcpy(out, words, sizeof(words));
  out->path[sizeof(out->path) - 1] = 0;
  return true;
}

}  // namespace flightrec::sampler
