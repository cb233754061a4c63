// perf_event sampler (see perf_sampler.h).
//
// Record layout we ask for (sample_type IDENTIFIER|IP|TID|TIME|PERIOD|
// REGS_USER|STACK_USER, sample_id_all=1), per perf_event_open(2):
//   SAMPLE:  id, ip, pid/tid, time, period, abi, regs[popcount(mask)] (abi != 0),
//            size, data[size], dyn_size (size != 0)
//   others:  ...body..., then the sample_id trailer: pid/tid, time, id
// Off-CPU: the context-switch event samples at every switch-out (user regs and
// stack at the syscall that blocked), then PERF_RECORD_SWITCH records (from
// attr.context_switch) mark switch-out (with PREEMPT when involuntary) and
// switch-in. A block is switch-out sample -> switch-in; its duration is the
// difference of their timestamps. Preemptions are run-queue waits, not
// blocking, and are left out.
//
// Switch sampling is thinned per thread. Each switch sample carries the whole
// stack copy (16 KiB by default) and is written by the kernel on the host
// thread; an event-loop server switches tens of thousands of times a second,
// which would cost the host microseconds per switch and overflow the ring
// that CPU samples share (every sample lost, CPU ones too). So the sampler
// thread measures each thread's switch-out rate (the SWITCH records, 32 bytes
// each, still mark every switch) and sets the switch event's sample period
// so that about kSwitchSamplesPerSec switch-outs per thread are sampled: the
// period rises at once, falls by halves, and is dithered so a thread whose
// blocks alternate in a fixed pattern is not always sampled on the same one.
// A sampled block stands for `period` blocks (the period is in the sample):
// offcpu.sample's weight field, which profiles multiply into the duration.
// Threads that block rarely keep period 1: every block is seen.
//
// CPU samples weigh their period (cpu-clock nanoseconds), scaled down per
// drained batch where the thread's own CPU time says it had less (steal on a
// VM: cpu_credit.h).
#include "sampler/perf_sampler.h"

#include <linux/perf_event.h>
#include <mimalloc.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>

#include "format/own_fds.h"
#include "preload/fds/fd_guard.h"
#include "preload/runtime/log.h"
#include "sampler/cpu_credit.h"
#include "sampler/ring_sizing.h"
#include "sampler/sample_events.h"
#include "sampler/sampler_engine.h"
#include "sampler/sampler_thread.h"
#include "sampler/slot_claim.h"
#include "preload/stacks/stack_unwinder.h"

