// perf_event sampler, event setup and arming (see perf_sampler.h): probes
// and configures the events (Attr: what each record holds), sizes the rings
// (ring_sizing.h), and arms, adopts and disarms threads: a slot per thread
// with its two fds and one mmap ring. Runs on application threads (thread
// start/exit hooks) and at init: system calls only, no malloc, no locks.
// Also the engine table (sampler_engine.h). Reading the rings is
// perf_ring.cc's; the switch event's period perf_switch_thinning.cc's; the
// off-CPU blocks perf_switch_pairs.cc's (perf_slots.h lists them).
#include "sampler/perf_sampler.h"

#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <new>

#include "format/own_fds.h"
#include "preload/fds/fd_guard.h"
#include "preload/runtime/log.h"
#include "preload/stacks/stack_unwinder.h"
#include "sampler/perf_slots.h"
#include "sampler/ring_sizing.h"
#include "sampler/sampler_engine.h"
#include "sampler/sampler_thread.h"
#include "sampler/slot_claim.h"

namespace flightrec::sampler {
namespace perf {

constexpr uint32_t kMaxStackBytes = 63 * 1024;
// Ring memory is locked kernel memory mapped into the host. Past the soft
// budget (summed over live threads) new threads get an eighth of the planned
// ring (about 30 ms of samples instead of 250: PlanRing's small_pages);
// past the hard budget they are not armed with perf (in auto mode they fall
// back to SIGPROF timers).
constexpr size_t kRingSoftBudget = 64u << 20;
constexpr size_t kRingHardBudget = 256u << 20;
// Ring room for the SWITCH records (32 bytes, two per switch) that arrive
// between drains: ~40 ms of a thread switching 20,000 times a second.
constexpr size_t kSwitchRecordRoom = 48u << 10;
// How long the sampler thread may go unscheduled without a busy thread's
// ring losing a sample: it runs at nice +10, and on a machine whose CPUs are
// all busy the scheduler can keep it off the CPU for tens to hundreds of
// milliseconds (the kernel's watermark wake-up cannot help a thread that is
// woken but not run). The ring holds the watermark plus this much of the
// configured rate (CPU samples, thinned switch samples); kMaxRingBytes and
// the budgets above bound what that costs.
constexpr uint64_t kStarvationBudgetNs = kRingStarvationBudgetNs;

PerfState* g_perf = nullptr;

namespace {

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

}  // namespace

// If the application dup2'd onto one of our fds, the number is its file now:
// leave it alone (our event lives on through its ring mapping until Reclaim
// unmaps it).
// Perf descriptors live in the program's table: a thread with a table of its
// own (the flush thread's final collection, own_fd_table.h) holds other
// files under those numbers and leaves them alone (the events end with the
// process, or with the thread that owns them).
bool InProgramFdTable() { return !format::t_own_fd_table; }

namespace {

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
  a.sample_type = PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_REGS_USER |
                  PERF_SAMPLE_STACK_USER;
  // Not PERIOD for the switch event: a software event that samples PERIOD
  // writes a sample at every occurrence whatever its sample_period (the
  // kernel's perf_swevent_event), which would defeat the thinning. It samples
  // READ, its count of switches, in the same place of the record instead.
  a.sample_type |= switch_event ? PERF_SAMPLE_READ : PERF_SAMPLE_PERIOD;
  // The CPU event's read() gives its count of samples lost to a full ring
  // (it samples no READ, so its records are unchanged).
  if (!switch_event && g_perf && g_perf->format_lost.load(std::memory_order_relaxed)) a.read_format = PERF_FORMAT_LOST;
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
  return sizeof(perf_event_header) + 8 * 8 + 8 * static_cast<size_t>(__builtin_popcountll(stacks::PerfRegsUserMask())) +
         stack_bytes;
}

bool HasSlotFor(pid_t tid) {
  const int n = std::min(g_perf->hwm.load(std::memory_order_acquire), kMaxSlots);
  for (int i = 0; i < n; ++i) {
    const int st = g_perf->slots[i].state.load(std::memory_order_acquire);
    if ((st == kActive || st == kDraining) && g_perf->slots[i].tid == tid) return true;
  }
  return false;
}

// A free slot, claimed for this thread (slot_claim.h); -1 when all are taken.
int ClaimSlot() { return ClaimSlotIn(g_perf->slots, g_perf->hwm, kMaxSlots, kFree, kArming); }

void CloseSlotFds(Slot& s) {
  CloseGuarded(s.sw_fd);
  CloseGuarded(s.cpu_fd);
  s.sw_fd = s.cpu_fd = -1;
}

// The sampler-thread state of a slot for a new thread: switch thinning
// back to period 1, a rate window starting at start_ns (0: none yet)
// from a count of zero (the event's count once it is enabled);
// the loss and CPU-credit accounting from zero too: a new thread's slot.
void ResetSlotSamplerState(Slot& s, uint64_t start_ns) {
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

}  // namespace

// By the slot's current owner (kDraining or kClosing): the thread is gone
// and the ring drained or saved.
void Reclaim(Slot& s) {
  CloseSlotFds(s);
  if (s.base) {
    munmap(s.base, s.map_len);
    g_perf->ring_bytes.fetch_sub(s.map_len, std::memory_order_relaxed);
  }
  s.base = nullptr;
  s.map_len = 0;
  s.pending = false;
  ResetSlotSamplerState(s, 0);
  s.retire.store(false, std::memory_order_relaxed);
  s.state.store(kFree, std::memory_order_release);
}

}  // namespace perf

using namespace perf;  // this sampler's parts (perf_slots.h)

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
  if (g_perf) return true;
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
  const RingPlan plan =
      PlanRing(RingInputs{PerfSampleBytes(st->opts.stack_bytes), st->opts.hz, st->switch_ok ? kSwitchSamplesPerSec : 0,
                          st->switch_ok ? kSwitchRecordRoom : 0, kStarvationBudgetNs, st->page, kMaxRingBytes});
  st->min_pages = plan.min_pages;
  st->data_pages.store(plan.data_pages);
  st->watermark_bytes = plan.watermark_bytes;
  g_perf = st;
  return true;
}

