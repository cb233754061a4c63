// Allocation events: the ring records the malloc hooks push (app thread) and
// their decoding into the alloc.sample / alloc.free event types (flush
// thread). Event names and fields are fixed project-wide:
//   alloc.sample: time, tid U, address U, size U, stack STK, sample_bytes U
//   (a sample's stack is pushed once per thread, then referred to by its
//   hash: alloc/stack_refs.h; the events always carry the frames)
//   alloc.free:   time, tid U, address U   (frees of sampled addresses only)
//   alloc.unattributed: time, tid U, samples U, bytes F64, count F64
//                 (samples whose records were dropped, and their estimated
//                 weight: threads/dropped_weight.h)
#pragma once
#include <cstddef>
#include <cstdint>

#include "preload/threads/dropped_weight.h"

namespace flightrec {
struct FlushContext;
}

namespace flightrec::alloc {

inline constexpr int kMaxAllocFrames = 64;

// kRecAllocSample. Variable length: only the first npcs entries of pcs are
// pushed (AllocSampleRecordBytes), so shallow stacks cost little ring space.
// The first sample of a stack on a thread; later ones with the same stack
// push an AllocSampleRefRecord (alloc/stack_refs.h).
struct AllocSampleRecord {
  uint64_t time_ns;
  uint64_t address;
  uint64_t size;
  uint64_t sample_bytes;  // mean sampling interval in force
  uint64_t stack_hash;    // HashStack(pcs, npcs); 0: not to be referred to
  uint32_t npcs;
  uint32_t reserved;
  uint64_t pcs[kMaxAllocFrames];  // leaf first, callers already at return address - 1
};

// kRecAllocSampleRef: a sample whose stack this thread pushed in full
// before (the flush thread keeps the frames). 40 bytes in the ring with
// its header, against 56 + 8 per frame for a full record.
struct AllocSampleRefRecord {
  uint64_t time_ns;
  uint64_t address;
  uint64_t size;
  uint64_t stack_hash;  // the full record's; sample_bytes is the process's one rate
};

inline constexpr uint32_t AllocSampleRecordBytes(uint32_t npcs) {
  return static_cast<uint32_t>(offsetof(AllocSampleRecord, pcs) + npcs * sizeof(uint64_t));
}

// kRecAllocFree.
struct AllocFreeRecord {
  uint64_t time_ns;
  uint64_t address;
};

// Defines the event types, registers the two record decoders and the
// harvest of each drained thread's dropped weight. Init only.
void RegisterAllocEvents();

// Flush thread: one alloc.unattributed event for what `d` gained since its
// last harvest, if anything (tid 0: a thread without a state).
void EmitDroppedWeight(FlushContext& ctx, DroppedWeight& d, uint64_t tid);

}  // namespace flightrec::alloc
