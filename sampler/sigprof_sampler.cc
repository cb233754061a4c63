// SIGPROF sampler (see sigprof_sampler.h).
//
// Signal-safety: everything reachable from Handler() is async-signal-safe:
// clock_gettime of the thread's CPU clock (a sample's weight), register
// copies, memcpy within stack bounds learned at arm time, process_vm_readv
// (a syscall that fails instead of faulting) otherwise, and
// the slot's single-producer ring (the handler is its only producer: SIGPROF
// is blocked while it runs, so it never re-enters). errno is preserved.
#include "sampler/sigprof_sampler.h"

#include <dlfcn.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <new>

#include "preload/runtime/clock.h"
#include "preload/runtime/core_events.h"
#include "preload/crash/crash_freeze.h"
#include "preload/runtime/log.h"
#include "preload/runtime/proc_stat.h"
#include "preload/runtime/seccomp_state.h"
#include "preload/heap/address_space.h"
#include "preload/fds/validation_pipe.h"
#include "preload/threads/ring.h"
#include "preload/crash/raw_syscall.h"
#include "preload/crash/signal_mask.h"
#include "preload/crash/sigprof_owner.h"
#include "sampler/ring_sizing.h"
#include "sampler/symbols/proc_maps.h"
#include "sampler/sample_events.h"
#include "sampler/sampler_engine.h"
#include "sampler/sampler_thread.h"
#include "sampler/slot_claim.h"

