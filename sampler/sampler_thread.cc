// Sampler thread (see sampler_thread.h).
//
// Stopping (exit) never waits for this thread to be scheduled: it runs at
// nice +10 and busy host threads can starve it for as long as they like. The
// phase word decides who owns the collection state (perf batch, SIGPROF ring
// consumers): a stopper that finds the thread idle takes over at once and
// collects on its own thread; one that finds it mid-collection waits for that
// collection alone (bounded), with the thread lifted to the stopper's
// scheduling class (LiftRecorderThread).
#include "sampler/sampler_thread.h"

#include <pthread.h>
#include <sys/resource.h>
#include <sys/epoll.h>
#include <linux/futex.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "preload/heap/recorder_heap.h"
#include "preload/runtime/clock.h"
#include "preload/crash/crash_freeze.h"
#include "preload/crash/raw_syscall.h"
#include "format/own_fds.h"
#include "preload/fds/fd_guard.h"
#include "preload/flush/flush_wakeup.h"
#include "preload/runtime/log.h"
#include "preload/runtime/recorder_caps.h"
#include "preload/runtime/recorder_thread.h"
#include "preload/runtime/thread_allowance.h"
#include "preload/threads/thread_registry.h"
#include "sampler/sample_events.h"
#include "sampler/sampler_engine.h"