uint64_t PerfRingHalfFillNs() {
  if (!g_perf) return UINT64_MAX;
  return RingFillNs(PerfSampleBytes(g_perf->opts.stack_bytes),
                    g_perf->opts.hz + (g_perf->switch_ok ? kSwitchSamplesPerSec : 0),
                    g_perf->data_pages.load(std::memory_order_relaxed) * g_perf->page / 2);
}

bool PerfArmThread(pid_t tid, bool self) {
  if (!g_perf || g_perf->shutdown.load(std::memory_order_relaxed)) return false;
  // Arming another thread that already armed itself (a thread starting
  // while the sampler thread arms every thread) would sample it twice.
  if (!self && HasSlotFor(tid)) return true;
  const int idx = ClaimSlot();
  if (idx < 0) {
    g_perf->counters.arm_failed.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  Slot& s = g_perf->slots[idx];
  s.tid = tid;
  s.cpu_fd = s.sw_fd = -1;
  s.base = nullptr;
  s.pending = false;
  // The first rate window starts now, from a count of zero: a thread that
  // switches hard from its first moment gets its period at the first drain.
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ResetSlotSamplerState(s, static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec));
  perf_event_attr a = Attr(g_perf->opts, false, g_perf->kernel);
  // The kernel wakes the sampler thread (its epoll set) when the watermark's
  // bytes are written (ring_sizing.h: at most a quarter of the ring, and the
  // rest holds the starvation budget): it runs at nice +10 and may be slow
  // to come. A ring mapped smaller than planned below wakes it later, at
  // worst when full; the thread's FLIGHTREC_FLUSH_MS timeout still bounds that.
  a.watermark = 1;
  a.wakeup_watermark = static_cast<uint32_t>(g_perf->watermark_bytes);
  s.cpu_fd = OpenGuarded(&a, tid);
  if (s.cpu_fd < 0 && errno == EINVAL && a.read_format) {  // a kernel before 6.0: LOST records alone
    g_perf->format_lost.store(false, std::memory_order_relaxed);
    a.read_format = 0;
    s.cpu_fd = OpenGuarded(&a, tid);
  }
  if (s.cpu_fd < 0) {
    s.state.store(kFree, std::memory_order_release);
    g_perf->counters.arm_failed.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  // Locked memory is limited (perf_event_mlock_kb, RLIMIT_MEMLOCK): when the
  // kernel refuses a ring, try smaller ones and remember the size that works.
  size_t pages = g_perf->data_pages.load(std::memory_order_relaxed);
  const size_t in_use = g_perf->ring_bytes.load(std::memory_order_relaxed);
  if (in_use + (pages + 1) * g_perf->page > kRingSoftBudget) pages = std::max(g_perf->min_pages, pages / 8);
  void* base = MAP_FAILED;
  if (in_use + (pages + 1) * g_perf->page > kRingHardBudget) {
    errno = ENOMEM;
    pages = 0;  // skip the loop: over budget
  }
  while (pages >= g_perf->min_pages) {
    base = mmap(nullptr, (pages + 1) * g_perf->page, PROT_READ | PROT_WRITE, MAP_SHARED, s.cpu_fd, 0);
    if (base != MAP_FAILED || (errno != EPERM && errno != ENOMEM)) break;
    pages /= 2;
    if (pages >= g_perf->min_pages) g_perf->data_pages.store(pages, std::memory_order_relaxed);
  }
  if (base == MAP_FAILED) {
    CloseSlotFds(s);
    s.state.store(kFree, std::memory_order_release);
    g_perf->counters.arm_failed.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  s.base = static_cast<uint8_t*>(base);
  s.map_len = (pages + 1) * g_perf->page;
  WatchRingFd(s.cpu_fd);
  g_perf->ring_bytes.fetch_add(s.map_len, std::memory_order_relaxed);
  s.cpu_id = s.sw_id = 0;
  ioctl(s.cpu_fd, PERF_EVENT_IOC_ID, &s.cpu_id);
  if (g_perf->switch_ok) {
    perf_event_attr sa = Attr(g_perf->opts, true, true);
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
  g_perf->counters.armed.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool PerfSelfHasSwitch() { return t_slot != 0 && t_has_switch; }

bool PerfAdoptThread(pid_t tid) {
  if (!g_perf) return false;
  if (t_slot) return true;
  const int n = std::min(g_perf->hwm.load(std::memory_order_acquire), kMaxSlots);
  for (int i = 0; i < n; ++i) {
    Slot& s = g_perf->slots[i];
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
  if (!g_perf || !t_slot) return;
  Slot& s = g_perf->slots[t_slot - 1];
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

void PerfShutdown() {
  if (!g_perf) return;
  g_perf->shutdown.store(true, std::memory_order_release);
  const int n = std::min(g_perf->hwm.load(std::memory_order_acquire), kMaxSlots);
  for (int i = 0; i < n; ++i) {
    // Only a slot we hold: one in kDraining belongs to the sampler thread,
    // which may reclaim it and close its fds meanwhile (TSan: this read of
    // the fds raced CloseSlotFds), and the numbers could then be reused by
    // the application. Its events stay on until the process goes.
    Slot& s = g_perf->slots[i];
    if (!TakeActiveSlot(s)) continue;
    if (InProgramFdTable() && s.sw_fd >= 0) ioctl(s.sw_fd, PERF_EVENT_IOC_DISABLE, 0);
    if (InProgramFdTable() && s.cpu_fd >= 0) ioctl(s.cpu_fd, PERF_EVENT_IOC_DISABLE, 0);
    s.state.store(kActive, std::memory_order_release);
  }
}

void PerfAtForkChild() {
  t_slot = 0;
  t_has_switch = false;
  if (!g_perf) return;
  const int n = std::min(g_perf->hwm.load(std::memory_order_relaxed), kMaxSlots);
  for (int i = 0; i < n; ++i) {
    Slot& s = g_perf->slots[i];
    if (s.state.load(std::memory_order_relaxed) != kFree) CloseSlotFds(s);
    s.base = nullptr;  // VM_DONTCOPY: not mapped in the child
    s.map_len = 0;
    s.pending = false;
    s.retire.store(false, std::memory_order_relaxed);
    s.state.store(kFree, std::memory_order_relaxed);
  }
  g_perf->hwm.store(0, std::memory_order_relaxed);
  g_perf->ring_bytes.store(0, std::memory_order_relaxed);
  g_perf->orphans.store(nullptr, std::memory_order_relaxed);  // the parent's: leaked
  g_perf->last_hup_check = 0;
}

PerfStats GetPerfStats() {
  PerfStats s;
  if (!g_perf) return s;
  const Counters& c = g_perf->counters;
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
      g_perf && g_perf->kernel ? "user+kernel" : "user", static_cast<unsigned long long>(g_engine_opts.hz),
      g_engine_opts.stack_bytes, offcpu_source);
}

bool EngineGivesOffCpu() { return g_perf && g_perf->switch_ok; }

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
