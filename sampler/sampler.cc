// Sampler orchestration (see sampler.h): picks the engine once
// (sampler_engine.h: perf or SIGPROF timers, with auto's fallbacks), then
// arms and disarms threads, handles fork/exec/exit through the engine
// interface, and owns the symbolizer handed to the writer.
#include "sampler/sampler.h"

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <mimalloc.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <new>

#include "preload/runtime/clock.h"
#include "format/own_fds.h"
#include "preload/fds/fd_guard.h"
#include "preload/fds/own_fd_table.h"
#include "preload/flush/flush_registry.h"
#include "preload/crash/sigprof_owner.h"
#include "preload/runtime/log.h"
#include "preload/runtime/own_stack.h"
#include "preload/runtime/own_work.h"
#include "preload/threads/thread_registry.h"
#include "preload/stacks/local_stack.h"
#include "sampler/offcpu_blocking.h"
#include "sampler/sample_events.h"
#include "sampler/sampler_engine.h"
#include "sampler/sampler_thread.h"
#include "sampler/sigprof_sampler.h"
#include "sampler/symbols/debug_file_cache.h"
#include "sampler/symbols/elfutils_lazy.h"
#include "sampler/symbols/symbolizer.h"

namespace flightrec {
namespace {

// How long the flush thread's final sequence waits for the sampler thread,
// and only when it is in the middle of a collection (between collections the
// flush thread takes over at once). One collection is one pass over the
// rings, well under a millisecond of CPU, and the thread runs in the flush
// thread's scheduling class meanwhile (itself lifted to the exiting
// thread's); past this the samples it holds are given up. A quarter of the
// 2 s exit budget: beside a busy machine's other work, or under a sanitizer,
// one collection took over 50 ms of wall time (test_runtime under TSan).
constexpr uint64_t kStopBudgetNs = 250ull * 1000000ull;

using sampler::SamplerEngine;

struct SamplerState {
  // The engine sampling the process (null: off). Atomic: auto mode moves
  // from SIGPROF to perf at run time (TakeOverWithPerf) while new threads
  // read it to arm themselves.
  std::atomic<const SamplerEngine*> engine{nullptr};
  // A thread the engine refuses tries this one (perf's threads: SIGPROF):
  // adopting a slot armed for it elsewhere, and when thread_fallback,
  // starting it for the process (the first refused thread does).
  std::atomic<const SamplerEngine*> fallback{nullptr};
  bool thread_fallback = false;  // perf mode: a refused thread may start the fallback
  bool offcpu = false;           // off-CPU wanted at all
  sampler::EngineOptions opts;
  // Per-thread fallback engine: started once, by the first thread the
  // engine refuses. kFallbackDeciding -> kFallbackOk | kFallbackFailed.
  std::atomic<int> fallback_state{0};
  std::atomic<bool> shutdown{false};
};

SamplerState g_state;
std::atomic<sampler::Symbolizer*> g_symbolizer{nullptr};

pid_t Gettid() { return static_cast<pid_t>(syscall(SYS_gettid)); }

// perf mode: a thread perf cannot arm (locked-memory limits, fd limits) gets
// the fallback engine (SIGPROF timers) instead, if SIGPROF is ours to use.
constexpr int kFallbackUndecided = 0, kFallbackDeciding = 1, kFallbackOk = 2, kFallbackFailed = 3;
// Threads refused while the first one is still installing the fallback wait
// for its answer (thread start, not a hot path), but never longer than this.
constexpr uint64_t kFallbackWaitNs = 200ull * 1000000ull;

// Threads that stopped waiting leave their tid here; the deciding thread arms
// them (a remote timer, as for threads that predate init) once the fallback
// is installed. It can be slow to: dlsym takes the loader lock, which a nice
// +10 recorder thread may hold while busy host threads keep it off the CPU.
// Seen in CI as one of 16 threads never sampled.
constexpr int kFallbackPending = 64;
std::atomic<pid_t> g_fallback_pending[kFallbackPending];

// The decider, after publishing its answer: arms (or forgets) every waiter
// that gave up. seq_cst with the waiter's push-then-check: either this sees
// its tid or the waiter sees the answer and takes its tid back.
void ArmPendingFallbackThreads(const SamplerEngine& fb, bool ok) {
  for (auto& slot : g_fallback_pending) {
    const pid_t tid = slot.exchange(0);
    if (tid <= 0) continue;
    const bool armed = ok && fb.arm_thread(tid);
    Log(LogLevel::kDebug, "thread %d: SIGPROF timer %s by the installing thread", static_cast<int>(tid),
        armed ? "armed" : "NOT armed");
  }
}

// A waiter past its deadline: leaves its tid for the decider. Returns true
// when the decider will arm it (or the fallback failed); false when the answer
// came meanwhile and the caller should look at it itself.
bool LeaveForDecider(pid_t tid) {
  pid_t empty = 0;
  for (auto& slot : g_fallback_pending) {
    if (!slot.compare_exchange_strong(empty, tid)) {
      empty = 0;
      continue;
    }
    if (g_state.fallback_state.load() == kFallbackDeciding) return true;
    pid_t mine = tid;
    // Answered meanwhile: take the tid back unless the decider already has it.
    return !slot.compare_exchange_strong(mine, 0);
  }
  return true;  // no room: left unsampled, as before
}

bool FallbackForThread(const SamplerEngine& fb) {
  if (!g_state.thread_fallback) return false;
  const int saved_errno = errno;
  const pid_t tid = Gettid();
  int expected = kFallbackUndecided;
  if (g_state.fallback_state.compare_exchange_strong(expected, kFallbackDeciding)) {
    const char* why = "";
    const bool ok = fb.start(g_state.opts, &why);
    g_state.fallback_state.store(ok ? kFallbackOk : kFallbackFailed);
    ArmPendingFallbackThreads(fb, ok);
    Log(LogLevel::kWarn, "perf_event_open failed for thread %d (%s); %s", static_cast<int>(Gettid()),
        strerror(saved_errno), ok ? "such threads are sampled with SIGPROF timers" : why);
  } else {
    const uint64_t deadline = MonotonicNs() + kFallbackWaitNs;
    while (g_state.fallback_state.load() == kFallbackDeciding && MonotonicNs() < deadline) {
      SleepNs(100000);
    }
    if (g_state.fallback_state.load() == kFallbackDeciding && LeaveForDecider(tid)) {
      Log(LogLevel::kDebug,
          "thread %d: perf refused (%s); the fallback is still being installed: left for the "
          "installing thread to arm",
          static_cast<int>(tid), strerror(saved_errno));
      return false;
    }
  }
  const bool armed = g_state.fallback_state.load() == kFallbackOk && fb.arm_self(tid);
  Log(LogLevel::kDebug, "thread %d: perf refused (%s); SIGPROF timer %s", static_cast<int>(tid), strerror(saved_errno),
      armed ? "armed" : "NOT armed");
  return armed;
}

void ArmSelf(pid_t tid) {
  bool engine_offcpu = false;
  if (const SamplerEngine* e = g_state.engine.load()) {
    if (e->adopt_self(tid) || e->arm_self(tid)) {
      engine_offcpu = e->self_gives_offcpu();
    } else if (const SamplerEngine* fb = g_state.fallback.load()) {
      if (!fb->adopt_self(tid)) FallbackForThread(*fb);
    }
  }
  sampler::SetThreadOffCpuHooks(g_state.offcpu && !engine_offcpu && !g_state.shutdown.load());
}

void OnThreadStart(ThreadState* ts) {
  if (g_state.shutdown.load(std::memory_order_relaxed)) return;
  ArmSelf(ts ? ts->tid : Gettid());
}

void OnThreadExit(ThreadState*) {
  sampler::SetThreadOffCpuHooks(false);
  for (const SamplerEngine* e : sampler::kEngines) e->disarm_self();
}

// flightrec's own threads are named "flightrec-*" (recorder_thread.h).
bool IsRecorderTid(pid_t tid) {
  char path[64], comm[32] = {};
  snprintf(path, sizeof(path), "/proc/self/task/%d/comm", static_cast<int>(tid));
  const int fd = OpenTransientFd(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const ssize_t n = read(fd, comm, sizeof(comm) - 1);
  CloseTransientFd(fd);
  return n > 0 && strncmp(comm, "flightrec-", 10) == 0;
}

// Threads that exist before init (started by other libraries' constructors)
// are armed from here; they adopt their slot if they later register.
void ArmOtherThreads() {
  const SamplerEngine* e = g_state.engine.load();
  if (!e) return;
  const int fd = OpenTransientFd("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  const pid_t self = Gettid();
  alignas(8) char buf[4096];
  for (;;) {
    const long n = syscall(SYS_getdents64, fd, buf, sizeof(buf));
    if (n <= 0) break;
    for (long off = 0; off < n;) {
      auto* d = reinterpret_cast<dirent64*>(buf + off);
      off += d->d_reclen;
      if (d->d_name[0] < '0' || d->d_name[0] > '9') continue;
      const pid_t tid = static_cast<pid_t>(strtol(d->d_name, nullptr, 10));
      if (tid == self || IsRecorderTid(tid)) continue;
      e->arm_thread(tid);
    }
  }
  CloseTransientFd(fd);
}

// Starts `e` for the process and makes it the mode (logged). Threads are
// armed by the caller. Returns false (logged when log_refusal) if refused.
bool StartEngine(const SamplerEngine& e, bool log_refusal) {
  const char* why = "";
  if (!e.start(g_state.opts, &why)) {
    if (log_refusal) Log(LogLevel::kWarn, "%s%s%s; CPU sampling off", e.refusal_prefix, why, e.refusal_suffix);
    return false;
  }
  g_state.engine.store(&e, std::memory_order_release);
  // perf: the kernel fills a busy thread's ring from its first moment;
  // before going live nobody drains it (a FLIGHTREC_FLUSH_MS of a second
  // lost most of a 499 Hz second as sampler.lost).
  GoLiveWithin(e.first_drain_within_ns());
  e.announce();
  return true;
}

// Auto mode: the application installed its own SIGPROF handler, so the
// SIGPROF sampler stepped aside. Sampling carries on with perf: every live
// thread is armed from here (new ones arm themselves once the mode reads
// perf), and the blocking-call hooks stop where context switches now give
// off-CPU time, so no block is counted twice.
// Known window: a thread starting during the scan may arm itself and be
// armed by the scan too; PerfArmThread skips a tid that already has a slot,
// which narrows it to the few instructions between the two checks.
// Runs on the thread that collects (the sampler's, or the flush thread
// hosting it) while that thread is in the program's descriptor table, or
// on the program's thread that took SIGPROF (TakeOverWithPerfHere).
__thread bool t_takeover_here __attribute__((tls_model("initial-exec"))) = false;  // TakeOverWithPerfHere

void TakeOverWithPerf() {
  if (g_state.shutdown.load() || g_state.engine.load() != &sampler::kSigprofEngine) return;
  // perf descriptors are closed by number by the program's threads as they
  // exit: they must be opened in the program's table, not in one of ours.
  if (format::t_own_fd_table) {
    g_state.engine.store(nullptr, std::memory_order_release);
    Log(LogLevel::kWarn,
        "the application took SIGPROF while no thread of ours could hand sampling to perf; "
        "CPU sampling off (FLIGHTREC_SAMPLER=perf samples such programs)");
    return;
  }
  // Threads perf refuses still adopt a SIGPROF slot armed for them, as at
  // init in perf mode; the fallback is not started again (thread_fallback).
  g_state.fallback.store(&sampler::kSigprofEngine);
  if (!StartEngine(sampler::kPerfEngine, /*log_refusal=*/false)) {
    Log(LogLevel::kWarn, "the application took SIGPROF and perf_event_open is refused; CPU sampling off");
    g_state.engine.store(nullptr, std::memory_order_release);
    return;
  }
  if (g_state.offcpu && sampler::kPerfEngine.gives_offcpu())
    g_block_notes_retired.store(true, std::memory_order_relaxed);
  ArmOtherThreads();
  // On the program's thread that took SIGPROF, the scan skipped it.
  if (t_takeover_here) ArmSelf(Gettid());
  Log(LogLevel::kInfo, "the application took SIGPROF; CPU sampling continues with perf");
}

// The program's thread that installed its SIGPROF handler, inside its
// sigaction call, when the collecting thread is the flush thread working in
// a descriptor table of its own (own_fd_table.h): only this thread can open
// perf descriptors where the program's threads will close them. System
// calls only (perf_event_open, mmap, the /proc/self/task scan), once in the
// process's life, on a stack of ours (a program thread's may be 16 KiB).
void TakeOverWithPerfHere() {
  OwnWorkOnAppThread ours;
  t_takeover_here = true;
  RunOnOwnStack(TakeOverWithPerf);
  t_takeover_here = false;
}

// The SIGPROF sampler stepped aside (sigprof_sampler.h).
void OnSigprofStepAside(bool program_call) {
  if (program_call && sampler::SamplerHosted() && FlushThreadHasOwnFdTable()) {
    TakeOverWithPerfHere();
    return;
  }
  sampler::RunOnSamplerThread(TakeOverWithPerf);
}

}  // namespace

void SamplerInit(const Config& cfg) {
  SamplerState& s = g_state;
  s.engine = nullptr;
  // At exit, on the flush thread before its final drain: the last collection.
  RegisterFinalHook(SamplerShutdown);
  // Names for every kind of stack (allocation samples too, sampler off or
  // not): libdw is loaded when the recorder goes live (elfutils_lazy.h).
  RegisterLiveHook(sampler::LoadElfutils);
  sampler::debugcache::Configure(cfg.debug_cache, cfg.debug_cache_max_bytes);
  if (cfg.sampler == SamplerMode::kOff) {
    Log(LogLevel::kInfo, "sampler: off (FLIGHTREC_SAMPLER=off)");
    return;
  }
  s.offcpu = cfg.offcpu;
  sampler::g_offcpu_min_ns = cfg.offcpu_min_us * 1000;
  s.opts.hz = cfg.cpu_hz ? cfg.cpu_hz : 99;
  s.opts.stack_bytes = static_cast<uint32_t>(cfg.stack_copy_bytes & ~uint64_t{7});
  s.opts.offcpu = cfg.offcpu;
  s.opts.offcpu_min_ns = sampler::g_offcpu_min_ns;
  stacks::InitLocalStackCapture();
  sampler::RegisterSampleEvents();
  // The runtime reaches SIGPROF and the sampler thread only through these.
  static const SigprofOwner kSigprofOwner{sampler::SigprofInstalled, sampler::SigprofInterceptSigaction,
                                          sampler::SigprofPauseTimers, sampler::SigprofResumeTimers};
  RegisterSigprofOwner(&kSigprofOwner);
  AddCrashFreezeWaker(sampler::NudgeSamplerThread);

  // auto: SIGPROF timers first. perf's per-thread events cost the thread
  // microseconds of kernel work at every context switch (its cpu-clock timer
  // is stopped and restarted, and the switch records are written), which a
  // server that blocks often pays all the time: bench/micro/switch_cost_bench,
  // about +4 us per switch with perf against +0.3 us with SIGPROF timers,
  // and redis-server's CPU per request 1.13x against 1.00x (run_macro.py).
  // perf stays one setting away (FLIGHTREC_SAMPLER=perf) for complete
  // off-CPU, and is auto's fallback where SIGPROF is not ours to use.
  // Under ThreadSanitizer (the program was built with it) a SIGPROF handler
  // installed behind TSan's sigaction interceptor runs at moments TSan does
  // not expect and can crash it inside its own bookkeeping: auto uses perf.
  const bool tsan_host = dlsym(RTLD_DEFAULT, "__tsan_init") != nullptr;
  const bool sigprof_first = (cfg.sampler == SamplerMode::kAuto && !tsan_host) || cfg.sampler == SamplerMode::kSigprof;
  if (sigprof_first) {
    const SamplerEngine& e = sampler::kSigprofEngine;
    const bool only = cfg.sampler == SamplerMode::kSigprof;
    const char* why = "";
    if (e.start(s.opts, &why)) {
      s.engine = &e;
      s.fallback_state.store(kFallbackOk);
      e.announce();
    } else {
      Log(only ? LogLevel::kWarn : LogLevel::kInfo, "%s%s%s; %s", e.refusal_prefix, why, e.refusal_suffix,
          only ? "CPU sampling off" : "trying perf");
      if (only) return;
    }
  }
  if (!s.engine.load()) {
    if (!StartEngine(sampler::kPerfEngine, /*log_refusal=*/true)) return;
    // perf refuses some threads (locked memory, descriptors): SIGPROF timers.
    s.fallback = &sampler::kSigprofEngine;
    s.thread_fallback = true;
  }
  // In auto mode, an application that later takes SIGPROF for itself hands
  // sampling over to perf (TakeOverWithPerf).
  if (s.engine.load() == &sampler::kSigprofEngine && cfg.sampler == SamplerMode::kAuto)
    sampler::SetSigprofStepAsideObserver(OnSigprofStepAside);
  // A perf process may still fall back to SIGPROF per thread, and any mode
  // may use the blocking-call hooks: register both.
  sampler::RegisterSigprofFlushSource();
  sampler::RegisterOffCpuDecoding();
  AddThreadObserver(OnThreadStart, OnThreadExit);
  ArmSelf(Gettid());
  ArmOtherThreads();  // before our own thread exists: it must not be armed
  if (!sampler::StartSamplerThread(cfg.flush_ms, cfg.sampler_thread)) {
    SamplerShutdown();
    s.engine = nullptr;
  }
  RegisterLiveThreadHook(sampler::StartDeferredSamplerThread);
}

const char* SamplerModeName() {
  const SamplerEngine* e = g_state.engine.load();
  return e ? e->name : "off";
}

void SamplerAtFork() {
  // The parent's symbolizer may have been mid-update on its flush thread,
  // which does not exist here: abandon it (leaked) and start afresh. It also
  // serves allocation stacks, so this holds with sampling off too.
  g_symbolizer.store(nullptr, std::memory_order_release);
  if (!g_state.engine.load()) return;
  for (const SamplerEngine* e : sampler::kEngines) e->at_fork_child();
  sampler::ResetSampleQueueAfterFork();
  sampler::RestartSamplerThreadInChild();
  if (!g_state.shutdown.load()) ArmSelf(Gettid());
}

void SamplerShutdown() {
  // The final drain must not start loading debug info (see SetExitMode).
  if (sampler::Symbolizer* sym = g_symbolizer.load(std::memory_order_acquire)) sym->SetExitMode(true);
  if (!g_state.engine.load()) return;
  g_state.shutdown.store(true);
  sampler::SetThreadOffCpuHooks(false);
  for (const SamplerEngine* e : sampler::kEngines) e->stop();
  // The last collection queues what the rings still hold; the flush
  // thread's final drain (next) writes it.
  switch (sampler::StopSamplerThread(MonotonicNs() + kStopBudgetNs)) {
    case sampler::StopOutcome::kNotRunning: break;
    case sampler::StopOutcome::kNeverStarted:
      Log(LogLevel::kDebug, "sampler stopped before the recorder went live: collected on the flush thread");
      break;
    case sampler::StopOutcome::kTookOverIdle:
      Log(LogLevel::kDebug, "sampler stopped: thread idle, last collection on the flush thread (no wait)");
      break;
    case sampler::StopOutcome::kWaitedForCollection:
      Log(LogLevel::kDebug, "sampler stopped: waited for the collection in progress");
      break;
    case sampler::StopOutcome::kTimedOut: {
      // Samples still in the rings it is not reading are counted, not written.
      uint64_t lost = 0;
      for (const SamplerEngine* e : sampler::kEngines) lost += e->discard_unread(MonotonicNs());
      Log(LogLevel::kWarn,
          "sampler thread did not finish its collection within %llu ms of exit; %llu samples left in perf "
          "rings counted as sampler.lost",
          static_cast<unsigned long long>(kStopBudgetNs / 1000000ull), static_cast<unsigned long long>(lost));
      break;
    }
  }
}

// For the flush thread (preload/fds/own_fd_table.h): a SIGPROF sampler, whose
// collection is hosted by the flush thread or runs on a thread that lives in
// the program's descriptor table. A perf sampler keeps the flush thread in
// the program's table (its descriptors are closed by number there).
bool SamplerKeepsProgramFdTable() {
  const SamplerEngine* e = g_state.engine.load(std::memory_order_acquire);
  return e && e->flush_thread_may_leave_program_fds && sampler::SamplerThreadRunning();
}

// The flush thread ending for a restart while its descriptor table goes
// with it: the symbolizer, whose libdw may hold a descriptor in that table,
// is abandoned (leaked, as in a fork child: a restart is a uid switch or a
// failed exec, once or twice in a process's life), and the next flush
// thread builds its own. Destroying it would close descriptors by number in
// whatever table the destroying thread has.
void SamplerAbandonSymbolizer() { g_symbolizer.store(nullptr, std::memory_order_release); }

void SamplerTrimSymbolizer(uint64_t now_ns) {
  if (sampler::Symbolizer* s = g_symbolizer.load(std::memory_order_acquire)) s->DropIdleDebugInfo(now_ns);
}

format::PcDescriber* SamplerPcDescriber() {
  sampler::Symbolizer* s = g_symbolizer.load(std::memory_order_acquire);
  if (s) return s;
  void* mem = mi_malloc(sizeof(sampler::Symbolizer));
  if (!mem) return nullptr;
  s = new (mem) sampler::Symbolizer();
  sampler::Symbolizer* expected = nullptr;
  if (!g_symbolizer.compare_exchange_strong(expected, s)) {
    s->~Symbolizer();
    mi_free(mem);
    return expected;
  }
  return s;
}

namespace sampler {

void SamplerBeforeExec() {
  if (!g_state.engine.load()) return;
  for (const SamplerEngine* e : kEngines) e->before_exec();
}

void SamplerAfterExecFailed() {
  if (!g_state.engine.load()) return;
  for (const SamplerEngine* e : kEngines) e->after_exec_failed();
}

}  // namespace sampler
}  // namespace flightrec