namespace flightrec::sampler {
namespace {

// kIdle/kCollecting: the thread owns the collection state (between / in a
// collection). kStopRequested: a stopper waits for the collection to end.
// kStopped: the stopper owns it; the thread only leaves.
enum Phase : int { kIdle, kCollecting, kStopRequested, kStopped };

struct ThreadCtl {
  uint64_t period_ms = 100;
  std::atomic<int> phase{kIdle};
  std::atomic<pid_t> tid{0};
  // Claimed with an exchange by the one stopper that takes the thread over:
  // two exit paths on two threads (exit() and _exit()) must not both detach
  // it and both run the last collection.
  std::atomic<bool> started{false};
  pthread_t thread{};
};

ThreadCtl g_ctl;

// The thread is wanted but waits for the recorder to go live (flush_thread.h):
// kNone, kPending (StartSamplerThread), kLaunching (the flush thread is
// creating it). A stop that finds it pending collects on its own thread.
enum Deferred : int { kNone, kPending, kLaunching };
std::atomic<int> g_deferred{kNone};

// What the thread sleeps on (see sampler_thread.h). A futex word, bumped by
// every nudge (SIGPROF handlers, a task, Stop): no descriptor, so a program
// sampled with SIGPROF timers sees none of ours for waking. With perf rings,
// an epoll set holding every ring's fd, edge-triggered (the kernel wakes it
// when a ring passes its watermark, a quarter of the ring, or when the thread
// behind the event exits), and an eventfd in it for the nudges: made when the
// first perf ring is watched, protected from the application's
// close-everything loops like every fd of ours.
std::atomic<uint32_t> g_wake_word{0};
std::atomic<int> g_futex_sleepers{0};
// Hosted (the default): there is no sampler thread; the flush thread runs
// the collection (SamplerHostedCollect) and every wake-up goes to it.
std::atomic<bool> g_hosted{false};
std::atomic<int> g_epoll_fd{-1};
std::atomic<int> g_event_fd{-1};
// Made by a thread with a descriptor table of its own (own_fd_table.h):
// the numbers mean nothing in the program's table, and the reverse.
std::atomic<bool> g_wake_fds_own_table{false};
std::atomic<bool> g_creating_wake_fds{false};

void Wake();

void CloseWakeFds() {
  for (auto* a : {&g_epoll_fd, &g_event_fd}) {
    const int fd = a->exchange(-1);
    if (fd >= 0) CloseOwnFd(fd);
  }
}

// The epoll set and its eventfd, once (any thread: arming a perf ring).
// Returns the epoll fd, or -1 (the thread then wakes on its timer alone).
int EnsureWakeFds() {
  int ep = g_epoll_fd.load(std::memory_order_acquire);
  if (ep >= 0) return ep;
  if (g_creating_wake_fds.exchange(true, std::memory_order_acq_rel)) return -1;  // another arming thread is at it
  {
    OwnFdChange opening;
    ep = epoll_create1(EPOLL_CLOEXEC);
    int ev = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (ep < 0 || ev < 0) {
      if (ep >= 0) syscall(SYS_close, ep);
      if (ev >= 0) syscall(SYS_close, ev);
      ep = -1;
    } else {
      ep = TakeOwnFd(ep);
      ev = TakeOwnFd(ev);
      epoll_event e{};
      e.events = EPOLLIN | EPOLLET;
      e.data.fd = ev;
      epoll_ctl(ep, EPOLL_CTL_ADD, ev, &e);
      g_wake_fds_own_table.store(format::t_own_fd_table, std::memory_order_relaxed);
      g_event_fd.store(ev, std::memory_order_release);
      g_epoll_fd.store(ep, std::memory_order_release);
    }
  }
  g_creating_wake_fds.store(false, std::memory_order_release);
  if (ep >= 0) Wake();  // a sleeper on the futex moves to the set
  return ep;
}

// Raw syscalls: write() and read() are our own socket hooks, and errno is
// the interrupted code's. Async-signal-safe.
std::atomic<uint32_t> g_helper_word{0};  // the helper's futex word (SlowWorkScope)
std::atomic<bool> g_helper_running{false};

void Wake() {
  if (g_hosted.load(std::memory_order_acquire)) {
    if (g_helper_running.load(std::memory_order_acquire)) {
      g_helper_word.fetch_add(1, std::memory_order_seq_cst);
      RawSyscall6(SYS_futex, reinterpret_cast<long>(&g_helper_word), FUTEX_WAKE_PRIVATE, 1, 0, 0, 0);
    }
    WakeFlushThreadForSampler();
    return;
  }
  // Bump, then look for a sleeper (seq_cst both sides): either the sleeper
  // sees the new word and does not sleep, or this sees it and wakes it.
  g_wake_word.fetch_add(1, std::memory_order_seq_cst);
  if (g_futex_sleepers.load(std::memory_order_seq_cst) != 0)
    RawSyscall6(SYS_futex, reinterpret_cast<long>(&g_wake_word), FUTEX_WAKE_PRIVATE, 1, 0, 0, 0);
  // The eventfd is in the program's table; from a thread with a table of
  // its own (own_fd_table.h) the futex alone must do (a sleeper in
  // epoll_wait leaves at its timeout).
  const int fd = g_event_fd.load(std::memory_order_acquire);
  if (fd < 0 || format::t_own_fd_table) return;
  const uint64_t one = 1;
  RawSyscall6(SYS_write, fd, reinterpret_cast<long>(&one), sizeof(one), 0, 0, 0);
}

// After a collection that found a ring filling fast: come back this soon
// rather than trust the watermark alone (this thread is niced, and a ring
// written at megabytes a second needs the margin).
constexpr int kPressureWaitMs = 5;
// Idle backoff: a collection that found no sample doubles the next wait, up
// to this. A thread that starts running again is sampled into its ring
// meanwhile, and a ring a quarter full wakes this thread at once (SIGPROF
// rings through NudgeSamplerThread, perf rings through their watermark), so
// the wait only decides how often an idle process pays for a wake-up.
constexpr int kIdleMaxWaitMs = 1000;

// Sleeps until a ring wants draining or timeout_ms pass.
void WaitForWork(int timeout_ms) {
  const int ep = g_epoll_fd.load(std::memory_order_acquire);
  if (ep < 0) {
    const uint32_t seen = g_wake_word.load(std::memory_order_seq_cst);
    g_futex_sleepers.fetch_add(1, std::memory_order_seq_cst);
    if (g_wake_word.load(std::memory_order_seq_cst) == seen) {
      const timespec ts{timeout_ms / 1000, (timeout_ms % 1000) * 1000000L};
      syscall(SYS_futex, reinterpret_cast<uint32_t*>(&g_wake_word), FUTEX_WAIT_PRIVATE, seen, &ts, nullptr, 0);
    }
    g_futex_sleepers.fetch_sub(1, std::memory_order_relaxed);
    return;
  }
  epoll_event events[16];
  const int n = epoll_wait(ep, events, 16, timeout_ms);
  const int ev = g_event_fd.load(std::memory_order_relaxed);
  for (int i = 0; i < n; ++i) {
    if (events[i].data.fd == ev) {
      uint64_t count;
      syscall(SYS_read, ev, &count, sizeof(count));
    }
  }
}

std::atomic<void (*)()> g_task{nullptr};
std::atomic<int> g_wake_within_ms{0};  // SamplerWakeWithin; 0: nobody asked

// Drains every engine (sampler_engine.h; each does nothing unless started).
// A stop that comes meanwhile collects the rest on the stopping thread: each
// engine's drain looks. Returns whether a ring was under pressure.
bool Collect() {
  if (void (*task)() = g_task.exchange(nullptr, std::memory_order_acq_rel)) task();
  const uint64_t now = MonotonicNs();
  bool pressure = false;
  for (const SamplerEngine* e : kEngines) pressure |= e->drain(now);
  return pressure;
}

// Set by SamplerThreadEndsProcess: the flush thread, in a descriptor table
// of its own, hands this thread the exit(0) glibc would have made on the
// program's last thread (last_thread_exit.h).
std::atomic<bool> g_end_process{false};

// exit(0) here, with the program's files: its atexit handlers write to them.
[[noreturn]] void EndProcessHere() {
  Log(LogLevel::kInfo, "the application's last thread has exited; ending the process (exit status 0)");
  CrashFreezeLeave();
  setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 0);  // atexit handlers are the host's
  exit(0);
}

void* SamplerMain(void*) {
  g_ctl.tid.store(static_cast<pid_t>(syscall(SYS_gettid)), std::memory_order_release);
  bool pressure = false;
  const int period_ms = static_cast<int>(g_ctl.period_ms);
  int wait_ms = period_ms;
  CrashFreezeJoin();
  // The first pass collects before sleeping: rings may have filled before
  // this thread existed (it starts when the recorder goes live), and the
  // nudges that said so bumped the futex word before there was a sleeper.
  bool first = true;
  RecorderCapsSetWaker(&Wake);
  for (;;) {
    if (!first) WaitForWork(pressure ? kPressureWaitMs : wait_ms);
    first = false;
    if (g_end_process.load(std::memory_order_acquire)) {
      // The collection state goes to the stopper the exit brings (StopSamplerThread).
      int idle = kIdle;
      if (g_ctl.phase.compare_exchange_strong(idle, kStopped, std::memory_order_acq_rel)) EndProcessHere();
      break;
    }
    RecorderCapsApply();  // the program's capset, made on this thread too
    CrashFreezePark();    // the program's crash handler is running: touch nothing
    // The program lowered RLIMIT_NPROC under what we need: this thread is
    // one it may miss (thread_allowance.h). It leaves between collections;
    // the stopper's last collection takes what the rings hold then.
    if (!NprocStillLeavesRoom("the sampler thread leaves (samples that do not fit the rings are dropped)")) break;
    int expected = kIdle;
    if (!g_ctl.phase.compare_exchange_strong(expected, kCollecting, std::memory_order_acq_rel)) break;
    const uint64_t offered = SamplesOffered();
    pressure = Collect();
    RecorderHeapCollect(MonotonicNs());  // what this collection freed goes back (issue #44)
    const int asked_ms = g_wake_within_ms.exchange(0, std::memory_order_relaxed);
    const bool quiet = !pressure && asked_ms == 0 && SamplesOffered() == offered;
    wait_ms = quiet ? std::min(2 * wait_ms, std::max(period_ms, kIdleMaxWaitMs)) : period_ms;
    if (asked_ms > 0) wait_ms = std::min(wait_ms, asked_ms);
    expected = kCollecting;
    if (!g_ctl.phase.compare_exchange_strong(expected, kIdle, std::memory_order_acq_rel)) {
      g_ctl.phase.store(kStopped, std::memory_order_release);  // hand the state to the stopper
      break;
    }
  }
  CrashFreezeLeave();
  return nullptr;
}

// What the flush thread keeps between hosted collections (flush thread only).
int g_hosted_wait_ms = 0;
// On SlowWorkScope's helper thread.
__thread bool t_slow_work_helper __attribute__((tls_model("initial-exec"))) = false;
bool g_own_thread_wanted = false;  // FLIGHTREC_SAMPLER_THREAD

// The flush thread takes the collection on (at its first tick).
void Host() {
  g_ctl.phase.store(kIdle);
  g_ctl.tid.store(static_cast<pid_t>(syscall(SYS_gettid)), std::memory_order_release);
  g_hosted_wait_ms = static_cast<int>(g_ctl.period_ms);
  g_hosted.store(true, std::memory_order_release);
  g_ctl.started.store(true, std::memory_order_release);
}

bool Launch() {
  g_ctl.phase.store(kIdle);
  g_ctl.tid.store(0);
  const int rc = CreateRecorderThread(&g_ctl.thread, "flightrec-sampl", SamplerMain, nullptr);
  g_ctl.started.store(rc == 0, std::memory_order_release);
  if (rc != 0 && rc != kRefusedForNproc)
    Log(LogLevel::kWarn, "cannot start the sampler thread (error %d); CPU samples are lost", rc);
  return rc == 0;
}

}  // namespace

