// Ring growth: which threads get a bigger ring, and the memory for it.
//
// A thread that fills its ring fast wakes the flush thread often (once per
// quarter ring, flush_wakeup.h), and a wake-up costs the flush thread tens of
// microseconds of CPU on a VM (bench/micro/bare_wake: 45-65 us here). Once a
// thread's records pass twice its ring's size within a second, or a single
// drain finds its ring at least half full (a burst: the drainer fell behind
// a thread that fills the ring in milliseconds, and the next burst would
// drop), the flush thread offers it a ring kGrowthFactor times as big (Ring::OfferGrowth),
// but no bigger than kGrownRingMaxBytes, for at most kMaxGrownRings threads
// at a time: a loaded server's event loop then wakes the flush thread about
// a quarter as often, and costs up to (kGrowthFactor - 1) x
// FLIGHTREC_RING_BYTES more resident memory, populated by the flush thread
// when it maps the offer (so the thread's first lap takes no page faults). A
// thread keeps its grown ring until it exits.
//
// Why the cap: the producer writes each record into the line after the last
// one, and the ring's lines stay in the core's cache only while the ring
// fits in it (a core's L2 is 0.5-2 MiB on current x86). A 4 MiB ring cost
// the calling thread about 20 ns more per recorded socket call than a 1 MiB
// one (bench/micro/sock_bench --interleaved, same library, alternating processes),
// more than the fewer wake-ups save. So the default 256 KiB ring grows to
// 1 MiB, and a ring already that big does not grow.
// The producer moves at a wrap with padding (ring.h): a thread whose records
// tile its ring exactly (all one power-of-two size) never wraps that way and
// keeps its base ring, its offer counted among the kMaxGrownRings.
//
// A burst can fill a ring before the flush thread (nice +10, starved by the
// very threads that burst) runs at all. So the flush thread keeps
// kSpareRings buffers of the grown size mapped and untouched (address space
// only), and a thread whose record finds its ring full takes one itself
// (GrowRingNow: an atomic exchange, no system call) and moves to it at once;
// the flush thread maps a replacement on its next tick. Spares and grown
// rings together stay within kMaxGrownRings.
//
// Threads: the flush thread only (or the thread that took its state over
// for the final drain), except ReleaseRingGrowth in a fork child (then
// single-threaded) and GrowRingNow (the ring's own thread).
#pragma once
#include <cstddef>
#include <cstdint>

namespace flightrec {

struct ThreadState;

inline constexpr size_t kGrowthFactor = 4;
inline constexpr size_t kGrownRingMaxBytes = size_t{1} << 20;
inline constexpr int kMaxGrownRings = 8;
inline constexpr int kSpareRings = 2;

// After a drain of ts that consumed `drained` bytes at now_ns: counts them
// and offers growth when due.
void NoteRingDrained(ThreadState* ts, uint64_t drained, uint64_t now_ns);

// Unmaps the ring offered to ts, if any, and resets ts's ring to its base
// buffer. For a retired slot before it is freed (no producer is left), and
// for every slot in a fork child.
void ReleaseRingGrowth(ThreadState* ts);

// At init, before the flush thread starts (which refills them after that):
// maps the spares for rings of base_ring_bytes, so a thread that bursts
// before the flush thread's first drain (a short process, a starved flush
// thread) finds one. Address space only until a thread writes into one.
void PrepareSpareRings(size_t base_ring_bytes);

// Threads holding a grown (or offered) ring now; spares not counted.
int GrownRings();

// The ring's own thread, when a record found no room: moves ts's ring to an
// offered buffer, or to a spare it claims, at once. False if neither is
// there (or the ring has grown already). Lock-free, no system call.
bool GrowRingNow(ThreadState* ts);

}  // namespace flightrec
