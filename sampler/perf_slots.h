// The perf sampler's shared state (internal to sampler/perf_*.cc): the
// per-thread slots, the rings an exiting thread left behind (orphans), the
// counters, and what the four files call of each other. perf_sampler.h is
// the interface; this header is for its parts only:
//   perf_sampler.cc          event setup and arming (slots, fds, rings mapped)
//   perf_ring.cc             ring reading: records out, parsed, CPU samples queued
//   perf_switch_thinning.cc  the switch event's sample period (thinning)
//   perf_switch_pairs.cc     switch-out sample + switch-in -> one off-CPU block
//
// Slot states (perf_sampler.h says who moves them): kFree -> kArming ->
// kActive; the sampler thread moves kActive -> kDraining -> kActive around
// each read; an exiting owner moves kActive -> kClosing.
#pragma once
#include <linux/perf_event.h>
#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "preload/stacks/stack_limits.h"
#include "sampler/cpu_credit.h"
#include "sampler/perf_sampler.h"
#include "sampler/ring_sizing.h"

namespace flightrec::sampler::perf {

using stacks::kMaxFrames;

constexpr int kMaxSlots = 4096;
// Switch-out samples per second per thread the thinning aims at
// (perf_switch_thinning.cc; the ring is sized for them too).
constexpr uint64_t kSwitchSamplesPerSec = 50;
// The largest ring (PlanRing's cap) and so the most one drain takes out.
constexpr size_t kMaxRingBytes = kRingMaxBytes;

// kDraining: the sampler thread is reading the ring. kClosing: the exiting
// owner is saving what is left and unmapping it. Whoever moved the slot out
// of kActive owns its ring (data_tail, munmap) until it moves it back.
enum SlotState : int { kFree = 0, kArming = 1, kActive = 2, kDraining = 3, kClosing = 4 };

struct Slot {
  std::atomic<int> state{kFree};
  // Atomic: slot scans (adopting a thread, HasSlotFor) read it while a
  // thread that claimed the recycled slot writes it.
  std::atomic<pid_t> tid{0};
  int cpu_fd = -1, sw_fd = -1;
  uint64_t cpu_id = 0, sw_id = 0;
  uint8_t* base = nullptr;
  size_t map_len = 0;
  // Set by an exiting owner that found the slot kDraining: the sampler
  // thread reclaims it after the drain.
  std::atomic<bool> retire{false};
  // Sampler-thread private: the switch-out sample waiting for its switch-in.
  bool pending = false;
  bool pending_preempted = false;
  bool pending_unwound = false;  // pending_pcs valid (the sample left the ring)
  uint64_t pending_pos = 0;      // offset of the sample in the current drain's batch
  uint64_t pending_time = 0;
  uint64_t pending_weight = 1;  // the switch event's period when it sampled
  int pending_n = 0;
  uint64_t pending_pcs[kMaxFrames];
  // Sampler-thread private: switch thinning (perf_switch_thinning.cc).
  uint64_t sw_period = 1;
  uint64_t prev_sw_period = 1;  // the one before: samples still in the ring
  uint64_t tune_start = 0;      // start of the current rate window (0: none yet)
  uint64_t tune_outs = 0;       // switch-outs seen in it (SWITCH records)
  uint64_t tune_count = 0;      // the switch event's count at its start
  bool tune_count_ok = false;
  uint32_t windows_since_change = 0;
  bool lost_since_switch_sample = false;  // LOST records since the last switch sample
  uint64_t last_switch_count = 0;         // the count in the last switch sample
  // Sampler-thread private (the owner's in kClosing): samples lost to a full
  // ring. The kernel writes a LOST record only once the ring has room again
  // and the thread writes its next record, so a thread that overflowed its
  // ring and then went idle or exited would never report its loss; the CPU
  // event's own count (PERF_FORMAT_LOST, read at each drain that found
  // records) has it at once. A slot reports the larger of the two totals
  // (LOST records also count the switch event's records), in increments.
  uint64_t lost_records = 0;     // sum of the LOST records' counts
  uint64_t cpu_lost_read = 0;    // the CPU event's lost count when last read
  uint64_t lost_reported = 0;    // queued as sampler.lost so far
  uint64_t batch_lost_time = 0;  // the first LOST record of the batch (0: none)
  // Sampler-thread private: the thread's CPU time against its samples'.
  CpuCredit cpu_credit;
};

// What an exiting thread's ring still held, saved by the thread itself so
// its ring can be unmapped at once; the sampler thread processes it later.
struct Orphan {
  Orphan* next;
  pid_t tid;
  uint64_t cpu_id, sw_id;
  // A block whose switch-out an earlier drain saw (already unwound): its
  // switch-in is among the saved records.
  bool pending;
  uint64_t pending_time;
  uint64_t pending_weight;
  uint64_t last_switch_count, sw_period, prev_sw_period;  // for the weights of saved switch samples
  uint64_t lost_records, cpu_lost_read, lost_reported;    // lost-sample accounting (Slot)
  int pending_n;
  uint64_t pending_pcs[kMaxFrames];
  size_t len;
  uint8_t data[];
};

struct Counters {
  std::atomic<uint64_t> armed{0}, arm_failed{0}, orphan_bytes_lost{0};
  uint64_t samples = 0, switch_samples = 0, lost = 0, offcpu_emitted = 0, preempted = 0, short_blocks = 0,
           bad_records = 0, switch_outs = 0, period_changes = 0;
};

struct PerfState {
  PerfOptions opts;
  bool switch_ok = false, kernel = false;
  size_t page = 4096;
  size_t min_pages = 8;
  size_t watermark_bytes = 4096;       // wake the sampler thread after this many bytes (PlanRing)
  std::atomic<size_t> data_pages{32};  // halves when the kernel refuses locked memory
  std::atomic<size_t> ring_bytes{0};   // mapped by live slots
  // The CPU event reads its lost-sample count (PERF_FORMAT_LOST, Linux 6.0);
  // cleared for good when the kernel refuses the format.
  std::atomic<bool> format_lost{true};
  Slot* slots = nullptr;
  std::atomic<int> hwm{0};
  std::atomic<bool> shutdown{false};
  uint64_t last_hup_check = 0;
  bool pressure = false;  // sampler thread: this collection found a ring filling fast
  // Sampler thread: one drain's records, copied out of the ring first so the
  // kernel can reuse the space while we unwind them.
  uint8_t* batch = nullptr;
  size_t batch_cap = 0;
  std::atomic<Orphan*> orphans{nullptr};  // Treiber stack: owners push, the sampler takes all
  Slot orphan_slot;                       // sampler thread: context for an orphan's records
  Counters counters;
};

// The sampler's state, made once by PerfConfigure (null until then).
extern PerfState* g_perf;

// The records of one drain, contiguous.
struct Batch {
  const uint8_t* data;
  size_t len;
};

struct Sample {
  uint64_t id = 0, ip = 0, time = 0, period = 0;
  uint32_t pid = 0, tid = 0;
  uint64_t abi = 0;
  const uint64_t* regs = nullptr;
  size_t nregs = 0;
  const uint8_t* stack = nullptr;
  uint64_t stack_len = 0;
};

// kActive -> kDraining: the caller holds the slot's ring and fds until it
// moves the slot on.
inline bool TakeActiveSlot(Slot& s) {
  int expected = kActive;
  return s.state.load(std::memory_order_relaxed) == kActive &&
         s.state.compare_exchange_strong(expected, kDraining, std::memory_order_acq_rel);
}

// ---- perf_sampler.cc: setup and arming ----
// False on a thread with a descriptor table of its own: our fd numbers are
// other files there.
bool InProgramFdTable();
// By the slot's current owner (kDraining or kClosing): the thread is gone
// and the ring drained or saved; closes, unmaps and frees the slot.
void Reclaim(Slot& s);

// ---- perf_ring.cc: ring reading ----
// Bounds-checked parse of one PERF_RECORD_SAMPLE.
bool ParseSample(const uint8_t* rec, size_t len, Sample* s);
// sample_id trailer of a non-sample record: pid/tid, time, id.
bool ParseTrailer(const uint8_t* rec, size_t len, uint64_t* time, uint32_t* tid);
// Unwinds a sample's copied stack into pcs (kMaxFrames); at_switch: the leaf
// is the instruction after a syscall.
int UnwindSample(const Sample& s, bool at_switch, uint64_t* pcs);
// Exiting owner, slot in kClosing: saves the unread records, unmaps the ring
// and frees the slot.
void SaveAndClose(Slot& slot);

// ---- perf_switch_thinning.cc ----
// After a drain: re-measures the switch-out rate and sets the period.
void TuneSwitchPeriod(Slot& s, uint64_t now_ns, bool overflowed);
// The number of blocks a switch sample with the event's count `count` stands for.
uint64_t SwitchSampleWeight(Slot& slot, uint64_t count);

// ---- perf_switch_pairs.cc: off-CPU blocks ----
// A switch-out sample at `pos` of the batch: the block it opens waits for
// its switch-in.
void OnSwitchSample(Slot& slot, uint64_t pos, const Sample& s);
// A PERF_RECORD_SWITCH record: counts switch-outs, closes the open block at
// a switch-in.
void OnSwitchRecord(Slot& slot, const Batch& b, const perf_event_header& h, const uint8_t* rec);
// Unwinds the open block's switch sample while the batch still holds it.
void UnwindPending(Slot& slot, const Batch& b);
// Ends the open block at end_time (`b`: the batch holding its sample, or
// null once it was unwound): queued as offcpu.sample when long enough.
void EndBlock(Slot& slot, const Batch* b, uint64_t end_time);

}  // namespace flightrec::sampler::perf