void WatchRingFd(int fd) {
  if (fd < 0) return;
  const int ep = EnsureWakeFds();
  if (ep < 0) return;
  epoll_event e{};
  e.events = EPOLLIN | EPOLLET;
  e.data.fd = fd;
  epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e);
}

bool SamplerThreadRunning() { return g_ctl.started.load(std::memory_order_acquire); }

bool SamplerStopRequested() { return g_ctl.phase.load(std::memory_order_acquire) == kStopRequested; }

bool IsSamplerThread() {
  const pid_t tid = g_ctl.tid.load(std::memory_order_acquire);
  return tid != 0 && tid == static_cast<pid_t>(syscall(SYS_gettid));
}

void NudgeSamplerThread() {
  // No thread yet: a ring a quarter full is worth keeping, so the recorder
  // goes live now (its first tick starts this thread) rather than at its
  // first FLIGHTREC_FLUSH_MS; a SIGPROF ring holds only a few samples.
  if (g_deferred.load(std::memory_order_relaxed) == kPending) NudgeFlushThread();
  Wake();
}

void SamplerWakeWithin(int ms) {
  int cur = g_wake_within_ms.load(std::memory_order_relaxed);
  while ((cur == 0 || ms < cur) && !g_wake_within_ms.compare_exchange_weak(cur, ms, std::memory_order_relaxed)) {}
}