namespace flightrec::sampler {
namespace {

constexpr int kMaxSlots = 4096;
constexpr uint64_t kHupCheckNs = 250'000'000;
constexpr uint32_t kMaxStackBytes = 63 * 1024;
// Ring memory is locked kernel memory mapped into the host. Past the soft
// budget (summed over live threads) new threads get an eighth of the planned
// ring (about 30 ms of samples instead of 250: PlanRing's small_pages);
// past the hard budget they are not armed with perf (in auto mode they fall
// back to SIGPROF timers).
constexpr size_t kRingSoftBudget = 64u << 20;
constexpr size_t kRingHardBudget = 256u << 20;
// Switch-out samples per second per thread the thinning aims at, how often
// the rate is re-measured, and the sparsest sampling allowed.
constexpr uint64_t kSwitchSamplesPerSec = 50;
constexpr uint64_t kSwitchTuneNs = 20'000'000;
constexpr uint32_t kDitherWindows = 10;
constexpr uint64_t kMaxSwitchPeriod = 1u << 20;
// Ring room for the SWITCH records (32 bytes, two per switch) that arrive
// between drains: ~40 ms of a thread switching 20,000 times a second.
constexpr size_t kSwitchRecordRoom = 48u << 10;
// How long the sampler thread may go unscheduled without a busy thread's
// ring losing a sample: it runs at nice +10, and on a machine whose CPUs are
// all busy the scheduler can keep it off the CPU for tens to hundreds of
// milliseconds (the kernel's watermark wake-up cannot help a thread that is
// woken but not run). The ring holds the watermark plus this much of the
// configured rate (CPU samples, thinned switch samples); the cap below and
// the budgets above bound what that costs.
constexpr uint64_t kStarvationBudgetNs = 250'000'000;
constexpr size_t kMaxRingBytes = 4u << 20;
// The most of a ring the sampler thread takes out at once (DrainSlot).
constexpr size_t kDrainChunkBytes = 256u << 10;

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
  uint64_t pending_weight = 1;   // the switch event's period when it sampled
  int pending_n = 0;
  uint64_t pending_pcs[kMaxFrames];
  // Sampler-thread private: switch thinning (see the top of the file).
  uint64_t sw_period = 1;
  uint64_t prev_sw_period = 1;  // the one before: samples still in the ring
  uint64_t tune_start = 0;  // start of the current rate window (0: none yet)
  uint64_t tune_outs = 0;   // switch-outs seen in it (SWITCH records)
  uint64_t tune_count = 0;  // the switch event's count at its start
  bool tune_count_ok = false;
  uint32_t windows_since_change = 0;
  bool lost_since_switch_sample = false;  // LOST records since the last switch sample
  uint64_t last_switch_count = 0;  // the count in the last switch sample
  // Sampler-thread private (the owner's in kClosing): samples lost to a full
  // ring. The kernel writes a LOST record only once the ring has room again
  // and the thread writes its next record, so a thread that overflowed its
  // ring and then went idle or exited would never report its loss; the CPU
  // event's own count (PERF_FORMAT_LOST, read at each drain that found
  // records) has it at once. A slot reports the larger of the two totals
  // (LOST records also count the switch event's records), in increments.
  uint64_t lost_records = 0;   // sum of the LOST records' counts
  uint64_t cpu_lost_read = 0;  // the CPU event's lost count when last read
  uint64_t lost_reported = 0;  // queued as sampler.lost so far
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
  uint64_t lost_records, cpu_lost_read, lost_reported;     // lost-sample accounting (Slot)
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
  size_t watermark_bytes = 4096;  // wake the sampler thread after this many bytes (PlanRing)
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
  Slot orphan_slot;                        // sampler thread: context for an orphan's records
  Counters counters;
};

PerfState* g = nullptr;

// Slot index + 1 of the calling thread (0 = none) and whether it has the
// context-switch event. Initial-exec: read from hooks.
__attribute__((tls_model("initial-exec"))) __thread int t_slot = 0;
__attribute__((tls_model("initial-exec"))) __thread bool t_has_switch = false;

int PerfEventOpen(perf_event_attr* attr, pid_t tid) {
  return static_cast<int>(syscall(SYS_perf_event_open, attr, tid, -1, -1, PERF_FLAG_FD_CLOEXEC));
}

// Our perf fds survive the application's close-everything loops (fd_guard).
int OpenGuarded(perf_event_attr* attr, pid_t tid) {
  OwnFdChange opening;
  const int fd = PerfEventOpen(attr, tid);
  return fd >= 0 ? TakeOwnFd(fd) : fd;
}

// If the application dup2'd onto one of our fds, the number is its file now:
// leave it alone (our event lives on through its ring mapping until Reclaim
// unmaps it).
// Perf descriptors live in the program's table: a thread with a table of its
// own (the flush thread's final collection, own_fd_table.h) holds other
// files under those numbers and leaves them alone (the events end with the
// process, or with the thread that owns them).
bool InProgramFdTable() { return !format::t_own_fd_table; }

void CloseGuarded(int fd) {
  if (fd < 0 || !InProgramFdTable()) return;
  if (FdWasLost(fd) || !IsProtectedFd(fd)) return;
  CloseOwnFd(fd);
}

// kernel: CPU samples include time in the kernel (syscalls, page faults),
// charged to the user stack that entered it, as SIGPROF timers and rusage
// count it. Without it (perf_event_paranoid >= 2 for an unprivileged
// process) a syscall-heavy thread would look idle.
perf_event_attr Attr(const PerfOptions& o, bool switch_event, bool kernel) {
  perf_event_attr a;
  std::memset(&a, 0, sizeof(a));
  a.size = sizeof(a);
  if (switch_event) {
    a.type = PERF_TYPE_SOFTWARE;
    a.config = PERF_COUNT_SW_CONTEXT_SWITCHES;
    a.sample_period = 1;
    a.exclude_kernel = 0;  // switch samples are only produced with kernel included
    a.context_switch = 1;  // PERF_RECORD_SWITCH in/out records
  } else {
    a.type = PERF_TYPE_SOFTWARE;
    a.config = PERF_COUNT_SW_CPU_CLOCK;  // counts ns: the period is a duration
    a.sample_period = 1000000000ull / (o.hz ? o.hz : 1);
    a.exclude_kernel = !kernel;
  }
  a.exclude_hv = 1;
  a.sample_type = PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME |
                  PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER;
  // Not PERIOD for the switch event: a software event that samples PERIOD
  // writes a sample at every occurrence whatever its sample_period (the
  // kernel's perf_swevent_event), which would defeat the thinning. It samples
  // READ, its count of switches, in the same place of the record instead.
  a.sample_type |= switch_event ? PERF_SAMPLE_READ : PERF_SAMPLE_PERIOD;
  // The CPU event's read() gives its count of samples lost to a full ring
  // (it samples no READ, so its records are unchanged).
  if (!switch_event && g && g->format_lost.load(std::memory_order_relaxed)) a.read_format = PERF_FORMAT_LOST;
  a.sample_regs_user = stacks::PerfRegsUserMask();
  a.sample_stack_user = o.stack_bytes;
  a.use_clockid = 1;
  a.clockid = CLOCK_MONOTONIC;
  a.sample_id_all = 1;
  a.disabled = 1;
  return a;
}

// One PERF_RECORD_SAMPLE as Attr() asks for it: header, id, ip, pid/tid,
// time, period (READ's count for the switch event: also 8 bytes), abi, the
// registers, size, the stack copy (reserved whole) and dyn_size.
size_t PerfSampleBytes(uint32_t stack_bytes) {
  return sizeof(perf_event_header) + 8 * 8 +
         8 * static_cast<size_t>(__builtin_popcountll(stacks::PerfRegsUserMask())) + stack_bytes;
}

bool HasSlotFor(pid_t tid) {
  const int n = std::min(g->hwm.load(std::memory_order_acquire), kMaxSlots);
  for (int i = 0; i < n; ++i) {
    const int st = g->slots[i].state.load(std::memory_order_acquire);
    if ((st == kActive || st == kDraining) && g->slots[i].tid == tid) return true;
  }
  return false;
}

// A free slot, claimed for this thread (slot_claim.h); -1 when all are taken.
int ClaimSlot() { return ClaimSlotIn(g->slots, g->hwm, kMaxSlots, kFree, kArming); }

void CloseSlotFds(Slot& s) {
  CloseGuarded(s.sw_fd);
  CloseGuarded(s.cpu_fd);
  s.sw_fd = s.cpu_fd = -1;
}

// Switch thinning back to period 1, a rate window starting at start_ns (0:
// none yet) from a count of zero (the event's count once it is enabled).
void ResetSwitchThinning(Slot& s, uint64_t start_ns) {
  s.sw_period = s.prev_sw_period = 1;
  s.tune_start = start_ns;
  s.tune_outs = s.tune_count = s.last_switch_count = 0;
  s.tune_count_ok = start_ns != 0;
  s.lost_since_switch_sample = false;
  s.windows_since_change = 0;
  s.lost_records = s.cpu_lost_read = s.lost_reported = 0;
  s.batch_lost_time = 0;
  s.cpu_credit = CpuCredit{};
}

// By the slot's current owner (kDraining or kClosing): the thread is gone
// and the ring drained or saved.
void Reclaim(Slot& s) {
  CloseSlotFds(s);
  if (s.base) {
    munmap(s.base, s.map_len);
    g->ring_bytes.fetch_sub(s.map_len, std::memory_order_relaxed);
  }
  s.base = nullptr;
  s.map_len = 0;
  s.pending = false;
  ResetSwitchThinning(s, 0);
  s.retire.store(false, std::memory_order_relaxed);
  s.state.store(kFree, std::memory_order_release);
}

// ---- ring reading (sampler thread) ----------------------------------------

// The records of one drain, contiguous.
struct Batch {
  const uint8_t* data;
  size_t len;
};

// Copies [pos, pos + len) of a ring (size a power of two) into out.
void CopyOut(const uint8_t* ring, uint64_t size, uint64_t pos, uint8_t* out, size_t len) {
  const uint64_t off = pos & (size - 1);
  const size_t first = static_cast<size_t>(std::min<uint64_t>(len, size - off));
  std::memcpy(out, ring + off, first);
  if (first < len) std::memcpy(out + first, ring, len - first);
}

struct Sample {
  uint64_t id = 0, ip = 0, time = 0, period = 0;
  uint32_t pid = 0, tid = 0;
  uint64_t abi = 0;
  const uint64_t* regs = nullptr;
  size_t nregs = 0;
  const uint8_t* stack = nullptr;
  uint64_t stack_len = 0;
};

// Bounds-checked: a malformed record returns false, never reads past `len`.
// `period` is the sampling period of a CPU sample and the count of switches
// so far of a switch sample (see Attr).
bool ParseSample(const uint8_t* rec, size_t len, Sample* s) {
  size_t off = sizeof(perf_event_header);
  auto u64 = [&](uint64_t* v) {
    if (off + 8 > len) return false;
    std::memcpy(v, rec + off, 8);
    off += 8;
    return true;
  };
  uint64_t pidtid = 0;
  if (!u64(&s->id) || !u64(&s->ip) || !u64(&pidtid) || !u64(&s->time) || !u64(&s->period) || !u64(&s->abi))
    return false;
  s->pid = static_cast<uint32_t>(pidtid);
  s->tid = static_cast<uint32_t>(pidtid >> 32);
  if (s->abi != PERF_SAMPLE_REGS_ABI_NONE) {
    s->nregs = static_cast<size_t>(__builtin_popcountll(stacks::PerfRegsUserMask()));
    if (off + s->nregs * 8 > len) return false;
    s->regs = reinterpret_cast<const uint64_t*>(rec + off);  // perf records are 8-aligned
    off += s->nregs * 8;
  }
  uint64_t size = 0;
  if (!u64(&size)) return false;
  if (size) {
    if (size > len || off + size + 8 > len) return false;  // no wrap-around on garbage
    s->stack = rec + off;
    off += size;
    uint64_t dyn = 0;
    u64(&dyn);
    s->stack_len = dyn < size ? dyn : size;
  }
  return true;
}

// sample_id trailer of a non-sample record: pid/tid, time, id.
bool ParseTrailer(const uint8_t* rec, size_t len, uint64_t* time, uint32_t* tid) {
  if (len < sizeof(perf_event_header) + 24) return false;
  uint64_t pidtid;
  std::memcpy(&pidtid, rec + len - 24, 8);
  std::memcpy(time, rec + len - 16, 8);
  *tid = static_cast<uint32_t>(pidtid >> 32);
  return true;
}

int UnwindSample(const Sample& s, bool at_switch, uint64_t* pcs) {
  if (!s.regs) {
    if (at_switch) return 0;  // ip is a kernel address: nothing of the user stack
    pcs[0] = s.ip;
    return s.ip ? 1 : 0;
  }
  stacks::RegisterSet rs;
  if (!stacks::RegisterSetFromPerf(stacks::PerfRegsUserMask(), s.regs, s.nregs, &rs)) return 0;
  const int n = stacks::UnwindCopiedStack(stacks::UnwindRole::kSampler, rs, rs.sp(), s.stack, s.stack_len, pcs, kMaxFrames);
  // At a switch the user ip is the instruction after the syscall: like a
  // return address, step back into it so it symbolizes to the call.
  if (at_switch && n > 0 && pcs[0]) pcs[0] -= 1;
  return n;
}

uint64_t PeriodNs(const Sample& s) {
  if (s.period) return s.period;  // cpu-clock counts nanoseconds
  return 1000000000ull / (g->opts.hz ? g->opts.hz : 1);
}

void UnwindPending(Slot& slot, const Batch& b) {
  slot.pending_n = 0;
  perf_event_header h;
  if (slot.pending_pos + sizeof(h) <= b.len) {
    std::memcpy(&h, b.data + slot.pending_pos, sizeof(h));
    Sample smp;
    if (h.size >= sizeof(h) && slot.pending_pos + h.size <= b.len &&
        ParseSample(b.data + slot.pending_pos, h.size, &smp))
      slot.pending_n = UnwindSample(smp, true, slot.pending_pcs);
  }
  slot.pending_unwound = true;
}

// `b` is the batch holding the switch sample, or null once it was unwound.
void EndBlock(Slot& slot, const Batch* b, uint64_t end_time) {
  Counters& c = g->counters;
  if (slot.pending_preempted) {
    c.preempted++;
  } else if (end_time < slot.pending_time || end_time - slot.pending_time < g->opts.offcpu_min_ns) {
    c.short_blocks++;  // never unwound: most switches are short
  } else {
    if (!slot.pending_unwound && b) UnwindPending(slot, *b);
    if (slot.pending_n > 0) {
      QueueOffCpuSample(slot.pending_time, static_cast<uint32_t>(slot.tid), slot.pending_pcs,
                       slot.pending_n, end_time - slot.pending_time, "switch",
                       static_cast<uint32_t>(std::min<uint64_t>(slot.pending_weight, UINT32_MAX)));
      c.offcpu_emitted++;
    }
  }
  slot.pending = false;
}

void HandleRecord(Slot& slot, const Batch& b, uint64_t pos, const perf_event_header& h, const uint8_t* rec,
                  uint64_t now_ns, double cpu_factor) {
  Counters& c = g->counters;
  switch (h.type) {
    case PERF_RECORD_SAMPLE: {
      Sample s;
      if (!ParseSample(rec, h.size, &s)) {
        c.bad_records++;
        return;
      }
      if (slot.sw_id && s.id == slot.sw_id) {
        c.switch_samples++;
        slot.pending = true;
        slot.pending_preempted = false;
        slot.pending_unwound = false;
        slot.pending_pos = pos;
        slot.pending_time = s.time;
        // The sample stands for the switches since the previous one: about
        // the period (up to twice it right after a period change). When
        // samples were lost between, their blocks are not charged to this
        // one's stack and duration (one sample would weigh for dozens);
        // sampler.lost counts them.
        uint64_t since = s.period > slot.last_switch_count ? s.period - slot.last_switch_count : 1;
        if (slot.lost_since_switch_sample) since = std::min(since, 2 * std::max(slot.sw_period, slot.prev_sw_period));
        slot.pending_weight = since;
        slot.last_switch_count = s.period;
        slot.lost_since_switch_sample = false;
        return;
      }
      uint64_t pcs[kMaxFrames];
      // Taken in the kernel: the user registers are those at kernel entry, so
      // the leaf is the instruction after the syscall (like at a switch).
      const bool in_kernel = (h.misc & PERF_RECORD_MISC_CPUMODE_MASK) == PERF_RECORD_MISC_KERNEL;
      const int n = UnwindSample(s, in_kernel, pcs);
      const uint64_t period = cpu_factor < 1.0 ? static_cast<uint64_t>(static_cast<double>(PeriodNs(s)) * cpu_factor)
                                               : PeriodNs(s);
      if (n > 0) QueueCpuSample(s.time, s.tid ? s.tid : static_cast<uint32_t>(slot.tid), pcs, n, period);
      c.samples++;
      return;
    }
    case PERF_RECORD_SWITCH: {
      uint64_t time = 0;
      uint32_t tid = 0;
      if (h.misc & PERF_RECORD_MISC_SWITCH_OUT) {
        slot.tune_outs++;
        c.switch_outs++;
      }
      if (!ParseTrailer(rec, h.size, &time, &tid) || !slot.pending) return;
      if (h.misc & PERF_RECORD_MISC_SWITCH_OUT) {
        if (h.misc & PERF_RECORD_MISC_SWITCH_OUT_PREEMPT) slot.pending_preempted = true;
      } else {
        EndBlock(slot, &b, time);
      }
      return;
    }
    case PERF_RECORD_LOST:
    case PERF_RECORD_LOST_SAMPLES: {
      uint64_t lost = 0;
      const size_t at = sizeof(perf_event_header) + (h.type == PERF_RECORD_LOST ? 8 : 0);
      if (h.size < at + 8) return;
      std::memcpy(&lost, rec + at, 8);
      uint64_t time = now_ns;
      uint32_t tid = 0;
      ParseTrailer(rec, h.size, &time, &tid);
      // One sampler.lost per thread and drain, not one per kernel record
      // (ReportLost, at the end of the batch).
      if (!slot.batch_lost_time) slot.batch_lost_time = time;
      slot.lost_records += lost;
      slot.lost_since_switch_sample = true;
      // A lost switch-in would pair this switch-out with a much later one.
      slot.pending = false;
      return;
    }
    default:
      return;  // throttle, itrace, ...: nothing for us
  }
}

struct RingView {
  perf_event_mmap_page* meta;
  const uint8_t* data;
  uint64_t size;  // power of two
};

RingView ViewOf(const Slot& slot) {
  auto* meta = reinterpret_cast<perf_event_mmap_page*>(slot.base);
  RingView v;
  v.meta = meta;
  v.size = meta->data_size ? meta->data_size : slot.map_len - g->page;
  v.data = slot.base + (meta->data_offset ? meta->data_offset : g->page);
  return v;
}

// Bytes the kernel has written and we have not consumed.
size_t Unread(const RingView& v) {
  const uint64_t head = __atomic_load_n(&v.meta->data_head, __ATOMIC_ACQUIRE);
  return static_cast<size_t>(std::min<uint64_t>(head - v.meta->data_tail, v.size));
}

// Moves whole records (at most cap bytes) out of the ring into dst and hands
// the space back to the kernel. Only the slot's current owner calls this.
size_t TakeRecords(Slot& slot, uint8_t* dst, size_t cap) {
  const RingView v = ViewOf(slot);
  const uint64_t tail = v.meta->data_tail;
  const size_t len = std::min(Unread(v), cap);
  size_t whole = 0;
  while (whole + sizeof(perf_event_header) <= len) {
    perf_event_header h;
    CopyOut(v.data, v.size, tail + whole, reinterpret_cast<uint8_t*>(&h), sizeof(h));
    if (h.size < sizeof(h)) {  // cannot happen; never loop on it: drop the rest
      g->counters.bad_records++;
      whole = 0;
      __atomic_store_n(&v.meta->data_tail, tail + len, __ATOMIC_RELEASE);
      return 0;
    }
    if (whole + h.size > len) break;
    whole += h.size;
  }
  if (whole) CopyOut(v.data, v.size, tail, dst, whole);
  __atomic_store_n(&v.meta->data_tail, tail + whole, __ATOMIC_RELEASE);
  return whole;
}

// The thread's CPU time (ns), or 0 if it cannot be read (the thread is gone).
uint64_t ThreadCpuNs(pid_t tid) {
  // The clock id glibc's pthread_getcpuclockid makes of a tid: per-thread,
  // CPUCLOCK_SCHED (the kernel's sum_exec_runtime).
  const clockid_t clock = static_cast<clockid_t>((~static_cast<unsigned>(tid) << 3) | 6);
  timespec ts;
  if (clock_gettime(clock, &ts) != 0) return 0;
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// The factor for the CPU samples of a live thread's batch (cpu_credit.h).
// A drain's later chunks carry the whole credit of its first: they claim the
// CPU time gained before the drain began, chunk by chunk.
double CpuFactor(Slot& slot, const Batch& b, bool first_chunk) {
  uint64_t periods = 0;
  for (size_t pos = 0; pos + sizeof(perf_event_header) <= b.len;) {
    perf_event_header h;
    std::memcpy(&h, b.data + pos, sizeof(h));
    if (h.size < sizeof(h) || pos + h.size > b.len) break;
    Sample s;
    if (h.type == PERF_RECORD_SAMPLE && ParseSample(b.data + pos, h.size, &s) && !(slot.sw_id && s.id == slot.sw_id))
      periods += PeriodNs(s);
    pos += h.size;
  }
  if (!periods) return 1.0;
  const uint64_t cpu = ThreadCpuNs(slot.tid);
  if (!cpu) return 1.0;
  return slot.cpu_credit.Take(cpu, periods, first_chunk ? 1000000000ull / (g->opts.hz ? g->opts.hz : 1) : UINT64_MAX);
}

// The slot's losses not yet queued, as one sampler.lost (see Slot).
void ReportLost(Slot& slot, uint64_t now_ns) {
  const uint64_t total = std::max(slot.lost_records, slot.cpu_lost_read);
  if (total > slot.lost_reported) {
    const uint64_t n = total - slot.lost_reported;
    QueueSamplerLost(slot.batch_lost_time ? slot.batch_lost_time : now_ns, static_cast<uint32_t>(slot.tid), n);
    g->counters.lost += n;
    slot.lost_reported = total;
  }
  slot.batch_lost_time = 0;
}

// The CPU event's count of samples lost to a full ring (PERF_FORMAT_LOST),
// into slot.cpu_lost_read. By the slot's owner, after taking its records:
// a loss needs a full ring, so the count read then holds every loss before
// those records. The raw syscall: read() is one of our own socket hooks.
void ReadCpuLost(Slot& slot) {
  if (slot.cpu_fd < 0 || !g->format_lost.load(std::memory_order_relaxed)) return;
  if (FdWasLost(slot.cpu_fd) || !IsProtectedFd(slot.cpu_fd)) return;  // the application's file now
  uint64_t v[2];
  if (syscall(SYS_read, slot.cpu_fd, v, sizeof(v)) == static_cast<long>(sizeof(v)) && v[1] > slot.cpu_lost_read)
    slot.cpu_lost_read = v[1];
}

// live: the slot's thread is alive (not an orphan's saved records).
void ProcessBatch(uint64_t now_ns, Slot& slot, const Batch& b, bool live, bool first_chunk = true) {
  const double cpu_factor = live ? CpuFactor(slot, b, first_chunk) : 1.0;
  for (size_t pos = 0; pos + sizeof(perf_event_header) <= b.len;) {
    perf_event_header h;
    std::memcpy(&h, b.data + pos, sizeof(h));
    if (h.size < sizeof(h) || pos + h.size > b.len) break;
    HandleRecord(slot, b, pos, h, b.data + pos, now_ns, cpu_factor);
    pos += h.size;
  }
  ReportLost(slot, now_ns);
  // A block still open at the end of the batch is long enough to matter:
  // unwind its sample now, before the batch is reused.
  if (slot.pending && !slot.pending_unwound && !slot.pending_preempted) UnwindPending(slot, b);
  if (g->shutdown.load(std::memory_order_acquire) && slot.pending) EndBlock(slot, nullptr, now_ns);
}

// xorshift: dithering only, needs no quality.
uint64_t NextRandom() {
  static uint64_t x = 0x9e3779b97f4a7c15ull;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return x;
}

// Sampler thread, after a drain: re-measures the thread's switch-out rate
// once per window (or at once when the ring overflowed) and sets the switch
// event's period (see the top of the file).
void TuneSwitchPeriod(Slot& s, uint64_t now_ns, bool overflowed) {
  if (s.sw_fd < 0 || !s.sw_id) return;
  if (!s.tune_start || now_ns < s.tune_start) {
    s.tune_start = now_ns;
    s.tune_outs = 0;
    if (!overflowed) return;
  }
  const uint64_t dt = now_ns - s.tune_start;
  if (dt < kSwitchTuneNs && !overflowed) return;
  // The application may have dup2'd onto our fd: never touch its file.
  if (FdWasLost(s.sw_fd) || !IsProtectedFd(s.sw_fd)) return;
  // The event's count is every switch, even when the ring overflowed and
  // SWITCH records were lost; the records are the fallback.
  uint64_t outs = s.tune_outs, count = 0;
  // The raw syscall: read() is one of our own socket hooks.
  if (syscall(SYS_read, s.sw_fd, &count, sizeof(count)) == static_cast<long>(sizeof(count))) {
    if (s.tune_count_ok && count >= s.tune_count) outs = std::max(outs, count - s.tune_count);
    s.tune_count = count;
    s.tune_count_ok = true;
  }
  const uint64_t per_sec = dt ? outs * 1000000000ull / dt : outs;
  // Rounded down: a window holds few switches of a thread that blocks
  // rarely (two in 20 ms read as 100/s), and rounding up would thin a
  // thread blocking 33 times a second, which should keep period 1.
  uint64_t want = per_sec / kSwitchSamplesPerSec;
  if (overflowed) want = std::max(want, s.sw_period * 8);
  want = std::clamp<uint64_t>(want, 1, kMaxSwitchPeriod);
  uint64_t next = want >= s.sw_period ? want : std::max(want, s.sw_period / 2);
  s.tune_start = now_ns;
  s.tune_outs = 0;
  // Each change restarts the kernel's countdown (the next switch is
  // sampled), so change only for a real difference in rate, or every
  // kDitherWindows windows to move the sampling phase (+-25%).
  const bool redither = ++s.windows_since_change >= kDitherWindows && next >= 4;
  if (!redither && next * 4 >= s.sw_period * 3 && next * 4 <= s.sw_period * 5) return;
  if (next >= 4) next = next - next / 4 + NextRandom() % (next / 2 + 1);
  if (next == s.sw_period) return;
  if (InProgramFdTable() && ioctl(s.sw_fd, PERF_EVENT_IOC_PERIOD, &next) == 0) {
    s.prev_sw_period = s.sw_period;
    s.sw_period = next;
    s.windows_since_change = 0;
    g->counters.period_changes++;
  }
}

// Sampler thread, slot in kDraining: processes one chunk of at most
// kDrainChunkBytes of the ring (first_chunk: the first of this drain).
// Returns true when the ring holds more. In chunks, so that the records this
// thread holds outside the ring stay few: an exit that finds it in the
// middle of a collection (starved, its priority only just lifted) waits for
// one chunk, not for a whole 4 MiB ring to be unwound, and what is still in
// the ring is the exiting thread's to collect (SamplerStopRequested).
bool DrainSlot(uint64_t now_ns, Slot& slot, bool first_chunk) {
  if (!slot.base) return false;
  const size_t unread = Unread(ViewOf(slot));
  if (first_chunk && unread * 4 >= slot.map_len - g->page) g->pressure = true;
  const size_t want = std::min(unread, kDrainChunkBytes);
  if (want > g->batch_cap) {
    void* grown = mi_realloc(g->batch, want);
    if (grown) {
      g->batch = static_cast<uint8_t*>(grown);
      g->batch_cap = want;
    }
  }
  const size_t got = TakeRecords(slot, g->batch, std::min(g->batch_cap, want));
  if (got) ReadCpuLost(slot);
  const uint64_t lost_then = g->counters.lost;
  ProcessBatch(now_ns, slot, Batch{g->batch, got}, true, first_chunk);
  const bool overflowed = g->counters.lost != lost_then;
  if (overflowed) g->pressure = true;
  TuneSwitchPeriod(slot, now_ns, overflowed);
  return got && got < unread;
}

// Sampler thread, slot in kDraining: every chunk the ring holds.
void DrainSlotFully(uint64_t now_ns, Slot& slot) {
  for (size_t chunk = 0; chunk <= kMaxRingBytes / kDrainChunkBytes && DrainSlot(now_ns, slot, chunk == 0); ++chunk) {
  }
}

// Exiting owner, slot in kClosing: saves the unread records (no unwinding on
// an application thread), unmaps the ring and frees the slot.
void SaveAndClose(Slot& slot) {
  const size_t unread = slot.base ? Unread(ViewOf(slot)) : 0;
  if (unread) {
    auto* o = static_cast<Orphan*>(mi_malloc(sizeof(Orphan) + unread));
    if (o) {
      o->tid = slot.tid;
      o->cpu_id = slot.cpu_id;
      o->sw_id = slot.sw_id;
      // The sampler thread's pending state is ours to read: we hold kClosing
      // (acquired from its release of kDraining).
      o->pending = slot.pending && slot.pending_unwound && !slot.pending_preempted;
      o->pending_time = slot.pending_time;
      o->pending_weight = slot.pending_weight;
      o->last_switch_count = slot.last_switch_count;
      o->sw_period = slot.sw_period;
      o->prev_sw_period = slot.prev_sw_period;
      o->pending_n = o->pending ? slot.pending_n : 0;
      std::memcpy(o->pending_pcs, slot.pending_pcs, static_cast<size_t>(o->pending_n) * sizeof(uint64_t));
      o->len = TakeRecords(slot, o->data, unread);
      ReadCpuLost(slot);
      o->lost_records = slot.lost_records;
      o->cpu_lost_read = slot.cpu_lost_read;
      o->lost_reported = slot.lost_reported;
      o->next = g->orphans.load(std::memory_order_relaxed);
      while (!g->orphans.compare_exchange_weak(o->next, o, std::memory_order_release, std::memory_order_relaxed)) {
      }
    } else {
      g->counters.orphan_bytes_lost.fetch_add(unread, std::memory_order_relaxed);
    }
  }
  Reclaim(slot);
}

void ProcessOrphans(uint64_t now_ns) {
  Orphan* o = g->orphans.exchange(nullptr, std::memory_order_acquire);
  while (o) {
    Orphan* next = o->next;
    Slot& ctx = g->orphan_slot;
    ctx.tid = o->tid;
    ctx.cpu_id = o->cpu_id;
    ctx.sw_id = o->sw_id;
    ctx.pending = o->pending;
    ctx.pending_preempted = false;
    ctx.pending_unwound = o->pending;
    ctx.pending_time = o->pending_time;
    ctx.pending_weight = o->pending_weight;
    ctx.last_switch_count = o->last_switch_count;
    ctx.sw_period = o->sw_period;
    ctx.prev_sw_period = o->prev_sw_period;
    ctx.lost_since_switch_sample = false;
    ctx.lost_records = o->lost_records;
    ctx.cpu_lost_read = o->cpu_lost_read;
    ctx.lost_reported = o->lost_reported;
    ctx.batch_lost_time = 0;
    ctx.pending_n = o->pending_n;
    std::memcpy(ctx.pending_pcs, o->pending_pcs, static_cast<size_t>(o->pending_n) * sizeof(uint64_t));
    ProcessBatch(now_ns, ctx, Batch{o->data, o->len}, false);
    mi_free(o);
    o = next;
  }
}

bool TaskGone(const Slot& s) {
  pollfd p{s.cpu_fd, POLLIN, 0};
  return poll(&p, 1, 0) > 0 && (p.revents & POLLHUP);
}

}  // namespace

PerfProbeResult PerfProbe(const PerfOptions& opts) {
  PerfProbeResult r;
  // With kernel time before without.
  int fd = -1;
  for (const bool kernel : {true, false}) {
    perf_event_attr a = Attr(opts, false, kernel);
    fd = PerfEventOpen(&a, 0);
    if (fd >= 0) {
      r.cpu_ok = true;
      r.kernel = kernel;
      break;
    }
    r.cpu_errno = errno;
  }
  if (fd >= 0) close(fd);
  if (r.cpu_ok && opts.offcpu) {
    perf_event_attr s = Attr(opts, true, true);
    const int sfd = PerfEventOpen(&s, 0);
    if (sfd >= 0) {
      r.switch_ok = true;
      close(sfd);
    } else {
      r.switch_errno = errno;
    }
  }
  return r;
}

bool PerfConfigure(const PerfOptions& opts_in, bool kernel, bool switch_ok) {
  if (g) return true;
  void* mem = mmap(nullptr, sizeof(PerfState) + sizeof(Slot) * kMaxSlots, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return false;
  auto* st = new (mem) PerfState();
  st->slots = reinterpret_cast<Slot*>(static_cast<uint8_t*>(mem) + sizeof(PerfState));
  for (int i = 0; i < kMaxSlots; ++i) new (&st->slots[i]) Slot();
  st->opts = opts_in;
  st->opts.stack_bytes = std::min<uint32_t>(opts_in.stack_bytes, kMaxStackBytes) & ~7u;
  st->kernel = kernel;
  st->switch_ok = switch_ok && opts_in.offcpu;
  st->page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  // Ring size (ring_sizing.h): a sample reserves its whole stack copy, so the
  // ring's cost is the record size times the samples of the starvation
  // budget, rounded up to a power of two of pages.
  const RingPlan plan = PlanRing(RingInputs{PerfSampleBytes(st->opts.stack_bytes), st->opts.hz,
                                            st->switch_ok ? kSwitchSamplesPerSec : 0,
                                            st->switch_ok ? kSwitchRecordRoom : 0, kStarvationBudgetNs,
                                            st->page, kMaxRingBytes});
  st->min_pages = plan.min_pages;
  st->data_pages.store(plan.data_pages);
  st->watermark_bytes = plan.watermark_bytes;
  g = st;
  return true;
}

uint64_t PerfRingHalfFillNs() {
  if (!g) return UINT64_MAX;
  return RingFillNs(PerfSampleBytes(g->opts.stack_bytes), g->opts.hz + (g->switch_ok ? kSwitchSamplesPerSec : 0),
                    g->data_pages.load(std::memory_order_relaxed) * g->page / 2);
}

bool PerfArmThread(pid_t tid, bool self) {
  if (!g || g->shutdown.load(std::memory_order_relaxed)) return false;
  // Arming another thread that already armed itself (a thread starting
  // while the sampler thread arms every thread) would sample it twice.
  if (!self && HasSlotFor(tid)) return true;
  const int idx = ClaimSlot();
  if (idx < 0) {
    g->counters.arm_failed.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  Slot& s = g->slots[idx];
  s.tid = tid;
  s.cpu_fd = s.sw_fd = -1;
  s.base = nullptr;
  s.pending = false;
  // The first rate window starts now, from a count of zero: a thread that
  // switches hard from its first moment gets its period at the first drain.
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ResetSwitchThinning(s, static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec));
  perf_event_attr a = Attr(g->opts, false, g->kernel);
  // The kernel wakes the sampler thread (its epoll set) when the watermark's
  // bytes are written (ring_sizing.h: at most a quarter of the ring, and the
  // rest holds the starvation budget): it runs at nice +10 and may be slow
  // to come. A ring mapped smaller than planned below wakes it later, at
  // worst when full; the thread's FLIGHTREC_FLUSH_MS timeout still bounds that.
  a.watermark = 1;
  a.wakeup_watermark = static_cast<uint32_t>(g->watermark_bytes);
  s.cpu_fd = OpenGuarded(&a, tid);
  if (s.cpu_fd < 0 && errno == EINVAL && a.read_format) {  // a kernel before 6.0: LOST records alone
    g->format_lost.store(false, std::memory_order_relaxed);
    a.read_format = 0;
    s.cpu_fd = OpenGuarded(&a, tid);
  }
  if (s.cpu_fd < 0) {
    s.state.store(kFree, std::memory_order_release);
    g->counters.arm_failed.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  // Locked memory is limited (perf_event_mlock_kb, RLIMIT_MEMLOCK): when the
  // kernel refuses a ring, try smaller ones and remember the size that works.
  size_t pages = g->data_pages.load(std::memory_order_relaxed);
  const size_t in_use = g->ring_bytes.load(std::memory_order_relaxed);
  if (in_use + (pages + 1) * g->page > kRingSoftBudget) pages = std::max(g->min_pages, pages / 8);
  void* base = MAP_FAILED;
  if (in_use + (pages + 1) * g->page > kRingHardBudget) {
    errno = ENOMEM;
    pages = 0;  // skip the loop: over budget
  }
  while (pages >= g->min_pages) {
    base = mmap(nullptr, (pages + 1) * g->page, PROT_READ | PROT_WRITE, MAP_SHARED, s.cpu_fd, 0);
    if (base != MAP_FAILED || (errno != EPERM && errno != ENOMEM)) break;
    pages /= 2;
    if (pages >= g->min_pages) g->data_pages.store(pages, std::memory_order_relaxed);
  }
  if (base == MAP_FAILED) {
    CloseSlotFds(s);
    s.state.store(kFree, std::memory_order_release);
    g->counters.arm_failed.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  s.base = static_cast<uint8_t*>(base);
  s.map_len = (pages + 1) * g->page;
  WatchRingFd(s.cpu_fd);
  g->ring_bytes.fetch_add(s.map_len, std::memory_order_relaxed);
  s.cpu_id = s.sw_id = 0;
  ioctl(s.cpu_fd, PERF_EVENT_IOC_ID, &s.cpu_id);
  if (g->switch_ok) {
    perf_event_attr sa = Attr(g->opts, true, true);
    s.sw_fd = OpenGuarded(&sa, tid);
    if (s.sw_fd >= 0 && (ioctl(s.sw_fd, PERF_EVENT_IOC_SET_OUTPUT, s.cpu_fd) != 0 ||
                         ioctl(s.sw_fd, PERF_EVENT_IOC_ID, &s.sw_id) != 0)) {
      CloseGuarded(s.sw_fd);
      s.sw_fd = -1;
      s.sw_id = 0;
    }
  }
  ioctl(s.cpu_fd, PERF_EVENT_IOC_ENABLE, 0);
  if (s.sw_fd >= 0) ioctl(s.sw_fd, PERF_EVENT_IOC_ENABLE, 0);
  s.state.store(kActive, std::memory_order_release);
  if (self) {
    t_slot = idx + 1;
    t_has_switch = s.sw_fd >= 0;
  }
  g->counters.armed.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool PerfSelfHasSwitch() { return t_slot != 0 && t_has_switch; }

bool PerfAdoptThread(pid_t tid) {
  if (!g) return false;
  if (t_slot) return true;
  const int n = std::min(g->hwm.load(std::memory_order_acquire), kMaxSlots);
  for (int i = 0; i < n; ++i) {
    Slot& s = g->slots[i];
    const int st = s.state.load(std::memory_order_acquire);
    if ((st == kActive || st == kDraining) && s.tid == tid) {
      t_slot = i + 1;
      t_has_switch = s.sw_fd >= 0;
      return true;
    }
  }
  return false;
}

void PerfDisarmSelf() {
  if (!g || !t_slot) return;
  Slot& s = g->slots[t_slot - 1];
  t_slot = 0;
  t_has_switch = false;
  const int st = s.state.load(std::memory_order_acquire);
  if (st != kActive && st != kDraining) return;
  if (s.sw_fd >= 0) ioctl(s.sw_fd, PERF_EVENT_IOC_DISABLE, 0);
  ioctl(s.cpu_fd, PERF_EVENT_IOC_DISABLE, 0);
  // Free the ring now rather than when the (low-priority) sampler thread
  // next runs: with thousands of short threads, waiting rings add up.
  int expected = kActive;
  if (s.state.compare_exchange_strong(expected, kClosing, std::memory_order_acq_rel)) {
    SaveAndClose(s);
  } else {
    s.retire.store(true, std::memory_order_release);  // being drained: reclaimed after
  }
}

// kActive -> kDraining: the caller holds the slot's ring and fds until it
// moves the slot on.
static bool TakeActiveSlot(Slot& s) {
  int expected = kActive;
  return s.state.load(std::memory_order_relaxed) == kActive &&
         s.state.compare_exchange_strong(expected, kDraining, std::memory_order_acq_rel);
}

bool PerfCollect(uint64_t now_ns) {
  if (!g) return false;
  g->pressure = false;
  const bool hup_check = now_ns - g->last_hup_check >= kHupCheckNs;
  if (hup_check) g->last_hup_check = now_ns;
  const int n = std::min(g->hwm.load(std::memory_order_acquire), kMaxSlots);
  // Off the sampler thread (the exit's last collection) nobody asks to stop.
  const bool on_sampler_thread = IsSamplerThread();
  for (int i = 0; i < n; ++i) {
    Slot& s = g->slots[i];
    // At most a ring's worth of chunks: a thread that writes as fast as
    // this thread unwinds must not keep it from the other rings.
    for (size_t chunk = 0; chunk <= kMaxRingBytes / kDrainChunkBytes; ++chunk) {
      const bool first = chunk == 0;
      if (on_sampler_thread && SamplerStopRequested()) return g->pressure;  // the stopper collects the rest
      if (!TakeActiveSlot(s)) break;
      const bool more = DrainSlot(now_ns, s, first);
      // An owner that exited during a drain asked for reclaim; threads armed
      // from outside (at init) have no exit observer, but the kernel reports
      // their events as hung up once the task is gone.
      if (s.retire.load(std::memory_order_acquire) || (hup_check && first && TaskGone(s))) {
        DrainSlotFully(now_ns, s);
        if (s.pending) EndBlock(s, nullptr, now_ns);
        Reclaim(s);
        break;
      }
      s.state.store(kActive, std::memory_order_release);
      if (!more) break;
    }
  }
  ProcessOrphans(now_ns);
  return g->pressure;
}

void PerfShutdown() {
  if (!g) return;
  g->shutdown.store(true, std::memory_order_release);
  const int n = std::min(g->hwm.load(std::memory_order_acquire), kMaxSlots);
  for (int i = 0; i < n; ++i) {
    // Only a slot we hold: one in kDraining belongs to the sampler thread,
    // which may reclaim it and close its fds meanwhile (TSan: this read of
    // the fds raced CloseSlotFds), and the numbers could then be reused by
    // the application. Its events stay on until the process goes.
    Slot& s = g->slots[i];
    if (!TakeActiveSlot(s)) continue;
    if (InProgramFdTable() && s.sw_fd >= 0) ioctl(s.sw_fd, PERF_EVENT_IOC_DISABLE, 0);
    if (InProgramFdTable() && s.cpu_fd >= 0) ioctl(s.cpu_fd, PERF_EVENT_IOC_DISABLE, 0);
    s.state.store(kActive, std::memory_order_release);
  }
}

uint64_t PerfDiscardUnread(uint64_t now_ns) {
  if (!g) return 0;
  uint64_t total = 0;
  const int n = std::min(g->hwm.load(std::memory_order_acquire), kMaxSlots);
  for (int i = 0; i < n; ++i) {
    Slot& s = g->slots[i];
    if (!TakeActiveSlot(s)) continue;  // the stalled sampler thread holds it (or it is free)
    if (s.base) {
      const RingView v = ViewOf(s);
      const uint64_t tail = v.meta->data_tail;
      const size_t len = Unread(v);
      uint64_t samples = 0;
      for (size_t pos = 0; pos + sizeof(perf_event_header) <= len;) {
        perf_event_header h;
        CopyOut(v.data, v.size, tail + pos, reinterpret_cast<uint8_t*>(&h), sizeof(h));
        if (h.size < sizeof(h) || pos + h.size > len) break;
        if (h.type == PERF_RECORD_SAMPLE) samples++;
        pos += h.size;
      }
      __atomic_store_n(&v.meta->data_tail, tail + len, __ATOMIC_RELEASE);
      QueueSamplerLost(now_ns, static_cast<uint32_t>(s.tid), samples);
      total += samples;
    }
    s.state.store(kActive, std::memory_order_release);
  }
  return total;
}

void PerfAtForkChild() {
  t_slot = 0;
  t_has_switch = false;
  if (!g) return;
  const int n = std::min(g->hwm.load(std::memory_order_relaxed), kMaxSlots);
  for (int i = 0; i < n; ++i) {
    Slot& s = g->slots[i];
    if (s.state.load(std::memory_order_relaxed) != kFree) CloseSlotFds(s);
    s.base = nullptr;  // VM_DONTCOPY: not mapped in the child
    s.map_len = 0;
    s.pending = false;
    s.retire.store(false, std::memory_order_relaxed);
    s.state.store(kFree, std::memory_order_relaxed);
  }
  g->hwm.store(0, std::memory_order_relaxed);
  g->ring_bytes.store(0, std::memory_order_relaxed);
  g->orphans.store(nullptr, std::memory_order_relaxed);  // the parent's: leaked
  g->last_hup_check = 0;
}

PerfStats GetPerfStats() {
  PerfStats s;
  if (!g) return s;
  const Counters& c = g->counters;
  s.armed = c.armed.load(std::memory_order_relaxed);
  s.arm_failed = c.arm_failed.load(std::memory_order_relaxed);
  s.samples = c.samples;
  s.switch_samples = c.switch_samples;
  s.lost = c.lost;
  s.offcpu_emitted = c.offcpu_emitted;
  s.switch_outs = c.switch_outs;
  s.period_changes = c.period_changes;
  s.preempted = c.preempted;
  s.short_blocks = c.short_blocks;
  s.bad_records = c.bad_records;
  return s;
}

// ---- the engine (sampler_engine.h) -----------------------------------------

namespace {

// What the process was started with, for the line naming the mode.
EngineOptions g_engine_opts;
bool g_engine_switch_ok = false;

bool EngineStart(const EngineOptions& eo, const char** why) {
  PerfOptions po;
  po.hz = eo.hz;
  po.stack_bytes = eo.stack_bytes;
  po.offcpu = eo.offcpu;
  po.offcpu_min_ns = eo.offcpu_min_ns;
  const PerfProbeResult probe = PerfProbe(po);
  if (!probe.cpu_ok || !PerfConfigure(po, probe.kernel, probe.switch_ok)) {
    *why = strerror(probe.cpu_errno);
    return false;
  }
  if (eo.offcpu && !probe.switch_ok)
    Log(LogLevel::kInfo,
        "context-switch sampling refused (%s; needs perf_event_paranoid <= 1 or CAP_PERFMON); "
        "off-CPU from interposed blocking calls",
        strerror(probe.switch_errno));
  g_engine_opts = eo;
  g_engine_switch_ok = probe.switch_ok;
  return true;
}

void EngineAnnounce() {
  const char* offcpu_source = "none";
  if (g_engine_opts.offcpu) offcpu_source = g_engine_switch_ok ? "context switches" : "blocking calls";
  Log(LogLevel::kInfo, "sampler: perf (cpu-clock of %s time, %llu Hz, %u-byte stacks, off-CPU: %s)",
      g && g->kernel ? "user+kernel" : "user", static_cast<unsigned long long>(g_engine_opts.hz),
      g_engine_opts.stack_bytes, offcpu_source);
}

bool EngineGivesOffCpu() { return g && g->switch_ok; }

bool EngineArmSelf(pid_t tid) {
  if (!PerfArmThread(tid, true)) return false;
  Log(LogLevel::kDebug, "thread %d: perf armed", static_cast<int>(tid));
  return true;
}

bool EngineAdoptSelf(pid_t tid) {
  if (!PerfAdoptThread(tid)) return false;
  Log(LogLevel::kDebug, "thread %d: perf armed", static_cast<int>(tid));
  return true;
}

bool EngineArmThread(pid_t tid) { return PerfArmThread(tid, false); }
void Nothing() {}

}  // namespace

const SamplerEngine kPerfEngine = {
    .name = "perf",
    .start = EngineStart,
    .refusal_prefix = "perf_event_open refused (",
    .refusal_suffix = ")",
    .announce = EngineAnnounce,
    .gives_offcpu = EngineGivesOffCpu,
    .first_drain_within_ns = PerfRingHalfFillNs,
    .adopt_self = EngineAdoptSelf,
    .arm_self = EngineArmSelf,
    .arm_thread = EngineArmThread,
    .self_gives_offcpu = PerfSelfHasSwitch,
    .disarm_self = PerfDisarmSelf,
    .drain = PerfCollect,
    .stop = PerfShutdown,
    .discard_unread = PerfDiscardUnread,
    .at_fork_child = PerfAtForkChild,
    .before_exec = Nothing,
    .after_exec_failed = Nothing,
    .flush_thread_may_leave_program_fds = false,
};

}  // namespace flightrec::sampler
