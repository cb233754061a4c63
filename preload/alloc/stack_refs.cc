// Stack references, the flush thread's side (see stack_refs.h): the table of
// frames per slot, from the recorder's heap.
#include "preload/alloc/stack_refs.h"

#include <mimalloc.h>

#include <new>

namespace flightrec {

StackRefTable* StackRefTable::Create(uint32_t max_frames) {
  void* mem = mi_malloc(sizeof(StackRefTable));
  if (!mem) return nullptr;
  auto* t = new (mem) StackRefTable();
  t->max_frames_ = max_frames;
  return t;
}

void StackRefTable::SyncGeneration(uint64_t generation) {
  if (generation == generation_) return;
  generation_ = generation;
  for (Entry& e : entries_) e.hash = 0;  // frames memory kept for the next owner
}

void StackRefTable::Learn(uint64_t hash, const uint64_t* pcs, uint32_t npcs, uint64_t extra) {
  Entry& e = entries_[StackRefSlot(hash)];
  e.hash = 0;
  if (hash == 0 || npcs > max_frames_) return;
  if (!e.pcs) e.pcs = static_cast<uint64_t*>(mi_malloc(sizeof(uint64_t) * (max_frames_ ? max_frames_ : 1)));
  if (!e.pcs) return;  // no memory: references to it decode as "stack unknown"
  if (npcs) memcpy(e.pcs, pcs, npcs * sizeof(uint64_t));
  e.npcs = npcs;
  e.extra = extra;
  e.hash = hash;
}

}  // namespace flightrec