void RunOnSamplerThread(void (*task)()) {
  g_task.store(task, std::memory_order_release);
  Wake();
}

bool StartSamplerThread(uint64_t period_ms, bool own_thread) {
  if (g_ctl.started.load(std::memory_order_acquire)) return true;
  g_ctl.period_ms = period_ms ? period_ms : 100;
  g_own_thread_wanted = own_thread;
  g_deferred.store(kPending, std::memory_order_release);
  return true;
}

void StartDeferredSamplerThread() {
  int expected = kPending;
  if (!g_deferred.compare_exchange_strong(expected, kLaunching, std::memory_order_acq_rel)) return;
  if (g_own_thread_wanted) Launch();
  else Host();
  g_deferred.store(kNone, std::memory_order_release);
}

bool SamplerHosted() { return g_hosted.load(std::memory_order_acquire); }

int SamplerHostedCollect() {
  if (!g_hosted.load(std::memory_order_acquire)) return -1;
  // A restarted flush thread (uid switch, failed exec) carries on hosting.
  if (!t_slow_work_helper) g_ctl.tid.store(static_cast<pid_t>(syscall(SYS_gettid)), std::memory_order_release);
  int expected = kIdle;
  if (!g_ctl.phase.compare_exchange_strong(expected, kCollecting, std::memory_order_acq_rel)) return -1;
  const int period_ms = static_cast<int>(g_ctl.period_ms);
  const uint64_t offered = SamplesOffered();
  const bool pressure = Collect();
  const int asked_ms = g_wake_within_ms.exchange(0, std::memory_order_relaxed);
  const bool quiet = !pressure && asked_ms == 0 && SamplesOffered() == offered;
  int& wait_ms = g_hosted_wait_ms;
  wait_ms = quiet ? std::min(2 * std::max(wait_ms, 1), std::max(period_ms, kIdleMaxWaitMs)) : period_ms;
  if (asked_ms > 0) wait_ms = std::min(wait_ms, asked_ms);
  expected = kCollecting;
  if (!g_ctl.phase.compare_exchange_strong(expected, kIdle, std::memory_order_acq_rel)) {
    g_ctl.phase.store(kStopped, std::memory_order_release);  // a stopper on another thread takes it from here
    return -1;
  }
  int wait = pressure ? kPressureWaitMs : wait_ms;
  // perf rings whose watermark cannot reach this thread (their epoll set is
  // in another descriptor table): looked at every period instead.
  if (g_epoll_fd.load(std::memory_order_acquire) >= 0 && SamplerHostedEpollFd(nullptr) < 0)
    wait = std::min(wait, period_ms);
  return wait;
}