namespace flightrec::sampler {
namespace {

constexpr int kMaxTimers = 4096;
constexpr uint64_t kLivenessCheckNs = 250'000'000;
enum TimerState : int { kFree = 0, kArming = 1, kArmed = 2, kRetiring = 3 };

// A timer slot. The table of kMaxTimers slots (1 MiB) is zero-filled
// mmap'd memory whose slots are never constructed: all-zero bytes is a free
// slot (state kFree, no ring yet), which is what the kernel hands out. So
// only the pages of slots actually claimed are ever touched. Constructing
// the table wrote the whole MiB at start-up: about 4.4 ms of CPU (256 page
// faults) in every process started under the preload. Members are plain
// integers, pointers and lock-free atomics of them.
struct TimerSlot {
  std::atomic<int> state;  // TimerState
  // Atomic: SigprofAdoptThread reads it while a thread that claimed the
  // recycled slot writes it (TSan, 2,000 threads starting and ending).
  std::atomic<pid_t> tid;
  int timer_id;              // kernel timer id, while armed
  std::atomic<bool> remote;  // armed from another thread: no exit observer (adoption clears it)
  Ring ring;                 // producer: the handler on `tid`; consumer: the sampler thread
  uint8_t* ring_mem;
  size_t ring_bytes;
  std::atomic<uint64_t> dropped;  // ring full
  uint64_t dropped_reported;      // sampler thread
  // The thread's CPU time up to which its samples account: set at arm,
  // advanced by each handler run (the sample weighs the difference). The
  // sampler thread reads it to find a timer whose signals stopped coming.
  std::atomic<uint64_t> sampled_cpu_ns;
  // The thread's CPU time when the sampler thread last looked (Rescuer):
  // unchanged means it has not run since, and is left alone. Sampler thread
  // only (its collections; the exit's last one on a program thread does not
  // look).
  uint64_t looked_cpu_ns;
  uint64_t looked_at_ns;   // when (CLOCK_MONOTONIC)
  uint64_t look_gap_ns;    // a thread found idle is looked at less often:
  uint64_t look_after_ns;  // not before then (doubling gaps, 20-500 ms)
  // Set while the sampler thread sends a rescue signal to `tid`: the thread
  // retiring its slot waits for it to clear (SettleRescue, Rescuer).
  std::atomic<int> rescuing;
  // Under a seccomp filter a rescue is a plain tgkill, which carries no
  // pointer: the thread it was sent to, until its handler takes it (see
  // TkillRescueSlot) or the thread settles it as it retires the slot.
  std::atomic<pid_t> rescue_tid;
};
// (Ring's zero state is "not initialised": Arm() calls Init before use.)
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<uint64_t>::is_always_lock_free);

using SigactionFn = int (*)(int, const struct sigaction*, struct sigaction*);

// The kernel's struct sigaction, for the raw rt_sigaction query.
struct KernelSigaction {
  void (*handler)(int);
  unsigned long flags;
  void (*restorer)();
  uint64_t mask;
};

struct SigState {
  SigprofOptions opts;
  uint64_t period_ns = 0;
  size_t ring_bytes = 0;      // a slot's ring as planned
  size_t min_ring_bytes = 0;  // four records: the fallback, and the least a slot keeps
  SigactionFn real_sigaction = nullptr;
  std::atomic<bool> installed{false}, stepped_aside{false}, shutdown{false};
  // The kernel's SIGPROF disposition is our Handler, as far as we know: set
  // at install, cleared when the program installs a handler of its own or
  // the sampler thread finds the disposition changed past our hooks. While
  // it is set, the program's sigaction(SIGPROF) goes through our table,
  // stepped aside or not (a late signal of ours must still meet Handler).
  std::atomic<bool> handler_ours{false};
  // The application's own disposition for SIGPROF while ours is installed:
  // SIG_DFL or SIG_IGN (a real handler makes us step aside).
  struct sigaction app_action;
  pid_t pid = 0;
  std::atomic<int> hwm{0};
  std::atomic<uint64_t> armed{0}, arm_failed{0}, stepped_aside_count{0}, samples{0}, rescued{0};
  uint64_t stepped_reported = 0;     // flush thread
  uint64_t last_liveness_check = 0;  // sampler thread
  bool stepped_logged = false;
  // Why the sampler stepped aside; logged by the sampler thread when that
  // happened inside our signal handler (formatting needs stack room).
  std::atomic<const char*> stepped_why{nullptr};
  TimerSlot* slots = nullptr;  // kMaxTimers, zero-filled (see TimerSlot)
};

SigState* g_sigprof = nullptr;

__attribute__((tls_model("initial-exec"))) __thread int t_timer_slot = 0;  // index + 1
// The slot this thread last armed or adopted (index + 1), kept after it
// retires it: where a tgkill'd rescue still in flight is looked up.
__attribute__((tls_model("initial-exec"))) __thread int t_rescue_slot = 0;
__attribute__((tls_model("initial-exec"))) __thread uint64_t t_stack_lo = 0;
__attribute__((tls_model("initial-exec"))) __thread uint64_t t_stack_hi = 0;
__attribute__((tls_model("initial-exec"))) __thread pid_t t_tid = 0;
__attribute__((tls_model("initial-exec"))) __thread bool t_rearm_after_exec = false;

pid_t Gettid() { return static_cast<pid_t>(syscall(SYS_gettid)); }

// CPU time of a thread by clock id, 0 when it cannot be read (thread gone).
uint64_t CpuClockNs(clockid_t clock) {
  timespec ts;
  if (clock_gettime(clock, &ts) != 0) return 0;
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// The CPU-time clock of another thread (glibc's pthread_getcpuclockid does
// the same: MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)).
clockid_t ThreadCpuClock(pid_t tid) {
  return static_cast<clockid_t>((~static_cast<unsigned>(tid) << 3) | 4 /*PERTHREAD*/ | 2 /*SCHED*/);
}

// The slot a timer signal names, or null if sival_ptr is not one of ours.
TimerSlot* SlotOf(const void* p) {
  if (!g_sigprof) return nullptr;
  const auto a = reinterpret_cast<uintptr_t>(p);
  const auto lo = reinterpret_cast<uintptr_t>(&g_sigprof->slots[0]);
  const auto hi = reinterpret_cast<uintptr_t>(&g_sigprof->slots[kMaxTimers]);
  if (a < lo || a >= hi || (a - lo) % sizeof(TimerSlot) != 0) return nullptr;
  return reinterpret_cast<TimerSlot*>(a);
}

// Copies `len` bytes of the interrupted thread's live stack. Under
// AddressSanitizer (the sanitizer unit-test build) the stack holds poisoned
// redzones and memcpy is checked, so copy word by word, uninstrumented.
#if defined(__SANITIZE_ADDRESS__)
__attribute__((no_sanitize("address"))) void CopyLiveStack(uint8_t* out, uint64_t addr, size_t len) {
  const volatile uint8_t* src = reinterpret_cast<const volatile uint8_t*>(addr);
  for (size_t i = 0; i < len; ++i) out[i] = src[i];
}
#else
void CopyLiveStack(uint8_t* out, uint64_t addr, size_t len) {
  std::memcpy(out, reinterpret_cast<const void*>(addr), len);
}
#endif

// Copies up to len bytes at addr into out without faulting; returns the bytes
// of the readable prefix. Page-sized iovecs: process_vm_readv never splits one.
size_t SafeCopyPrefix(uint64_t addr, uint8_t* out, size_t len) {
  // Under a seccomp filter process_vm_readv may kill the process (this is
  // the program's thread): probe page by page, copy what is readable.
  if (SeccompFiltered()) {
    const size_t readable = ReadablePrefix(static_cast<uintptr_t>(addr), len);
    CopyLiveStack(out, addr, readable);
    return readable;
  }
  constexpr size_t kPage = 4096;
  constexpr int kMaxIov = 20;
  iovec remote[kMaxIov];
  int n = 0;
  uint64_t a = addr;
  size_t left = len;
  while (left > 0 && n < kMaxIov) {
    const size_t chunk = std::min<size_t>(left, kPage - (a & (kPage - 1)));
    remote[n].iov_base = reinterpret_cast<void*>(a);
    remote[n].iov_len = chunk;
    ++n;
    a += chunk;
    left -= chunk;
  }
  iovec local{out, len - left};
  const long got = syscall(SYS_process_vm_readv, static_cast<long>(g_sigprof->pid), &local, 1ul, remote,
                           static_cast<unsigned long>(n), 0ul);
  return got > 0 ? static_cast<size_t>(got) : 0;
}

// The sample weighs the thread CPU time since the previous one, not the
// timer's period times its overruns: on a CPU-starved machine the kernel
// loses thread CPU timer signals outright (6.18 beside two busy loops: 47-70
// of 120 periods arrived; no overrun counted the rest, and a timer could
// stay silent for the rest of its thread's life). Read here, the clock
// counts every nanosecond once, whichever signal (the timer's, or the
// sampler thread's rescue) comes to collect it. A dropped sample advances it
// too: its time is lost and counted as a drop, never added to the next.
void TakeSample(TimerSlot* slot, const ucontext_t* uc) {
  const uint64_t now = MonotonicNs();
  const uint64_t cpu = CpuClockNs(CLOCK_THREAD_CPUTIME_ID);
  const uint64_t before = slot->sampled_cpu_ns.load(std::memory_order_relaxed);
  const uint64_t weight = cpu > before ? cpu - before : 0;
  if (cpu > before) slot->sampled_cpu_ns.store(cpu, std::memory_order_relaxed);
  stacks::RegisterSet regs;
  stacks::RegisterSetFromUcontext(uc, &regs);
  const uint64_t sp = regs.sp();
  size_t want = g_sigprof->opts.stack_bytes;
  // A record may take at most half the ring (Ring::Reserve).
  const size_t cap = slot->ring.capacity() / 2 - sizeof(RecordHeader) - sizeof(CpuSampleRecord) - 8;
  if (want > cap) want = cap;
  // Bounds are known only on a thread that armed itself (t_timer_slot).
  const bool own = t_timer_slot && &g_sigprof->slots[t_timer_slot - 1] == slot;
  const bool bounded = own && t_stack_hi && sp >= t_stack_lo && sp < t_stack_hi;
  if (bounded && t_stack_hi - sp < want) want = static_cast<size_t>(t_stack_hi - sp);
  void* mem = slot->ring.Reserve(1, static_cast<uint32_t>(sizeof(CpuSampleRecord) + want));
  if (!mem) {
    slot->dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  auto* r = static_cast<CpuSampleRecord*>(mem);
  r->time_ns = now;
  r->period_ns = weight;
  r->stack_addr = sp;
  r->regs = regs;
  r->tid = slot->tid;
  // Inside the stack mapping learned at arm time a plain copy cannot fault;
  // elsewhere (alternate signal stacks, coroutines, threads armed from
  // outside) the kernel copies what is readable.
  size_t copied = want;
  if (bounded) CopyLiveStack(r->stack, sp, want);
  else copied = SafeCopyPrefix(sp, r->stack, want);
  r->stack_len = static_cast<uint32_t>(copied);
  slot->ring.Commit();
  if (slot->ring.TakeNudge()) NudgeSamplerThread();  // a quarter full: drain before it overflows
  g_sigprof->samples.fetch_add(1, std::memory_order_relaxed);
}

void StepAside(const char* why, bool in_handler, bool program_call = false);

// Whether a SIGPROF is one of our timers' (queued before they were deleted).
bool IsOurs(const siginfo_t* si) { return si && si->si_code == SI_TIMER && SlotOf(si->si_value.sival_ptr); }

// A SIGPROF that is not ours on a thread where the program blocks SIGPROF
// (we kept it unblocked for sampling). Without us it would have stayed
// pending for the program's sigwait, sigtimedwait or signalfd: the program
// uses SIGPROF itself. Step aside for good, block SIGPROF in the mask this
// handler returns to, and queue the signal again, with its siginfo. Queued
// process-wide (unless it was sent to this thread), it reaches a thread
// that is waiting for it or blocks it, or comes back here on another thread
// that only we kept unblocked, which does the same, until every thread the
// program meant to block does. Our own signals still pending on this thread
// are consumed, so the program never collects one.
void GiveBackBlocked(int sig, siginfo_t* si, ucontext_t* uc) {
  StepAside("the program collects SIGPROF with sigwait or signalfd", true);
  if (uc) sigaddset(&uc->uc_sigmask, sig);
  uint64_t prof = uint64_t{1} << (sig - 1);  // the kernel's sigset for rt_sigtimedwait
  const timespec zero{0, 0};
  siginfo_t pending;
  siginfo_t foreign[2];
  int kept = 0;
  while (syscall(SYS_rt_sigtimedwait, &prof, &pending, &zero, sizeof(prof)) == sig)
    if (!IsOurs(&pending) && kept < 2) foreign[kept++] = pending;
  const long pid = static_cast<long>(g_sigprof->pid), tid = static_cast<long>(t_tid ? t_tid : Gettid());
  auto requeue = [&](siginfo_t* info) {
    if (info->si_code == SI_TKILL) syscall(SYS_rt_tgsigqueueinfo, pid, tid, static_cast<long>(sig), info);
    else syscall(SYS_rt_sigqueueinfo, pid, static_cast<long>(sig), info);
  };
  if (si) requeue(si);
  for (int i = 0; i < kept; ++i) requeue(&foreign[i]);
}

// A SIGPROF that is not from our timers, while the app's disposition is
// SIG_DFL or SIG_IGN: do what the kernel would have done.
void ForwardForeign(int sig, siginfo_t* si, ucontext_t* uc) {
  if (AppBlocksSigprof()) {
    GiveBackBlocked(sig, si, uc);
    return;
  }
  const struct sigaction& app = g_sigprof->app_action;
  if (app.sa_handler == SIG_IGN) return;
  // SIG_DFL terminates: restore it and re-raise; the signal is blocked while
  // we run, so it is delivered (and kills) when the handler returns.
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  g_sigprof->real_sigaction(sig, &dfl, nullptr);
  syscall(SYS_tgkill, static_cast<long>(syscall(SYS_getpid)), static_cast<long>(Gettid()), sig);
}

// A tgkill'd SIGPROF from our own process that is the rescue sent to this
// thread (Rescuer::SendOne under a seccomp filter): its slot, the mark
// taken. Null for the program's own SIGPROFs.
TimerSlot* TkillRescueSlot(const siginfo_t* si) {
  if (!si || si->si_code != SI_TKILL || si->si_pid != g_sigprof->pid || !t_rescue_slot) return nullptr;
  TimerSlot* s = &g_sigprof->slots[t_rescue_slot - 1];
  pid_t me = t_tid ? t_tid : Gettid();
  return s->rescue_tid.compare_exchange_strong(me, 0, std::memory_order_acq_rel) ? s : nullptr;
}

void Handler(int sig, siginfo_t* si, void* ucv) {
  const int saved_errno = errno;
  TimerSlot* slot = si && si->si_code == SI_TIMER ? SlotOf(si->si_value.sival_ptr) : TkillRescueSlot(si);
  if (slot) {
    // A signal queued before its timer was deleted may still arrive: only an
    // armed slot of this very thread is written.
    const pid_t me = t_tid ? t_tid : Gettid();
    if (slot->state.load(std::memory_order_acquire) == kArmed && slot->tid == me && !CrashFrozen() &&
        !g_sigprof->shutdown.load(std::memory_order_relaxed) &&
        !g_sigprof->stepped_aside.load(std::memory_order_relaxed))
      TakeSample(slot, static_cast<const ucontext_t*>(ucv));
  } else {
    ForwardForeign(sig, si, static_cast<ucontext_t*>(ucv));
  }
  errno = saved_errno;
}

// `own`: called by the slot's thread (SettleRescue runs).
void RetireSlot(int idx, pid_t tid, bool own = false);

// A free slot, claimed for this thread (slot_claim.h); -1 when all are taken.
int ClaimSlot() { return ClaimSlotIn(g_sigprof->slots, g_sigprof->hwm, kMaxTimers, kFree, kArming); }

// The kernel's current SIGPROF handler is ours: a raw query (libc's
// sigaction is interposed by us, and the program may have gone around it).
bool KernelHandlerIsOurs() {
  KernelSigaction cur;
  std::memset(&cur, 0, sizeof(cur));
  // RawSyscall6: syscall() itself is interposed, and would answer what the
  // program set, not what the kernel has.
  if (RawSyscall6(SYS_rt_sigaction, SIGPROF, 0, reinterpret_cast<long>(&cur), sizeof(cur.mask), 0, 0) != 0)
    return true;  // cannot tell
  return reinterpret_cast<void*>(cur.handler) == reinterpret_cast<void*>(Handler);
}

// SIGPROF's disposition changed past every hook (an inline rt_sigaction):
// our timers must stop before one of them meets the program's disposition.
// Async-signal-safe.
void NoticeTakeover() {
  if (!g_sigprof->handler_ours.load(std::memory_order_acquire) || KernelHandlerIsOurs()) return;
  g_sigprof->handler_ours.store(false, std::memory_order_release);
  StepAside("SIGPROF's disposition was changed past our hooks", false);
}

bool Stopped() {
  return g_sigprof->stepped_aside.load(std::memory_order_seq_cst) ||
         g_sigprof->shutdown.load(std::memory_order_seq_cst);
}

int Arm(pid_t tid, bool self) {
  if (!g_sigprof || !g_sigprof->installed.load(std::memory_order_acquire) || Stopped()) return -1;
  NoticeTakeover();
  if (Stopped()) return -1;
  const int idx = ClaimSlot();
  if (idx < 0) {
    g_sigprof->arm_failed.fetch_add(1, std::memory_order_relaxed);
    return -1;
  }
  TimerSlot& s = g_sigprof->slots[idx];
  s.tid = tid;
  s.remote.store(!self, std::memory_order_relaxed);
  s.rescue_tid.store(0, std::memory_order_relaxed);
  if (self) t_rescue_slot = idx + 1;  // before kArmed: no rescue can come earlier
  s.dropped.store(0, std::memory_order_relaxed);
  s.dropped_reported = 0;
  const clockid_t clock = self ? CLOCK_THREAD_CPUTIME_ID : ThreadCpuClock(tid);
  s.sampled_cpu_ns.store(CpuClockNs(clock), std::memory_order_relaxed);
  if (s.ring_bytes < g_sigprof->min_ring_bytes) {  // a recycled slot keeps its ring
    if (s.ring_mem) munmap(s.ring_mem, s.ring_bytes);
    s.ring_mem = nullptr;
    s.ring_bytes = 0;
    // Address space only until written (MAP_NORESERVE: no commit charge for
    // the part a thread never reaches). Where the process's address space
    // is tight, four records still sample the thread.
    for (size_t bytes : {g_sigprof->ring_bytes, g_sigprof->min_ring_bytes}) {
      void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (mem == MAP_FAILED) continue;
      s.ring_mem = static_cast<uint8_t*>(mem);
      s.ring_bytes = bytes;
      break;
    }
    if (!s.ring_mem) {
      s.state.store(kFree, std::memory_order_release);
      g_sigprof->arm_failed.fetch_add(1, std::memory_order_relaxed);
      return -1;
    }
  }
  s.ring.Init(s.ring_mem, s.ring_bytes);
  sigevent sev;
  std::memset(&sev, 0, sizeof(sev));
  sev.sigev_notify = SIGEV_THREAD_ID;
  sev.sigev_signo = SIGPROF;
  sev.sigev_value.sival_ptr = &s;
  sev._sigev_un._tid = tid;
  int timer_id = -1;
  // Raw syscalls: glibc's timer_create may allocate for some notify modes.
  if (syscall(SYS_timer_create, clock, &sev, &timer_id) != 0) {
    s.state.store(kFree, std::memory_order_release);
    g_sigprof->arm_failed.fetch_add(1, std::memory_order_relaxed);
    return -1;
  }
  s.timer_id = timer_id;
  // Started while the slot is still kArming (RetireAll passes over it, the
  // handler ignores its signals), then published; then stepping aside or
  // shutdown is checked again. StepAside/SigprofShutdown set their flag and
  // then scan the slots. Every access on both sides (this store of kArmed
  // and load of the flags; their store of a flag and the scan's loads of hwm
  // and the state) is seq_cst, so in their one total order either the scan
  // sees kArmed and retires it, or this sees the flag and retires it
  // (RetireSlot's exchange lets only one of them delete the timer). Checking
  // only on entry left a live timer behind a scan that had passed. Plain
  // seq_cst operations, not fences: ThreadSanitizer does not support
  // atomic_thread_fence (-Werror=tsan in make test).
  itimerspec its;
  its.it_interval.tv_sec = static_cast<time_t>(g_sigprof->period_ns / 1000000000ull);
  its.it_interval.tv_nsec = static_cast<long>(g_sigprof->period_ns % 1000000000ull);
  its.it_value = its.it_interval;
  syscall(SYS_timer_settime, timer_id, 0, &its, nullptr);
  s.state.store(kArmed, std::memory_order_seq_cst);
  if (Stopped()) {
    RetireSlot(idx, tid, self);
    return -1;
  }
  g_sigprof->armed.fetch_add(1, std::memory_order_relaxed);
  return idx;
}

// On the slot's own thread, the slot no longer armed (so no rescue starts):
// lets a rescue being sent land, and takes a tgkill'd one still pending, so
// that none is left for after t_rescue_slot moves on or the slot is reused
// (one taken for the program's would meet its SIG_DFL). Async-signal-safe.
void SettleRescue(TimerSlot& s) {
  // The sender holds the flag for one system call; 1 s bounds the wait
  // should it be stopped in between.
  for (int i = 0; i < 10000 && s.rescuing.load(std::memory_order_seq_cst); ++i) SleepNs(100000);
  const pid_t me = t_tid ? t_tid : Gettid();
  if (s.rescue_tid.load(std::memory_order_acquire) != me) return;
  sigset_t prof, old;
  sigemptyset(&prof);
  sigaddset(&prof, SIGPROF);
  RealPthreadSigmask(SIG_BLOCK, &prof, &old);
  pid_t expected = me;
  if (s.rescue_tid.compare_exchange_strong(expected, 0, std::memory_order_acq_rel)) {
    const timespec zero{0, 0};
    siginfo_t info;
    while (sigtimedwait(&prof, &info, &zero) == SIGPROF) {}
  }
  RealPthreadSigmask(SIG_SETMASK, &old, nullptr);
}

// Deletes the timer of slot idx if it still belongs to tid (tid 0 = any) and
// hands the slot to the sampler thread, which drains and frees it.
void RetireSlot(int idx, pid_t tid, bool own) {
  TimerSlot& s = g_sigprof->slots[idx];
  if (tid && s.tid != tid) return;
  // Held as kArming (no handler writes, no one else claims it) while the
  // timer goes: once kRetiring is published the sampler thread may free the
  // slot and a new thread arm it, so our last write must come before that
  // (TSan saw this timer_id = -1 land on the next owner's fresh timer id).
  int expected = kArmed;
  if (!s.state.compare_exchange_strong(expected, kArming, std::memory_order_seq_cst)) return;
  if (own) SettleRescue(s);
  syscall(SYS_timer_delete, s.timer_id);
  s.timer_id = -1;
  s.state.store(kRetiring, std::memory_order_release);
}

// Callers set stepped_aside or shutdown first (see Arm).
void RetireAll() {
  const int n = std::min(g_sigprof->hwm.load(std::memory_order_seq_cst), kMaxTimers);
  for (int i = 0; i < n; ++i) RetireSlot(i, 0);
}

std::atomic<void (*)(bool)> g_step_aside_observer{nullptr};

// Once: why the sampler stepped aside (info when someone carries on sampling).
void LogStepAside() {
  const char* why = g_sigprof->stepped_why.load(std::memory_order_acquire);
  if (!why) return;
  const bool observed = g_step_aside_observer.load(std::memory_order_acquire) != nullptr;
  LogOnce(&g_sigprof->stepped_logged, observed ? LogLevel::kInfo : LogLevel::kWarn,
          "%s; CPU sampling (sigprof) stepped aside", why);
}

// Stops sampling with SIGPROF for good (once): every timer is deleted. The
// handler stays installed unless the caller replaces it: a signal of ours
// still queued must never meet SIG_DFL. Async-signal-safe; from inside our
// handler the log line is left to the sampler thread (LogStepAside).
// program_call: from the program's own sigaction call (not a handler of
// ours), where the observer may do real work.
void StepAside(const char* why, bool in_handler, bool program_call) {
  bool expected = false;
  if (!g_sigprof->stepped_aside.compare_exchange_strong(expected, true, std::memory_order_seq_cst)) return;
  RetireAll();
  g_sigprof->stepped_aside_count.fetch_add(1, std::memory_order_relaxed);
  g_sigprof->stepped_why.store(why, std::memory_order_release);
  void (*observer)(bool) = g_step_aside_observer.load(std::memory_order_acquire);
  if (!in_handler) LogStepAside();
  if (observer) observer(program_call);
}

// Returns the number of records taken.
int DrainSlot(TimerSlot& s) {
  int records = 0;
  s.ring.Drain([&](const RecordHeader& h, const void* payload) {
    ++records;
    const size_t body = h.size - sizeof(RecordHeader);
    if (body < sizeof(CpuSampleRecord)) return;
    const auto* r = static_cast<const CpuSampleRecord*>(payload);
    const size_t len = std::min<size_t>(r->stack_len, body - sizeof(CpuSampleRecord));
    uint64_t pcs[kMaxFrames];
    // Unwinding failures are not losses: the sample keeps its leaf frame.
    const int n =
        stacks::UnwindCopiedStack(stacks::UnwindRole::kSampler, r->regs, r->stack_addr, r->stack, len, pcs, kMaxFrames);
    if (n > 0) QueueCpuSample(r->time_ns, static_cast<uint32_t>(r->tid), pcs, n, r->period_ns);
  });
  return records;
}

void ReportDrops(TimerSlot& s, uint64_t now_ns) {
  const uint64_t d = s.dropped.load(std::memory_order_relaxed);
  if (d > s.dropped_reported) {
    QueueSamplerLost(now_ns, static_cast<uint32_t>(s.tid), d - s.dropped_reported);
    s.dropped_reported = d;
  }
}

// A thread that ran three periods of CPU past its last sample has a timer
// whose signal the kernel lost (TakeSample): the timer reads as expired and
// waiting for delivery, nothing is pending, and a new timer fares no better.
// A SIGPROF sent to the thread by hand is delivered; its sample weighs all
// the CPU time since the last one, and its delivery also frees the timer's
// stuck signal. The sampler thread looks at every collection: one clock read
// per thread that gave no sample since the last (less often for one found
// idle: gaps doubling up to 500 ms), and for the stalled ones a second read
// 20 us later.
//
// Sent only while the thread is on a CPU (its clock moves between the two
// reads): a signal sent to a thread that is not is delivered where it
// resumes, and the scheduler preempts a CPU-bound thread mostly in a system
// call that charges its runtime (a CPU clock read). Sent blindly, rescues
// put 60-75 % of fault_sigblock's burn in __vdso_clock_gettime (2 % in
// truth); sent while it runs, the signal interrupts it wherever it is, as
// the timer's would. A stalled thread found off its CPU is tried again in
// 20 ms (SamplerWakeWithin), and once it has run ten periods unsampled it is
// sent one while it waits for a CPU (runnable in its /proc stat): on a
// machine so starved that this (niced) thread rarely finds it running, a
// sample whose leaf may be the call it was preempted in, its callers
// right, beats a thread whose CPU time goes missing. Never to a thread
// asleep: a signal would cut short the call it sleeps in (EINTR, whatever
// SA_RESTART says, for nanosleep, epoll_wait and the like; sleep()
// returning early). A thread whose clock has not moved since the last look
// is not even read again soon: it has stopped running, and its unsampled
// time is a tail no signal can place any more. The stat is read only for a
// thread whose clock moved since a look at most 60 ms old (the last look
// may be a second old after an idle back-off).
//
// The signal is queued with rt_tgsigqueueinfo as the timer's own would be
// (SI_TIMER, the slot in sival_ptr), so the handler tells it from the
// program's SIGPROFs exactly as it tells the timer's, and one that arrives
// after its slot was retired is ignored like a late timer signal. Under a
// seccomp filter, where the program would not make that call and a filter
// may kill on it (seccomp_state.h), it is a tgkill (the liveness check's
// call) marked in the slot with the thread it went to (rescue_tid): the
// handler finds it through t_rescue_slot, and a thread retiring its slot
// settles one still in flight (SettleRescue), so none outlives the mark.
//
// Exec and retirement race: a rescue still pending when the thread execs
// would meet the new image's SIG_DFL and kill it. `rescuing` and the slot's
// state are both seq_cst on both sides: either this sees the slot retired
// and sends nothing, or the retiring thread (SettleRescue) sees `rescuing`
// and waits for the send; SigprofBeforeExec then consumes what is pending.
class Rescuer {
 public:
  explicit Rescuer(uint64_t now_ns) : now_ns_(now_ns) {}
  // Pass one, per armed slot: notes a thread that ran, keeps a stalled one.
  void Look(TimerSlot& s) {
    if (now_ns_ < s.look_after_ns) return;
    const pid_t tid = s.tid.load(std::memory_order_relaxed);
    const uint64_t cpu = CpuClockNs(ThreadCpuClock(tid));
    const uint64_t sampled = s.sampled_cpu_ns.load(std::memory_order_relaxed);
    const uint64_t looked = s.looked_cpu_ns;
    // A look this recent that saw the clock lower: it ran within kRecentNs.
    const bool ran_lately = now_ns_ - s.looked_at_ns <= kRecentNs;
    s.looked_cpu_ns = cpu;
    s.looked_at_ns = now_ns_;
    // Not run since the last look: whatever it ran unsampled before it
    // stopped (blocked, asleep) is not worth a wake-up here, and a signal
    // would interrupt the call it sleeps in (EINTR, a short sleep()).
    if (cpu == looked) {
      // A pool of idle threads would cost a clock read each at every
      // collection (500 threads, 10 collections a second: 5,000 system
      // calls). One that starts to burn is looked at again within 500 ms,
      // and its rescue then carries all its unsampled time.
      s.look_gap_ns = std::clamp(2 * s.look_gap_ns, kMinIdleGapNs, kMaxIdleGapNs);
      s.look_after_ns = now_ns_ + s.look_gap_ns;
      return;
    }
    s.look_gap_ns = 0;
    if (cpu < sampled + g_sigprof->period_ns) return;
    SamplerWakeWithin(kActiveWaitMs);  // a thread is running: no idle back-off
    if (cpu < sampled + 3 * g_sigprof->period_ns) return;
    const bool overdue = ran_lately && cpu - sampled >= 10 * g_sigprof->period_ns;
    if (n_ < kMaxStalled) stalled_[n_++] = {&s, tid, cpu, overdue};
    else SamplerWakeWithin(kRetryMs);
  }

  // Pass two: signals the stalled threads that are on a CPU now.
  void Send() {
    if (n_ == 0) return;
    const uint64_t until = MonotonicNs() + 20000;
    while (MonotonicNs() < until) {}
    for (int i = 0; i < n_; ++i) {
      const Stalled& st = stalled_[i];
      if (CpuClockNs(ThreadCpuClock(st.tid)) != st.cpu || (st.overdue && RunnableNow(st.tid)))
        SendOne(*st.slot, st.tid);
      else SamplerWakeWithin(kRetryMs);
    }
  }

 private:
  static constexpr int kMaxStalled = 64;
  static constexpr int kActiveWaitMs = 100;
  static constexpr int kRetryMs = 20;
  static constexpr uint64_t kRecentNs = 3 * kRetryMs * 1000000ull;
  static constexpr uint64_t kMinIdleGapNs = kRetryMs * 1000000ull;
  static constexpr uint64_t kMaxIdleGapNs = 500 * 1000000ull;
  struct Stalled {
    TimerSlot* slot;
    pid_t tid;
    uint64_t cpu;
    bool overdue;  // ten periods unsampled and ran lately: sent if runnable, on a CPU or not
  };
  uint64_t now_ns_;

  // Whether the thread is running or waiting for a CPU ('R' in its stat),
  // not asleep in a call a signal would cut short. Its clock says only that
  // it ran lately: one that burnt and then went to sleep() looks the same
  // for up to a retry. A transient descriptor for the read (fd_guard.h),
  // only for overdue threads on a starved machine; unreadable counts as
  // asleep.
  static bool RunnableNow(pid_t tid) {
    char path[48], buf[512];
    snprintf(path, sizeof(path), "/proc/self/task/%d/stat", static_cast<int>(tid));
    const char* state = ReadStatFields(path, buf, sizeof(buf));
    return state && *state == 'R';
  }

  static void SendOne(TimerSlot& s, pid_t tid) {
    s.rescuing.store(1, std::memory_order_seq_cst);
    if (s.state.load(std::memory_order_seq_cst) == kArmed && s.tid.load(std::memory_order_relaxed) == tid &&
        !Stopped() && !CrashFrozen()) {
      if (SeccompFiltered() ? SendTkill(s, tid) : SendQueued(s, tid))
        g_sigprof->rescued.fetch_add(1, std::memory_order_relaxed);
    }
    s.rescuing.store(0, std::memory_order_seq_cst);
  }

  // As the timer's own signal: SI_TIMER, the slot in sival_ptr.
  static bool SendQueued(TimerSlot& s, pid_t tid) {
    siginfo_t si;
    std::memset(&si, 0, sizeof(si));
    si.si_signo = SIGPROF;
    si.si_code = SI_TIMER;
    si.si_value.sival_ptr = &s;
    return syscall(SYS_rt_tgsigqueueinfo, static_cast<long>(g_sigprof->pid), static_cast<long>(tid),
                   static_cast<long>(SIGPROF), &si) == 0;
  }

  // Under a seccomp filter: marked in the slot (TkillRescueSlot), one at a
  // time per slot.
  static bool SendTkill(TimerSlot& s, pid_t tid) {
    pid_t none = 0;
    if (!s.rescue_tid.compare_exchange_strong(none, tid, std::memory_order_acq_rel)) return false;  // in flight
    if (syscall(SYS_tgkill, static_cast<long>(g_sigprof->pid), static_cast<long>(tid), static_cast<long>(SIGPROF)) == 0)
      return true;
    pid_t mine = tid;
    s.rescue_tid.compare_exchange_strong(mine, 0, std::memory_order_acq_rel);
    return false;
  }

  Stalled stalled_[kMaxStalled];
  int n_ = 0;
};

void SigprofFlushSource(FlushContext&) {
  if (!g_sigprof) return;
  const uint64_t stepped = g_sigprof->stepped_aside_count.load(std::memory_order_relaxed);
  if (stepped > g_sigprof->stepped_reported) {
    AddFooterDrop("sampler.sigprof_stepped_aside", stepped - g_sigprof->stepped_reported);
    g_sigprof->stepped_reported = stepped;
  }
}

}  // namespace

bool SigprofInstall(const SigprofOptions& opts, const char** why) {
  if (g_sigprof && g_sigprof->installed.load()) return true;
  if (!g_sigprof) {
    void* mem = mmap(nullptr, sizeof(SigState), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) {
      *why = "cannot allocate the timer table";
      return false;
    }
    void* slots =
        mmap(nullptr, kMaxTimers * sizeof(TimerSlot), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (slots == MAP_FAILED) {
      munmap(mem, sizeof(SigState));
      *why = "cannot allocate the timer table";
      return false;
    }
    g_sigprof = new (mem) SigState();
    g_sigprof->slots = static_cast<TimerSlot*>(slots);
  }
  g_sigprof->opts = opts;
  g_sigprof->period_ns = 1000000000ull / (opts.hz ? opts.hz : 1);
  // 250 ms of full-size records past the quarter-full wake-up
  // (ring_sizing.h): 1 MiB of address space at 99 Hz with 16 KiB stacks,
  // 4 MiB at 499 Hz. It was four records (128 KiB): beside busy loops, with
  // the sampler thread not yet started (FLIGHTREC_FLUSH_MS=1000), a thread
  // sampled at 499 Hz lost 86 of 225 samples before anything drained it.
  const size_t record = opts.stack_bytes + sizeof(CpuSampleRecord) + sizeof(RecordHeader) + 8;
  g_sigprof->ring_bytes = SigprofRingBytes(record, opts.hz, kRingStarvationBudgetNs, kRingMaxBytes);
  g_sigprof->min_ring_bytes = SigprofRingFloorBytes(record);
  // Where the mapping itself takes from the program's room (address_space.h),
  // 1 MiB a thread would: four records there.
  if (UnwrittenMappingsAreCharged()) g_sigprof->ring_bytes = g_sigprof->min_ring_bytes;
  g_sigprof->pid = static_cast<pid_t>(syscall(SYS_getpid));
  // libc's sigaction, not our own interposer (hook_signal.cc).
  g_sigprof->real_sigaction = reinterpret_cast<SigactionFn>(dlsym(RTLD_NEXT, "sigaction"));
  if (!g_sigprof->real_sigaction)
    g_sigprof->real_sigaction = reinterpret_cast<SigactionFn>(dlsym(RTLD_DEFAULT, "sigaction"));
  if (!g_sigprof->real_sigaction) {
    *why = "cannot resolve sigaction";
    return false;
  }
  struct sigaction cur;
  std::memset(&cur, 0, sizeof(cur));
  g_sigprof->real_sigaction(SIGPROF, nullptr, &cur);
  const bool has_handler = (cur.sa_flags & SA_SIGINFO) ? cur.sa_sigaction != nullptr
                                                       : (cur.sa_handler != SIG_DFL && cur.sa_handler != SIG_IGN);
  if (has_handler) {
    *why = "the application has its own SIGPROF handler";
    return false;
  }
  g_sigprof->app_action = cur;
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = Handler;
  // SA_RESTART: a sample interrupting a restartable call must not surface
  // as EINTR. SIGPROF stays blocked while the handler runs (no SA_NODEFER).
  // SA_ONSTACK: the kernel's signal frame (1.7 KiB here, 3.5 KiB and more
  // with AVX-512 state) goes on the alternate stack crash capture gives each
  // thread (crash_handler.h), not on the interrupted stack, which may be a
  // small thread's or a coroutine's with no room for it. A thread without
  // an alternate stack (FLIGHTREC_CRASH=0) still takes it on its own.
  sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
  // Every other signal waits the few microseconds the handler runs: none of
  // the program's handlers may run nested on top of ours (on an alternate
  // stack the program set, say, where without us none of its own handlers
  // might ever run). Faults stay deliverable: a blocked one kills outright,
  // past crash capture.
  sigfillset(&sa.sa_mask);
  for (int fault : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGSYS}) sigdelset(&sa.sa_mask, fault);
  if (g_sigprof->real_sigaction(SIGPROF, &sa, nullptr) != 0) {
    *why = "sigaction(SIGPROF) failed";
    return false;
  }
  g_sigprof->handler_ours.store(true, std::memory_order_release);
  g_sigprof->installed.store(true, std::memory_order_release);
  return true;
}

bool SigprofInstalled() {
  return g_sigprof && g_sigprof->installed.load(std::memory_order_acquire) &&
         !g_sigprof->stepped_aside.load(std::memory_order_acquire);
}

// The main thread's stack, without reading /proc/self/maps (~0.1 ms of
// every process's start on this VM; issue #39): exec put the program's file
// name (AT_EXECFN) last below the top of the stack, followed by one null
// pointer, so the top is where that string ends plus 8 bytes, on a page
// boundary; and it mapped 128 KiB below the arguments (setup_arg_pages'
// stack_expand), confirmed mapped with one mincore. Everything from sp up
// to the top holds the callers' frames, the arguments and the environment:
// readable while the thread runs. False when anything does not fit (a
// program started through ld.so, whose AT_EXECFN is not there; a thread
// that is not the main one; sp deeper than that): the caller reads the maps.
bool MainThreadStackBounds(uint64_t sp, uint64_t* lo, uint64_t* hi) {
  constexpr uint64_t kPage = 4096, kExpand = 128 * 1024;
  if (syscall(SYS_gettid) != syscall(SYS_getpid)) return false;
  const auto* execfn = reinterpret_cast<const char*>(getauxval(AT_EXECFN));
  if (!execfn) return false;
  const uint64_t top = reinterpret_cast<uint64_t>(execfn) + strlen(execfn) + 1 + sizeof(void*);
  if ((top & (kPage - 1)) != 0 || sp >= top || top - sp > kExpand) return false;
  const uint64_t bottom = top - kExpand;
  unsigned char resident[kExpand / kPage];
  if (syscall(SYS_mincore, bottom, kExpand, resident) != 0) return false;  // a hole: not the stack we think
  *lo = bottom;
  *hi = top;
  return true;
}

bool SigprofArmSelf() {
  if (!g_sigprof || t_timer_slot) return t_timer_slot != 0;
  t_tid = Gettid();
  // Stack bounds for the handler's plain copy: the mapping holding our sp.
  // Bounds this thread learned before and that still hold sp are kept: a
  // forked child's thread is its parent thread on a copy of the same stack
  // (and an exec that failed leaves it where it was). Reading
  // /proc/self/maps for them again cost a shell ~200 us on every fork whose
  // child execs at once (issue #39).
  const uint64_t sp = reinterpret_cast<uint64_t>(__builtin_frame_address(0));
  uint64_t lo = 0, hi = 0;
  if (!(t_stack_hi && sp >= t_stack_lo && sp < t_stack_hi) &&
      ((!SeccompFiltered() && MainThreadStackBounds(sp, &lo, &hi)) || FindSelfMappingNoAlloc(sp, &lo, &hi))) {
    t_stack_lo = lo;
    t_stack_hi = hi;
  }
  const int idx = Arm(t_tid, true);
  if (idx < 0) return false;
  t_timer_slot = idx + 1;
  return true;
}

bool SigprofArmThread(pid_t tid) { return Arm(tid, false) >= 0; }

bool SigprofSelfArmed() { return t_timer_slot != 0; }

bool SigprofAdoptThread(pid_t tid) {
  if (!g_sigprof) return false;
  if (t_timer_slot) return true;
  const int n = std::min(g_sigprof->hwm.load(std::memory_order_acquire), kMaxTimers);
  for (int i = 0; i < n; ++i) {
    TimerSlot& s = g_sigprof->slots[i];
    if (s.state.load(std::memory_order_acquire) == kArmed && s.tid == tid) {
      t_tid = tid;
      uint64_t lo = 0, hi = 0;
      if (FindSelfMappingNoAlloc(reinterpret_cast<uint64_t>(__builtin_frame_address(0)), &lo, &hi)) {
        t_stack_lo = lo;
        t_stack_hi = hi;
      }
      t_timer_slot = i + 1;
      t_rescue_slot = i + 1;                             // before remote goes: a tgkill'd rescue needs it
      s.remote.store(false, std::memory_order_release);  // the exit observer will retire it now
      return true;
    }
  }
  return false;
}

// Crash freeze (preload/crash/crash_freeze.h): a crash report may be testing
// memory in place, our globals included, so no SIGPROF handler may run:
// every armed timer is stopped, then restarted. A slot armed or retired
// meanwhile is left to its owner.
static void SetAllTimers(bool running) {
  if (!g_sigprof) return;
  itimerspec its{};
  if (running) {
    its.it_interval.tv_sec = static_cast<time_t>(g_sigprof->period_ns / 1000000000ull);
    its.it_interval.tv_nsec = static_cast<long>(g_sigprof->period_ns % 1000000000ull);
    its.it_value = its.it_interval;
  }
  const int n = std::min(g_sigprof->hwm.load(std::memory_order_acquire), kMaxTimers);
  for (int i = 0; i < n; ++i) {
    TimerSlot& s = g_sigprof->slots[i];
    if (s.state.load(std::memory_order_acquire) == kArmed) syscall(SYS_timer_settime, s.timer_id, 0, &its, nullptr);
  }
}

void SigprofPauseTimers() { SetAllTimers(false); }
void SigprofResumeTimers() { SetAllTimers(true); }

void SigprofDisarmSelf() {
  if (!g_sigprof || !t_timer_slot) return;
  RetireSlot(t_timer_slot - 1, t_tid, true);
  t_timer_slot = 0;
}

void SigprofCollect(uint64_t now_ns, bool rescue) {
  if (!g_sigprof) return;
  // Every collection (each wake-up of the sampler thread): one system call.
  if (g_sigprof->installed.load(std::memory_order_acquire)) NoticeTakeover();
  LogStepAside();
  const bool check = now_ns - g_sigprof->last_liveness_check >= kLivenessCheckNs;
  if (check) g_sigprof->last_liveness_check = now_ns;
  const bool seccomp = SeccompFiltered();
  Rescuer rescuer(now_ns);
  const int n = std::min(g_sigprof->hwm.load(std::memory_order_acquire), kMaxTimers);
  for (int i = 0; i < n; ++i) {
    TimerSlot& s = g_sigprof->slots[i];
    int st = s.state.load(std::memory_order_acquire);
    if (st != kArmed && st != kRetiring) continue;
    const int drained = DrainSlot(s);
    ReportDrops(s, now_ns);
    // A slot that gave samples since the last collection has a live timer.
    // Under a filter only threads that armed or adopted their slot (their
    // handler finds it: t_rescue_slot).
    if (rescue && drained == 0 && st == kArmed && !(seccomp && s.remote.load(std::memory_order_acquire)))
      rescuer.Look(s);
    // Threads armed from outside have no exit observer: retire them once the
    // kernel no longer knows the tid.
    if (st == kArmed && check && s.remote.load(std::memory_order_relaxed) &&
        syscall(SYS_tgkill, static_cast<long>(g_sigprof->pid), static_cast<long>(s.tid), 0) != 0 && errno == ESRCH) {
      RetireSlot(i, s.tid);
      st = s.state.load(std::memory_order_acquire);
    }
    if (st == kRetiring) {
      // The owner retired it, so its handler no longer writes: drain what it
      // left and keep the ring memory for the slot's next thread.
      DrainSlot(s);
      s.state.store(kFree, std::memory_order_release);
    }
  }
  rescuer.Send();
}

void RegisterSigprofFlushSource() { RegisterFlushSource(SigprofFlushSource); }

void SigprofShutdown() {
  if (!g_sigprof || !g_sigprof->installed.load(std::memory_order_acquire)) return;
  g_sigprof->shutdown.store(true, std::memory_order_seq_cst);
  // The handler stays installed: a signal already queued must not meet
  // SIG_DFL (which would kill the process on its way out).
  RetireAll();
}

void SigprofAtForkChild() {
  // POSIX timers are not inherited; forget the parent's. Rings are private
  // copies of the parent's memory: keep them for reuse, emptied.
  t_timer_slot = 0;
  t_rescue_slot = 0;
  t_rearm_after_exec = false;
  if (!g_sigprof) return;
  // Slots at and above the high-water mark were never claimed: still zero.
  const int n = std::min(g_sigprof->hwm.load(std::memory_order_relaxed), kMaxTimers);
  for (int i = 0; i < n; ++i) {
    TimerSlot& s = g_sigprof->slots[i];
    s.state.store(kFree, std::memory_order_relaxed);
    s.timer_id = -1;
    s.dropped.store(0, std::memory_order_relaxed);
    s.dropped_reported = 0;
    // The parent's sampler thread may have been mid-rescue: no sender here,
    // so nothing may stay marked (a retiring thread would wait on it).
    s.rescuing.store(0, std::memory_order_relaxed);
    s.rescue_tid.store(0, std::memory_order_relaxed);
  }
  g_sigprof->hwm.store(0, std::memory_order_relaxed);
  g_sigprof->pid = static_cast<pid_t>(syscall(SYS_getpid));
}

void SigprofBeforeExec() {
  if (!SigprofInstalled() || !t_timer_slot) return;
  // In a vfork child we share the parent's memory and TLS: touch nothing.
  if (static_cast<pid_t>(syscall(SYS_getpid)) != g_sigprof->pid) return;
  // Retired on its own thread: a rescue being sent has landed when this
  // returns (SettleRescue), so the consumption below takes it too.
  RetireSlot(t_timer_slot - 1, t_tid, true);
  t_timer_slot = 0;
  t_rearm_after_exec = true;
  // A SIGPROF of ours already queued for this thread would survive exec and
  // kill the new image (its SIGPROF is SIG_DFL): consume it, mask restored.
  sigset_t prof, old;
  sigemptyset(&prof);
  sigaddset(&prof, SIGPROF);
  RealPthreadSigmask(SIG_BLOCK, &prof, &old);
  const timespec zero{0, 0};
  siginfo_t info;
  while (sigtimedwait(&prof, &info, &zero) == SIGPROF) {}
  RealPthreadSigmask(SIG_SETMASK, &old, nullptr);
}

void SigprofAfterExecFailed() {
  if (!t_rearm_after_exec) return;
  t_rearm_after_exec = false;
  if (g_sigprof && static_cast<pid_t>(syscall(SYS_getpid)) == g_sigprof->pid) SigprofArmSelf();
}

void SetSigprofStepAsideObserver(void (*observer)(bool program_call)) {
  g_step_aside_observer.store(observer, std::memory_order_release);
}

bool SigprofInterceptSigaction(const struct sigaction* act, struct sigaction* old, int* ret) {
  if (!g_sigprof || !g_sigprof->installed.load(std::memory_order_acquire) ||
      !g_sigprof->handler_ours.load(std::memory_order_acquire))
    return false;
  const struct sigaction prev = g_sigprof->app_action;
  if (!act) {
    if (old) *old = prev;
    *ret = 0;
    return true;
  }
  const bool real_handler = (act->sa_flags & SA_SIGINFO) ? act->sa_sigaction != nullptr
                                                         : (act->sa_handler != SIG_DFL && act->sa_handler != SIG_IGN);
  if (!real_handler) {
    // Ignore or default: remembered and honoured for foreign SIGPROFs; ours
    // keep sampling.
    g_sigprof->app_action = *act;
    if (old) *old = prev;
    *ret = 0;
    return true;
  }
  // The application wants SIGPROF for itself: stop our timers first so it
  // does not receive our samples, then let libc install its handler.
  StepAside("the application installed its own SIGPROF handler", false, /*program_call=*/true);
  g_sigprof->handler_ours.store(false, std::memory_order_release);
  const int r = g_sigprof->real_sigaction(SIGPROF, act, nullptr);
  if (r == 0 && old) *old = prev;
  *ret = r;
  return true;
}

SigprofStats GetSigprofStats() {
  SigprofStats s;
  if (!g_sigprof) return s;
  s.armed = g_sigprof->armed.load(std::memory_order_relaxed);
  s.arm_failed = g_sigprof->arm_failed.load(std::memory_order_relaxed);
  s.stepped_aside = g_sigprof->stepped_aside_count.load(std::memory_order_relaxed);
  s.samples = g_sigprof->samples.load(std::memory_order_relaxed);
  s.rescued = g_sigprof->rescued.load(std::memory_order_relaxed);
  uint64_t d = 0;
  const int n = std::min(g_sigprof->hwm.load(std::memory_order_acquire), kMaxTimers);
  for (int i = 0; i < n; ++i) d += g_sigprof->slots[i].dropped.load(std::memory_order_relaxed);
  s.dropped = d;
  return s;
}

// ---- the engine (sampler_engine.h) -----------------------------------------

namespace {

// What the process was started with, for the line naming the mode.
EngineOptions g_engine_opts;

bool EngineStart(const EngineOptions& eo, const char** why) {
  SigprofOptions so;
  so.hz = eo.hz;
  so.stack_bytes = eo.stack_bytes;
  if (!SigprofInstall(so, why)) return false;
  g_engine_opts = eo;
  return true;
}

void EngineAnnounce() {
  Log(LogLevel::kInfo, "sampler: sigprof (%llu Hz of thread CPU time, %u-byte stacks, off-CPU: %s)",
      static_cast<unsigned long long>(g_engine_opts.hz), g_engine_opts.stack_bytes,
      g_engine_opts.offcpu ? "blocking calls" : "none");
}

bool No() { return false; }
uint64_t NoDeadline() { return UINT64_MAX; }    // a handler nudges the sampler thread itself
uint64_t NothingUnread(uint64_t) { return 0; }  // rings are drained by the exit's last collection
bool EngineArmSelf(pid_t) { return SigprofArmSelf(); }

// A stop that came during the collection (perf's drain, just before) leaves
// the rest to the stopping thread's last collection.
bool EngineDrain(uint64_t now_ns) {
  // Rescues come from the sampler thread only: an exit's last collection
  // runs on a program thread, and nothing is left to rescue there.
  const bool sampler_thread = IsSamplerThread();
  if (!(sampler_thread && SamplerStopRequested())) SigprofCollect(now_ns, sampler_thread);
  return false;
}

}  // namespace

const SamplerEngine kSigprofEngine = {
    .name = "sigprof",
    .start = EngineStart,
    .refusal_prefix = "SIGPROF sampling unavailable: ",
    .refusal_suffix = "",
    .announce = EngineAnnounce,
    .gives_offcpu = No,
    .first_drain_within_ns = NoDeadline,
    .adopt_self = SigprofAdoptThread,
    .arm_self = EngineArmSelf,
    .arm_thread = SigprofArmThread,
    .self_gives_offcpu = No,
    .disarm_self = SigprofDisarmSelf,
    .drain = EngineDrain,
    .stop = SigprofShutdown,
    .discard_unread = NothingUnread,
    .at_fork_child = SigprofAtForkChild,
    .before_exec = SigprofBeforeExec,
    .after_exec_failed = SigprofAfterExecFailed,
    .flush_thread_may_leave_program_fds = true,
};

}  // namespace flightrec::sampler
