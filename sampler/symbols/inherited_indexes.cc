// Symbol indexes a forked child inherits: see inherited_indexes.h.
#include "sampler/symbols/inherited_indexes.h"

#include <pthread.h>

#include <atomic>

namespace flightrec::sampler {
namespace {

constexpr int kSlots = 64;

struct Slot {
  ModuleIdentity id;
  std::atomic<const SymbolIndex*> index{nullptr};
};

Slot g_slots[kSlots];

// SymbolIndexesSharedWithChildren. The handlers run on the forking thread
// (any of the program's, possibly in a signal handler): atomics only.
std::atomic<bool> g_shared_with_children{false};
std::atomic<bool> g_fork_handlers{false};
void AfterForkInParent() {
  if (PublishedSymbolIndexCount() > 0) g_shared_with_children.store(true, std::memory_order_relaxed);
}
void AfterForkInChild() { g_shared_with_children.store(false, std::memory_order_relaxed); }

}  // namespace

ModuleIdentity MakeModuleIdentity(const char* name, uint64_t low, uint64_t high, uint64_t inode) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (const char* p = name ? name : ""; *p; ++p) h = (h ^ static_cast<unsigned char>(*p)) * 1099511628211ull;
  ModuleIdentity id;
  id.low = low;
  id.high = high;
  id.inode = inode;
  id.name_hash = h;
  return id;
}

void PublishSymbolIndex(const ModuleIdentity& id, const SymbolIndex* index) {
  if (!index) return;
  Slot* free_slot = nullptr;
  for (Slot& s : g_slots) {
    const SymbolIndex* cur = s.index.load(std::memory_order_relaxed);
    if (cur == index) return;
    if (!cur && !free_slot) free_slot = &s;
  }
  if (!free_slot) return;
  if (!g_fork_handlers.exchange(true, std::memory_order_relaxed))
    pthread_atfork(nullptr, AfterForkInParent, AfterForkInChild);
  free_slot->id = id;
  free_slot->index.store(index, std::memory_order_release);
}

void UnpublishSymbolIndex(const SymbolIndex* index) {
  if (!index) return;
  for (Slot& s : g_slots)
    if (s.index.load(std::memory_order_relaxed) == index) s.index.store(nullptr, std::memory_order_release);
}

const SymbolIndex* FindPublishedSymbolIndex(const ModuleIdentity& id) {
  for (Slot& s : g_slots) {
    const SymbolIndex* cur = s.index.load(std::memory_order_acquire);
    if (cur && s.id == id) return cur;
  }
  return nullptr;
}

bool SymbolIndexesSharedWithChildren() { return g_shared_with_children.load(std::memory_order_relaxed); }

int PublishedSymbolIndexCount() {
  int n = 0;
  for (Slot& s : g_slots) n += s.index.load(std::memory_order_relaxed) != nullptr;
  return n;
}

}  // namespace flightrec::sampler