namespace {

// SlowWorkScope's helper (flush thread only, but for the flag the helper
// reads): how deep the scopes are, the thread, and its stop request.
int g_slow_depth = 0;
pthread_t g_helper{};
bool g_helper_joinable = false;
uint64_t g_helper_since_ns = 0;
std::atomic<bool> g_helper_stop{false};
// The helper polls at most this long between collections: it does not sleep
// in the perf rings' epoll set (which may be in another descriptor table).
constexpr int kHelperPollMs = 10;

void* HelperMain(void*) {
  t_slow_work_helper = true;
  CrashFreezeJoin();
  while (!g_helper_stop.load(std::memory_order_acquire)) {
    const uint32_t seen = g_helper_word.load(std::memory_order_seq_cst);
    RecorderCapsApply();
    CrashFreezePark();
    int wait = SamplerHostedCollect();
    wait = wait < 0 ? kHelperPollMs : std::min(wait, kHelperPollMs);
    if (g_helper_stop.load(std::memory_order_acquire)) break;
    const timespec ts{0, wait * 1000000L};
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&g_helper_word), FUTEX_WAIT_PRIVATE, seen, &ts, nullptr, 0);
  }
  CrashFreezeLeave();
  return nullptr;
}

}  // namespace

int SamplerHostedEpollFd(int* event_fd) {
  if (!g_hosted.load(std::memory_order_acquire)) return -1;
  const int ep = g_epoll_fd.load(std::memory_order_acquire);
  // Only in the program's table: the threads that wake it write the eventfd
  // by number from there.
  if (ep < 0 || format::t_own_fd_table || g_wake_fds_own_table.load(std::memory_order_relaxed)) return -1;
  if (event_fd) *event_fd = g_event_fd.load(std::memory_order_acquire);
  return ep;
}

// The last collection on the stopping thread, which counts as a recorder
// thread meanwhile so its own allocations are not recorded.
void CollectHere() {
  const uint32_t saved_flags = t_thread_flags;
  t_thread_flags |= kThreadFlagRecorder;
  Collect();
  t_thread_flags = saved_flags;
}

StopOutcome StopSamplerThread(uint64_t deadline_ns) {
  // Still pending: the samples the handlers took so far wait in their rings.
  // Being launched: wait for it (microseconds), then stop it as usual.
  for (;;) {
    int expected = kPending;
    if (g_deferred.compare_exchange_strong(expected, kNone, std::memory_order_acq_rel)) {
      CollectHere();
      return StopOutcome::kNeverStarted;
    }
    if (expected != kLaunching || MonotonicNs() >= deadline_ns) break;
    SleepNs(100000);  // raw: a stop may run in a seal from a signal handler
  }
  if (!g_ctl.started.exchange(false, std::memory_order_acq_rel)) return StopOutcome::kNotRunning;
  const bool hosted = g_hosted.load(std::memory_order_acquire);
  StopOutcome outcome = StopOutcome::kTookOverIdle;
  for (;;) {
    int expected = kIdle;
    if (g_ctl.phase.compare_exchange_strong(expected, kStopped, std::memory_order_acq_rel)) break;
    if (expected == kStopped) break;
    if (expected == kCollecting &&
        !g_ctl.phase.compare_exchange_strong(expected, kStopRequested, std::memory_order_acq_rel))
      continue;  // it went idle meanwhile
    outcome = StopOutcome::kWaitedForCollection;
    if (!hosted) LiftRecorderThread(g_ctl.tid.load(std::memory_order_acquire));
    while (g_ctl.phase.load(std::memory_order_acquire) != kStopped) {
      if (MonotonicNs() >= deadline_ns) {
        // It keeps the collection state; the process ends without it.
        // Detached, as it will never be joined (TSan reported it leaked).
        if (!hosted) pthread_detach(g_ctl.thread);
        return StopOutcome::kTimedOut;
      }
      SleepNs(1000000);
    }
    break;
  }
  // It wakes, finds kStopped and leaves on its own: never join a thread the
  // scheduler may not run for a while. Hosted, the flush thread just stops
  // collecting.
  if (!hosted) {
    Wake();
    pthread_detach(g_ctl.thread);
  }
  // The last collection (what the threads recorded before sampling stopped)
  // on this thread, at the host's priority.
  CollectHere();
  return outcome;
}

