// Producer slots: the bytes of each thread's ThreadState that a producer owns
// (per-thread state the runtime itself never reads), so that the runtime's
// thread slot does not name producers' types or include their headers.
//
// Like record kinds (record_kinds.h), the ranges are handed out here, one per
// producer's need; the runtime knows only each range's size and lifetime, the
// producer its type: ProducerSlot<T, kSlotX>(ts) (thread_registry.h) checks at
// compile time that T fits its range and is suitably aligned.
//
// Why in the ThreadState and not in the producer's own TLS: the flush thread
// reads these after the thread has exited (a retired slot), and TLS dies
// with the thread. Access is a constant offset from the ThreadState the hook
// already holds: no lock, no call, no allocation.
//
// Initial state: a slot's memory is zero when mmap'd, and a range with
// SlotLife::kPerThread is zeroed again when a thread claims the slot (before
// its first record). A producer's type must therefore be one whose all-zero
// bytes are its initial state (null pointers, zero counters and atomics) and
// must need no destructor.
#pragma once
#include <cstdint>

namespace flightrec {

enum class SlotLife : uint8_t {
  kPerThread,  // zeroed when a thread claims the slot
  kPerSlot,    // kept with the slot across owners (the producer compares ThreadState::generation)
};

struct ProducerSlotSpec {
  uint32_t offset;
  uint32_t bytes;
  SlotLife life;
};

inline constexpr uint32_t kProducerSlotAlign = 64;  // a cache line: ranges never share one
constexpr uint32_t SlotEnd(const ProducerSlotSpec& s) {
  return (s.offset + s.bytes + kProducerSlotAlign - 1) & ~(kProducerSlotAlign - 1);
}

// alloc/stack_refs.h: StackRefCache, the stacks this thread pushed in full
// (producer side; a new thread has pushed none).
inline constexpr ProducerSlotSpec kSlotAllocStacksPushed{0, 1024, SlotLife::kPerThread};
// alloc/alloc_events.cc: the flush thread's StackRefTable* for this slot
// (created on the first sample, kept with the slot; forgets at a new generation).
inline constexpr ProducerSlotSpec kSlotAllocStacksTable{SlotEnd(kSlotAllocStacksPushed), 8, SlotLife::kPerSlot};
// sockets/socket_gaps.h: SockGapTable, totals of socket data calls whose
// records were dropped (owner writes, flush thread harvests; kept with the
// slot: the reader's reported totals follow the counters across owners).
inline constexpr ProducerSlotSpec kSlotSocketGaps{SlotEnd(kSlotAllocStacksTable), 3136, SlotLife::kPerSlot};

inline constexpr ProducerSlotSpec kProducerSlots[] = {kSlotAllocStacksPushed, kSlotAllocStacksTable, kSlotSocketGaps};
inline constexpr uint32_t kProducerSlotBytes = SlotEnd(kSlotSocketGaps);

}  // namespace flightrec