SlowWorkScope::SlowWorkScope() {
  if (!g_hosted.load(std::memory_order_acquire) || t_slow_work_helper || !IsSamplerThread()) return;
  entered_ = true;
  if (g_slow_depth++ > 0) return;
  const int phase = g_ctl.phase.load(std::memory_order_acquire);
  if (!g_ctl.started.load(std::memory_order_acquire) || phase == kStopped || phase == kStopRequested) return;
  g_helper_stop.store(false, std::memory_order_release);
  g_helper_running.store(true, std::memory_order_release);
  g_helper_joinable = CreateRecorderThread(&g_helper, "flightrec-help", HelperMain, nullptr) == 0;
  if (!g_helper_joinable) g_helper_running.store(false, std::memory_order_release);
  g_helper_since_ns = MonotonicNs();
}

SlowWorkScope::~SlowWorkScope() {
  if (!entered_ || --g_slow_depth > 0 || !g_helper_joinable) return;
  g_helper_stop.store(true, std::memory_order_release);
  g_helper_word.fetch_add(1, std::memory_order_seq_cst);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&g_helper_word), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
  // Its collection in progress ends first (bounded): the flush thread then
  // has the collection state to itself again.
  pthread_join(g_helper, nullptr);
  g_helper_joinable = false;
  g_helper_running.store(false, std::memory_order_release);
  Log(LogLevel::kDebug, "a helper thread collected the samples for %.1f ms of slow symbolization",
      static_cast<double>(MonotonicNs() - g_helper_since_ns) / 1e6);
}

SlowWorkWatch::SlowWorkWatch() {
  if (g_hosted.load(std::memory_order_acquire) && !t_slow_work_helper && IsSamplerThread()) start_ns_ = MonotonicNs();
}

void SlowWorkWatch::PollSlow() {
  if (scope_ || MonotonicNs() - start_ns_ < kSlowAfterNs) return;
  scope_.emplace();
}

void RestartSamplerThreadInChild() {
  // The epoll set is shared with the parent (fork copies the fd, not the
  // set): the child's rings go into a set of its own, made when its first
  // ring is watched. Nobody sleeps on the child's futex word yet.
  CloseWakeFds();
  g_hosted.store(false, std::memory_order_relaxed);
  // A helper of the parent's is not the child's (and a fork from inside a
  // scope is not the flush thread's: it does not fork).
  g_slow_depth = 0;
  g_helper_joinable = false;
  g_helper_running.store(false, std::memory_order_relaxed);
  g_end_process.store(false, std::memory_order_relaxed);
  g_futex_sleepers.store(0, std::memory_order_relaxed);
  g_creating_wake_fds.store(false, std::memory_order_relaxed);
  // The parent's thread is not ours to join. The child's waits for its
  // recorder to go live, like the parent's did.
  const bool wanted = g_ctl.started.exchange(false, std::memory_order_relaxed);
  if (wanted || g_deferred.load(std::memory_order_relaxed) != kNone)
    g_deferred.store(kPending, std::memory_order_relaxed);
}

}  // namespace flightrec::sampler

namespace flightrec {
// The flush thread's EndProcess (preload/flush/flush_thread.cc; weak reference
// in preload/runtime/features.h): true if this thread is there to make the exit.
bool SamplerThreadEndsProcess() {
  if (!sampler::SamplerThreadRunning() || sampler::SamplerHosted()) return false;
  sampler::g_end_process.store(true, std::memory_order_release);
  sampler::Wake();
  return true;
}
}  // namespace flightrec
