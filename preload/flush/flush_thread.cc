// Flush thread: see flush_thread.h. This file owns the loop and the
// hand-over: when a tick runs (period, nudges, busy rings, idle backoff),
// what a tick does (going live, the ring drain, flush sources, triggers,
// rusage and names), and how a stopper, a crash or the last thread's exit
// hands the final drain and seal to this thread and waits for it. The
// segment itself (open, block writes, rotation, seal, pause and retry) is
// segment_lifecycle.cc's; what was lost is counted by the drop ledger
// (drop_ledger.h).
//
// Invariants:
//  * Only this thread touches the writer and the segment files (the exit path
//    waits for it rather than sharing them).
//  * A slot becomes kFree only after its ring was drained *after* the owner
//    marked it kRetired, so nothing a thread recorded before exiting is lost.
//  * When the output is unusable, rings are still drained (so producers never
//    stall) and every discarded record is counted as dropped, under its kind.
//  * Nothing is lost uncounted when a write fails or the file vanishes
//    (segment_lifecycle.cc, drop_ledger.h): produced = recorded + dropped
//    holds per kind.
//  * A program's thread never does the final drain and seal (exit, _exit,
//    exec, a uid switch): it asks (final_request) and waits, bounded. This
//    thread does the work, lifted to the asker's priority (it runs at nice
//    +10 and busy host threads could starve it). The asker may be in a signal
//    handler that interrupted malloc, or on a 16 KiB stack: encoding,
//    std::string, libdw and file I/O would deadlock or overflow there.
//  * The threads that live hooks start (the sampler's) wait for the first
//    tick, FLIGHTREC_FLUSH_MS after start (or a ring's nudge): the recorder
//    goes live (GoLive). A process that ends sooner has its one segment
//    sealed by the final sequence on this thread. An image started by exec
//    opens its segment at start (its constructor), so it holds its
//    descriptor before the program can run out of them; a forked child
//    opens its own when it goes live, and one that execs before that leaves none
//    (StopReason::kRestartDiscardUnlessLive): a shell's fork before exec
//    carries nothing a user needs, and writing it cost more than the
//    program it ran.
#include "preload/flush/flush_thread.h"

#include "preload/crash/crash_freeze.h"
#include "preload/stacks/stack_unwinder.h"
#include "preload/flush/flush_wakeup.h"
#include "preload/flush/slot_scan.h"

#include <linux/futex.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

#include <sys/epoll.h>

#include "format/own_fds.h"
#include "preload/crash/raw_syscall.h"
#include "preload/fds/fd_guard.h"
#include "preload/fds/own_fd_table.h"
#include "preload/flush/drop_ledger.h"
#include "preload/flush/flush_registry_internal.h"
#include "preload/flush/segment_lifecycle.h"
#include "preload/flush/window_keeper.h"
#include "preload/heap/recorder_heap.h"
#include "preload/runtime/clock.h"
#include "preload/runtime/config.h"
#include "preload/runtime/exit_keeper.h"
#include "preload/runtime/last_thread_exit.h"
#include "preload/runtime/log.h"
#include "preload/runtime/recorder_caps.h"
#include "preload/runtime/recorder_thread.h"
#include "preload/runtime/runtime_state.h"
#include "preload/runtime/seccomp_state.h"
#include "preload/runtime/features.h"
#include "preload/runtime/thread_allowance.h"
#include "preload/threads/record_kinds.h"
#include "preload/threads/ring_growth.h"
#include "preload/threads/thread_registry.h"

namespace flightrec {
namespace {

constexpr uint64_t kMs = 1000000ull;
// How long the sampler thread gets to start the exit it was handed
// (EndProcess) before this thread ends the process itself.
constexpr uint64_t kEndHandOverNs = 2000 * kMs;
// A thread that wrote 1/16 of its ring since the last drain is busy: drain
// again after the busy period rather than wait for its nudge (a quarter
// full). Nudges alone let a niced flush thread fall behind a server on a
// saturated machine (nginx under wrk lost 4.5% of its records with 64 KiB
// rings); a quiet process still sleeps the whole FLIGHTREC_FLUSH_MS.
// The period is 5 ms per 64 KiB of the smallest busy ring: a bigger ring
// holds a busy thread's records for proportionally longer, so it is drained
// (and the flush thread woken) proportionally less often with the same
// margin. Rings differ in size once busy threads' have grown (ring_growth.h).
constexpr uint64_t kBusyFraction = 16;
// Idle backoff: each tick that found nothing to do (no ring record, no
// queued sample) doubles the next sleep, up to this, but never past the
// tick's next timed duty (UntilNextDuty). An idle process's tick costs tens
// of microseconds, most of it waking a thread whose caches went cold (71 us
// on the 2-vCPU VM, sleep(1) under the defaults), and 20 of them a second
// were half of what flightrec cost a process that does nothing. Records
// still reach the disk on time: a ring a quarter full wakes the thread at
// once (flush_wakeup.h), and the next block write is a timed duty.
constexpr uint64_t kIdleMaxNs = 1000 * kMs;
uint64_t BusyPeriodNs(uint64_t ring_bytes) {
  const uint64_t ns = 5 * kMs * (ring_bytes / 1024) / 64;
  return ns < kMs ? kMs : ns;
}

// A final seal asked for (StopFlushThread): what the flush thread does at its
// end. Bits of FlushState::final_request.
constexpr int kFinalRequested = 1;
constexpr int kFinalProcessEnding = 2;      // final hooks before, shutdown hooks after
constexpr int kFinalDiscardUnlessLive = 4;  // a forked child that never went live writes nothing

struct FlushState {
  SegmentLifecycle seg;  // the writer and its segment: open, seal, pause, retry (segment_lifecycle.h)
  uint64_t last_rusage_ns = 0;
  bool hooks_ran = false;        // the live hooks ran (on the flush thread, at its first ordinary tick)
  bool own_fd_table = false;     // this thread's descriptor table is its own (own_fd_table.h)
  bool end_handed_over = false;  // the sampler thread ends the process (EndProcess)
  uint64_t end_handed_ns = 0;
  SlotScan<ThreadState> slots;  // which slots a tick visits (slot_scan.h)
  uint64_t last_full_scan_ns = 0;
  bool busy = false;                  // the last drain took 1/kBusyFraction of some ring or more
  size_t busy_ring_bytes = SIZE_MAX;  // the smallest such ring (ring_growth.h: they differ)
  bool quiet = false;                 // the last tick found no record and no queued sample (FlushContext::work)
  // Set once by the first StopFlushThread; every later asker waits for the
  // same seal. The flush thread ends its tick at the next ring boundary.
  std::atomic<int> final_request{0};
  bool in_final = false;                    // the final tick runs: no early return
  std::atomic<bool> final_sealed{false};    // the final drain and seal are done
  std::atomic<bool> final_finished{false};  // and the shutdown hooks ran
  // Bumped (and woken) whenever one of the flags a stopper waits on is set:
  // final_sealed, final_finished, crash_done, done. A stopper sleeps on it
  // rather than polling, so it leaves the moment the work is done.
  std::atomic<uint32_t> progress{0};
  // A forked child's race between its exec and its flush thread's first
  // tick (kPhase*): whoever moves it from kPhaseAsleep first decides whether
  // the child goes live or is dropped unseen.
  std::atomic<int> phase{0};
  std::atomic<pid_t> tid{0};  // the flush thread's, once it runs
  std::atomic<bool> done{false};
  std::atomic<bool> crash_requested{false};
  std::atomic<bool> crash_done{false};
  std::atomic<bool> resume_requested{false};  // ResumeAfterCrash
  pthread_t thread{};
  // By the one stopper that gets there first (two exit paths on two threads
  // may both give up waiting): a thread is detached once.
  std::atomic<bool> thread_detached{false};
};

constexpr int kPhaseAsleep = 0;     // no tick has begun
constexpr int kPhaseTicking = 1;    // the flush thread began its first tick
constexpr int kPhaseDiscarded = 2;  // an exec took the child first: nothing to write, nobody to wait for

// Sets `flag` and wakes whoever waits for it (WaitFor).
void Announce(FlushState& s, std::atomic<bool>& flag) {
  flag.store(true, std::memory_order_release);
  s.progress.fetch_add(1, std::memory_order_seq_cst);
  const int saved = errno;
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&s.progress), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
  errno = saved;
}

FlushState* g_state = nullptr;

// The flush thread's futex word (flush_wakeup.h), bumped by every wake-up:
// producers' nudges, stop, crash and resume requests. Global rather than in
// FlushState so producers reach it without g_state (which a fork child
// replaces), and so shared by every flush thread of the process: a stopped
// one (exec failure, privilege drop) may still be asleep on it while its
// successor runs, hence wakes wake all and sleepers are counted, not flagged.
std::atomic<uint32_t> g_wake_word{0};
std::atomic<int> g_sleepers{0};  // flush threads in (or entering) their futex wait
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "futex word");

// Wake-ups that were for the collection the flush thread hosts
// (WakeFlushThreadForSampler), counted apart so that they do not count as a
// producer's nudge (which makes the tick scan every slot). Bumped before
// the word, read after it.
std::atomic<uint32_t> g_sampler_wakes{0};
// While a flush thread sleeps in the sampler's epoll set (hosted, perf
// rings): the eventfd in that set that wakes it. Only ever in the program's
// descriptor table (SamplerHostedEpollFd), so only a thread in that table
// writes it.
std::atomic<int> g_epoll_wake_fd{-1};

// Raw system calls: a SIGPROF handler may be the waker.
void WakeSleepers() {
  RawSyscall6(SYS_futex, reinterpret_cast<long>(&g_wake_word), FUTEX_WAKE_PRIVATE, INT_MAX, 0, 0, 0);
  const int fd = g_epoll_wake_fd.load(std::memory_order_seq_cst);
  if (fd < 0 || format::t_own_fd_table) return;
  const uint64_t one = 1;
  RawSyscall6(SYS_write, fd, reinterpret_cast<long>(&one), sizeof(one), 0, 0, 0);
}

// Sleeps up to `ns` unless the word moved since `seen` (read before the tick:
// a nudge or wake during the tick cuts this sleep at once). Hosting the
// collection with perf rings, in the sampler's epoll set instead, so that a
// ring's watermark wakes it too.
void SleepUnlessWoken(uint32_t seen, uint64_t ns) {
  int ev = -1;
  const int ep = sampler::SamplerHostedEpollFd ? sampler::SamplerHostedEpollFd(&ev) : -1;
  if (ep >= 0 && ev >= 0) {
    // Set before counting ourselves asleep: a waker that sees the count sees the fd.
    g_epoll_wake_fd.store(ev, std::memory_order_seq_cst);
    g_sleepers.fetch_add(1, std::memory_order_seq_cst);
    if (g_wake_word.load(std::memory_order_seq_cst) == seen) {
      epoll_event events[16];
      const int n = epoll_wait(ep, events, 16, static_cast<int>((ns + kMs - 1) / kMs));
      for (int i = 0; i < n; ++i) {
        if (events[i].data.fd != ev) continue;
        uint64_t count;
        RawSyscall6(SYS_read, ev, reinterpret_cast<long>(&count), sizeof(count), 0, 0, 0);
      }
    }
    g_sleepers.fetch_sub(1, std::memory_order_relaxed);
    g_epoll_wake_fd.store(-1, std::memory_order_relaxed);
    return;
  }
  timespec ts = NsToTimespec(ns);
  g_sleepers.fetch_add(1, std::memory_order_seq_cst);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&g_wake_word), FUTEX_WAIT_PRIVATE, seen, &ts, nullptr, 0);
  g_sleepers.fetch_sub(1, std::memory_order_relaxed);
}

// A stopper is waiting for this tick: end it at the next safe point (the
// stopper's final tick does what is left).
bool StopRequested(const FlushState& s) { return !s.in_final && s.final_request.load(std::memory_order_acquire) != 0; }

// Hosting the collection: a sampling ring that asked for a drain while this
// tick was busy (decoding, symbolizing a new module) is drained between the
// tick's pieces of work, not after all of them. Its samples are written by
// the next tick.
uint32_t g_sampler_wakes_collected = 0;  // flush thread only
void CollectIfAsked() {
  const uint32_t wakes = g_sampler_wakes.load(std::memory_order_acquire);
  if (wakes == g_sampler_wakes_collected || !sampler::SamplerHostedCollect) return;
  g_sampler_wakes_collected = wakes;
  sampler::SamplerHostedCollect();
}

// Records the ring could not read (Ring::SkipUnreadable: a bug, never seen
// since the one it was written for): counted as dropped, in bytes, and said
// once per process.
void ReportUnreadable(FlushContext& ctx, ThreadState* ts, uint64_t bytes, bool writing) {
  static bool said = false;
  if (!said) {
    said = true;
    Log(LogLevel::kWarn,
        "thread %d's ring held a record it could not read: %llu bytes of its records skipped, "
        "counted as dropped (ring.unreadable_bytes); a flightrec bug, please report it",
        ts->tid, static_cast<unsigned long long>(bytes));
  }
  if (writing) TheDropLedger().Report(ctx, static_cast<uint64_t>(ts->tid), "ring.unreadable_bytes", bytes);
  else TheDropLedger().LostWhilePaused("ring.unreadable_bytes", bytes);
}

// full: visit every slot, quiet ones too (slot_scan.h says when).
void DrainRings(FlushState& s, FlushContext& ctx, bool full) {
  const bool writing = s.seg.writer->is_open();
  s.busy = false;
  s.busy_ring_bytes = SIZE_MAX;
  // Kinds are registered at init: look each decoder up once per drain, not
  // once per record.
  RecordDecodeFn decoders[kRecordKindCount], discarders[kRecordKindCount];
  for (uint16_t k = 0; k < kRecordKindCount; k++) {
    decoders[k] = DecoderFor(k);
    discarders[k] = DiscarderFor(k);
  }
  s.slots.AddNew(RegistryHead());
  auto visit = [&](ThreadState* ts) {
    const int st = ts->state.load(std::memory_order_acquire);
    if (st != static_cast<int>(ThreadSlotState::kActive) && st != static_cast<int>(ThreadSlotState::kRetired))
      return false;
    ctx.thread = ts;
    const uint64_t before = ts->ring.consumed();
    const uint64_t unreadable_before = ts->ring.unreadable_bytes();
    ts->ring.Drain([&](const RecordHeader& h, const void* payload) {
      RecordDecodeFn fn = h.kind < kRecordKindCount ? decoders[h.kind] : nullptr;
      ctx.work++;
      if (!writing) {
        TheDropLedger().Discarded(h.kind);
        if (h.kind < kRecordKindCount && discarders[h.kind]) discarders[h.kind](ctx, h, payload);
      } else if (fn) {
        fn(ctx, h, payload);
      }
    });
    const uint64_t drained = ts->ring.consumed() - before;
    if (const uint64_t bad = ts->ring.unreadable_bytes() - unreadable_before) ReportUnreadable(ctx, ts, bad, writing);
    const size_t ring_bytes = ts->ring.consumer_capacity();
    if (drained * kBusyFraction >= ring_bytes) {
      s.busy = true;
      s.busy_ring_bytes = std::min(s.busy_ring_bytes, ring_bytes);
    }
    if (writing && st == static_cast<int>(ThreadSlotState::kRetired)) EmitThreadEndIfDropped(ctx, ts);
    if (writing) RunThreadDrainedHooks(ctx);
    if (writing) TheDropLedger().ReportThreadDrops(ctx, ts);
    else if (st == static_cast<int>(ThreadSlotState::kRetired))
      TheDropLedger().DiscardThreadDrops(ts->dropped, ts->dropped_reported);  // the slot is freed below
    if (st == static_cast<int>(ThreadSlotState::kRetired)) {
      // The owner is gone; whatever it pushed before retiring was drained above.
      ReleaseRingGrowth(ts);
      ts->state.store(static_cast<int>(ThreadSlotState::kFree), std::memory_order_release);
      return true;
    }
    NoteRingDrained(ts, drained, ctx.now_ns);
    return drained != 0;
  };
  const bool skipped = s.slots.ForEach(full, visit, [&] { return StopRequested(s); });
  // Records a passed-over slot may hold are all from after the last full
  // scan; without one passed over, everything before this tick is in.
  ctx.all_drained_ns = skipped ? s.last_full_scan_ns : ctx.now_ns;
  ctx.thread = nullptr;
}

// Once live (the sampler's thread started by the live hooks, in the
// program's table): this thread's file work moves into a descriptor table
// of its own, out of the program's sight (own_fd_table.h says when not).
void TakeOwnFdTableIfItFits(FlushState& s) {
  // With S3 the uploader and this thread hand descriptors to each other; the
  // sampler's SIGPROF thread keeps the program's table (and its files) for
  // the exit after main's pthread_exit.
  if (!GetConfig().s3_bucket.empty() || !SamplerKeepsProgramFdTable || !SamplerKeepsProgramFdTable()) return;
  // Hosted, no sampler thread stays in the program's table: a keeper made
  // when main leaves does the exit (exit_keeper.h), unless main left already.
  const bool hosted = sampler::SamplerHosted && sampler::SamplerHosted();
  if (hosted && !ExitKeeperLetFlushThreadLeave()) return;
  const char* why_not = nullptr;
  s.own_fd_table = TakeOwnFdTable(&why_not);
  if (hosted && !s.own_fd_table) ExitKeeperFlushThreadStayed();
  // Only the change is news: the program's table is how it always was.
  if (s.own_fd_table) Log(LogLevel::kDebug, "flush thread: descriptor table of its own");
}

// Every tick: the first segment if it waited, and at the first ordinary
// tick of the flush thread the live hooks (the sampler's thread). Not on a
// final tick: that is the process going away, and what the sampler holds
// was collected by its own stop.
void GoLive(FlushState& s, uint64_t now, bool final_tick) {
  if (!final_tick && !s.hooks_ran) {
    s.hooks_ran = true;
    // A fork child's sampler unwinder waits for this (stack_unwinder.h):
    // before the sampler's thread starts. Not on a crash's tick (final): the
    // crashed thread may hold the malloc lock that this takes.
    stacks::PrepareUnwinders();
    RunLiveThreadHooks();
    // Hosting the collection: a hand-over to perf asked for already (the
    // program took SIGPROF early) is made while still in the program's table.
    if (sampler::SamplerHostedCollect) sampler::SamplerHostedCollect();
    TakeOwnFdTableIfItFits(s);
    RunLiveHooks();
  }
  OpenFirstSegment(s.seg, now);
}

// What starts a tick: the period (or a producer's nudge, or a stop or crash
// request: every slot is scanned), or the end (the final drain and seal).
enum class TickKind { kPeriodic, kNudged, kFinal };

void Tick(FlushState& s, TickKind kind) {
  const bool final_tick = kind == TickKind::kFinal;
  const bool nudged = kind != TickKind::kPeriodic;
  const Config& cfg = GetConfig();
  const uint64_t now = MonotonicNs();
  GoLive(s, now, final_tick);
  if (s.seg.paused && (now >= s.seg.retry_at_ns || s.resume_requested.exchange(false, std::memory_order_acq_rel)))
    OpenSegment(s.seg, now);
  FlushContext ctx{s.seg.writer, nullptr, now, final_tick};
  s.quiet = false;
  const bool full_scan = final_tick || nudged || now - s.last_full_scan_ns >= kFullScanNs;
  if (full_scan) s.last_full_scan_ns = now;
  DrainRings(s, ctx, full_scan);
  if (!s.seg.writer->is_open() || StopRequested(s)) return;
  if (!final_tick) CollectIfAsked();
  RunFlushSources(ctx);
  if (!final_tick) CollectIfAsked();
  s.quiet = ctx.work == 0;
  TheDropLedger().ReportUnregistered(ctx, UnattributedDrops());
  TheDropLedger().ReportOutputLosses(ctx);
  // Triggers become events (and incidents) before any seal of this tick, so
  // a crash's final seal already knows its incident.
  const bool incident_done = s.seg.keeper->Tick(ctx);
  if (cfg.rusage_ms && (now - s.last_rusage_ns >= cfg.rusage_ms * kMs || final_tick)) {
    s.last_rusage_ns = now;
    EmitRusage(ctx);
    CheckSeccompStatus();                     // a filter installed by a raw system call (seccomp_state.h)
    const uint64_t names_ns = MonotonicNs();  // not `now`: see RefreshThreadName
    s.slots.ForEachDue(final_tick, [&](ThreadState* ts) { RefreshThreadName(ctx, ts, names_ns); });
  }
  if (final_tick) {
    SealSegment(s.seg);
    return;
  }
  if (StopRequested(s)) return;
  WriteAndRotate(s.seg, now, incident_done);
  if (SamplerTrimSymbolizer) SamplerTrimSymbolizer(now);  // after the tick's pcs were described
}

// How long until a tick has timed work to do: the next process.rusage, the
// next block write while events wait in the writer, a time-based segment
// rotation, a paused recorder's retry. Bounds the idle backoff, so a quiet
// process's trace still advances on the schedule the knobs promise.
uint64_t UntilNextDuty(const FlushState& s, uint64_t now) {
  const Config& cfg = GetConfig();
  uint64_t due = UINT64_MAX;
  auto at = [&](uint64_t t) { due = std::min(due, t); };
  if (cfg.rusage_ms) at(s.last_rusage_ns + cfg.rusage_ms * kMs);
  at(NextSegmentDutyNs(s.seg));
  return due > now ? due - now : 0;
}

// Set while exit() runs on the flush thread (EndProcess): the atexit
// shutdown then finds itself on this thread and does the final work inline.
bool g_exit_on_flush_thread = false;

// The final drain and seal, on the flush thread (or inline on it when it
// ends the process itself). Whoever asked waits on final_sealed.
void FinalSequence(FlushState& s) {
  const int req = s.final_request.load(std::memory_order_acquire);
  const bool discard = (req & kFinalDiscardUnlessLive) && !s.seg.opened;
  // A fork child that seals before it went live: its samples are unwound now.
  if (!discard) stacks::PrepareUnwinders();
  if (req & kFinalProcessEnding) RunFinalHooks();  // the sampler's last collection
  if (!discard) {
    s.in_final = true;
    Tick(s, TickKind::kFinal);
  }
  // Never live (a forked child exec'ing at once): no segment at all. What its
  // rings hold stays there; a failed exec records it into its next segment.
  if (req & kFinalProcessEnding) SetRuntimeRecording(false);
  // A restart (uid switch, failed exec) goes on in a new thread with a new
  // descriptor table, where libdw's descriptors in this one (the rare ones
  // it keeps) name nothing: the next thread starts a symbolizer of its own.
  // Let go before the asker moves on (it may start that thread at once).
  if (s.own_fd_table && !(req & kFinalProcessEnding) && SamplerAbandonSymbolizer) SamplerAbandonSymbolizer();
  Announce(s, s.final_sealed);
  if (req & kFinalProcessEnding) RunShutdownHooks(MonotonicNs() + GetConfig().upload_shutdown_ms * kMs);
  Announce(s, s.final_finished);
}

// The application's last thread is gone and only ours keep the process
// alive. After pthread_exit of main, end it the way glibc would have on that
// last thread: exit(0), atexit handlers and all (its Shutdown finds itself
// here). After a raw exit system call (seccomp-strict programs, ctypes), the
// kernel would have ended the process with the main thread's status and no
// handlers: seal, then leave with that status.
// With a descriptor table of its own, the flush thread hands the exit to the
// sampler thread and returns; the exit's stop then reaches it as usual.
void EndProcess(FlushState& s, const LastThreadExit& how) {
  if (how.raw) {
    Log(LogLevel::kInfo,
        "the application's last thread has exited (exit system call); ending the process "
        "(exit status %d)",
        how.status);
    s.final_request.store(kFinalRequested | kFinalProcessEnding, std::memory_order_release);
    FinalSequence(s);
    syscall(SYS_exit_group, how.status);
    __builtin_unreachable();
  }
  // exit(0) runs the program's atexit handlers, which write to its files:
  // this thread's own table has none of them; the sampler thread's (when it
  // has one) and the exit keeper's (exit_keeper.h) have.
  if (s.own_fd_table && !s.end_handed_over &&
      ((SamplerThreadEndsProcess && SamplerThreadEndsProcess()) || ExitKeeperEndsProcess())) {
    s.end_handed_over = true;
    s.end_handed_ns = MonotonicNs();
    return;
  }
  Log(LogLevel::kInfo, "the application's last thread has exited; ending the process (exit status 0)");
  g_exit_on_flush_thread = true;
  setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 0);  // atexit handlers are the host's
  exit(0);
}

// A stopper waits for the flush thread: let it run at the stopper's priority
// (and in its real-time class, if any), so busy host threads cannot starve
// the last tick of a nice +10 thread.
void BoostFlushThread(const FlushState& s) { LiftRecorderThread(s.tid.load(std::memory_order_acquire)); }

bool FinalRequested(const FlushState& s) { return s.final_request.load(std::memory_order_seq_cst) != 0; }

// After the process-ending final sequence the process is on its way out:
// the exit that asked for it is about to end every thread. Returning now
// would run this thread's exit path first (mimalloc's thread teardown gives
// its pages back: madvise, and a TLB shootdown of the other CPU), ~90 us of
// a short-lived process's life spent on memory that exit_group frees
// anyway (issue #39). So wait instead; the exit kills the thread where it
// sleeps. Bounded, so a process that somehow lives on (an atexit handler
// that never returns, say) still sees the thread leave.
void ParkUntilTheProcessEnds() {
  constexpr uint64_t kParkNs = 5ull * 1000 * 1000 * 1000;
  const uint64_t until = MonotonicNs() + kParkNs;
  for (uint64_t now = MonotonicNs(); now < until; now = MonotonicNs())
    SleepNs(std::min<uint64_t>(until - now, kMs * 100));
}

void* FlushMain(void* arg) {
  auto* s = static_cast<FlushState*>(arg);
  s->tid.store(static_cast<pid_t>(syscall(SYS_gettid)), std::memory_order_release);
  const uint64_t period = GetConfig().flush_ms * kMs;
  uint32_t seen = g_wake_word.load(std::memory_order_seq_cst);
  uint32_t seen_sampler = g_sampler_wakes.load(std::memory_order_seq_cst);
  // The first tick makes the recorder live; a producer the flush thread does
  // not drain may need that sooner than a period (GoLiveWithin).
  uint64_t sleep_ns = std::min(period, GoLiveWithinNs());
  uint64_t idle_ns = period;  // doubles with every quiet tick, up to kIdleMaxNs
  uint64_t next_tick_ns = 0;  // when the next tick is due (a nudge brings it forward)
  CrashFreezeJoin();
  RecorderCapsSetWaker(&NudgeFlushThread);
  RecorderCapsApply();
  // `seen` is read before final_request is looked at: a stop asked after the
  // look bumps the word and cuts the sleep short.
  while (!FinalRequested(*s)) {
    SleepUnlessWoken(seen, sleep_ns);
    RecorderCapsApply();  // the program's capset, made on this thread too
    CrashFreezePark();    // the program's crash handler is running: touch nothing
    const uint32_t now_seen = g_wake_word.load(std::memory_order_seq_cst);
    const uint32_t now_sampler = g_sampler_wakes.load(std::memory_order_seq_cst);
    // Not just the timer, nor only the sampling rings: scan every slot.
    const bool nudged = now_seen - seen > now_sampler - seen_sampler;
    seen = now_seen;
    seen_sampler = now_sampler;
    // The program lowered RLIMIT_NPROC under what we need: this thread is
    // one it may miss (thread_allowance.h). It seals what it has (the final
    // sequence below, with no request: no hooks) and leaves; what the rings
    // hold after that is not written.
    if (!NprocStillLeavesRoom("the flush thread seals and leaves, and no thread of ours starts")) break;
    if (FinalRequested(*s)) break;
    // The first tick: unless an exec in a forked child got here first.
    int asleep = kPhaseAsleep;
    if (!s->phase.compare_exchange_strong(asleep, kPhaseTicking, std::memory_order_acq_rel) &&
        asleep == kPhaseDiscarded)
      break;
    if (s->crash_requested.load(std::memory_order_acquire)) {
      // Seal now; do not open a new segment (the process is about to die).
      // If it survives, the pause ends after kRetryNs and recording resumes.
      Tick(*s, TickKind::kFinal);
      PauseAfterCrash(s->seg);
      s->crash_requested.store(false, std::memory_order_relaxed);
      Announce(*s, s->crash_done);
      SettleRecorderThread();  // lifted by the asker; the process may live on
      continue;
    }
    // The collection this thread hosts (sampler_thread.h) comes first, so
    // the tick writes what it queued; a wake-up for it alone (a ring's
    // watermark, a SIGPROF ring a quarter full) collects without a tick.
    g_sampler_wakes_collected = now_sampler;
    int sampler_wait_ms = sampler::SamplerHostedCollect ? sampler::SamplerHostedCollect() : -1;
    if (nudged || MonotonicNs() >= next_tick_ns) {
      Tick(*s, nudged ? TickKind::kNudged : TickKind::kPeriodic);
      RecorderHeapCollect(MonotonicNs());  // what this tick freed goes back (issue #44)
      // The tick that made the recorder live began hosting: collect now.
      if (sampler_wait_ms < 0 && sampler::SamplerHostedCollect) sampler_wait_ms = sampler::SamplerHostedCollect();
      if (s->busy && period > BusyPeriodNs(s->busy_ring_bytes)) {
        sleep_ns = BusyPeriodNs(s->busy_ring_bytes);
      } else if (!s->quiet || MainThreadLeft()) {
        idle_ns = period;
        sleep_ns = period;
      } else {
        idle_ns = std::min(idle_ns * 2, std::max(period, kIdleMaxNs));
        sleep_ns = std::max(period, std::min(idle_ns, UntilNextDuty(*s, MonotonicNs())));
      }
      next_tick_ns = MonotonicNs() + sleep_ns;
    } else {
      RecorderHeapCollect(MonotonicNs());
    }
    const uint64_t now = MonotonicNs();
    sleep_ns = next_tick_ns > now ? next_tick_ns - now : 0;
    if (sampler_wait_ms >= 0) sleep_ns = std::min(sleep_ns, static_cast<uint64_t>(sampler_wait_ms) * kMs);
    LastThreadExit how;
    // A sampler thread that never got to the exit it was handed: end here.
    if ((!s->end_handed_over || now - s->end_handed_ns > kEndHandOverNs) && ApplicationThreadsGone(now, &how))
      EndProcess(*s, how);
  }
  FinalSequence(*s);
  Announce(*s, s->done);
  CrashFreezeLeave();
  if (s->final_request.load(std::memory_order_acquire) & kFinalProcessEnding) ParkUntilTheProcessEnds();
  return nullptr;
}

// defer_open: a forked child's writer and first segment wait for its first
// tick (GoLive). An image started by exec opens its segment here, at start,
// so it holds its descriptor before the program can run out of them (the
// constructor runs on the main thread's full stack, outside any handler).
bool Launch(const ProcessInfo& info, bool defer_open) {
  auto* s = new FlushState();
  InitSegments(s->seg, info);
  s->last_rusage_ns = 0;
  if (!defer_open) OpenFirstSegment(s->seg, MonotonicNs());
  const int rc = CreateRecorderThread(&s->thread, "flightrec-flush", FlushMain, s);
  if (rc != 0) {
    if (rc != kRefusedForNproc)
      Log(LogLevel::kWarn, "cannot start the flush thread: %s; recording disabled", strerror(rc));
    AbandonSegment(s->seg);
    return false;
  }
  g_state = s;
  return true;
}

}  // namespace

void NudgeFlushThread() {
  g_wake_word.fetch_add(1, std::memory_order_seq_cst);
  if (g_sleepers.load(std::memory_order_seq_cst) > 0) {
    const int saved = errno;
    WakeSleepers();
    errno = saved;
  }
}

void WakeFlushThreadForSampler() {
  g_sampler_wakes.fetch_add(1, std::memory_order_seq_cst);
  NudgeFlushThread();
}

bool StartFlushThread(const ProcessInfo& info) { return Launch(info, /*defer_open=*/false); }

namespace {
// Waits until `flag` is set or deadline_ns: on the progress futex (a raw
// system call: async-signal-safe), woken the moment the flag is announced;
// each wait at most 2 ms, to lift the thread again (it may not have had a
// tid at the first ask).
bool WaitFor(FlushState& s, const std::atomic<bool>& flag, uint64_t deadline_ns) {
  for (;;) {
    const uint32_t seen = s.progress.load(std::memory_order_seq_cst);
    if (flag.load(std::memory_order_acquire)) return true;
    const uint64_t now = MonotonicNs();
    if (now >= deadline_ns) return false;
    BoostFlushThread(s);
    const timespec ts = NsToTimespec(std::min<uint64_t>(deadline_ns - now, 2000000));
    const int saved = errno;
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&s.progress), FUTEX_WAIT_PRIVATE, seen, &ts, nullptr, 0);
    errno = saved;
  }
}
}  // namespace

// The last thread StopFlushThread stopped (WaitForStoppedFlushThreadGone).
std::atomic<pid_t> g_stopped_tid{0};

bool WaitForStoppedFlushThreadGone(uint64_t deadline_ns) {
  const pid_t tid = g_stopped_tid.load(std::memory_order_acquire);
  if (tid <= 0) return true;
  const int saved = errno;
  const pid_t pid = static_cast<pid_t>(syscall(SYS_getpid));
  bool gone = false;
  for (;;) {
    // Signal 0 checks only: ESRCH once the kernel thread is gone, after
    // glibc took it off its list.
    if (syscall(SYS_tgkill, pid, tid, 0) != 0 && errno == ESRCH) {
      gone = true;
      break;
    }
    if (MonotonicNs() >= deadline_ns) break;
    LiftRecorderThread(tid);
    const timespec ts = NsToTimespec(200000);
    syscall(SYS_nanosleep, &ts, nullptr);
  }
  errno = saved;
  return gone;
}

bool StopFlushThread(uint64_t deadline_ns, StopReason why) {
  FlushState* s = g_state;
  if (!s) return true;
  g_stopped_tid.store(s->tid.load(std::memory_order_acquire), std::memory_order_release);
  int flags = kFinalRequested;
  if (why == StopReason::kProcessEnding) flags |= kFinalProcessEnding;
  if (why == StopReason::kRestartDiscardUnlessLive) flags |= kFinalDiscardUnlessLive;
  if (g_exit_on_flush_thread && pthread_equal(pthread_self(), s->thread)) {
    // exit() from EndProcess: we are the flush thread, between ticks.
    g_state = nullptr;
    s->final_request.store(flags, std::memory_order_release);
    FinalSequence(*s);
    return true;
  }
  int expected = 0;
  const bool first = s->final_request.compare_exchange_strong(expected, flags, std::memory_order_acq_rel);
  int asleep = kPhaseAsleep;
  if (first && (flags & kFinalDiscardUnlessLive) &&
      s->phase.compare_exchange_strong(asleep, kPhaseDiscarded, std::memory_order_acq_rel)) {
    // A forked child exec'ing before its first tick: the thread has touched
    // nothing (no writer, no file, no ring drained) and never will (it
    // leaves at its next wake-up without a tick), so there is nothing to
    // wait for; the exec ends it. Should the exec fail, its successor may
    // start while it is still on its way out: harmless, it ticks no more.
    NudgeFlushThread();
    if (!s->thread_detached.exchange(true, std::memory_order_acq_rel)) pthread_detach(s->thread);
    g_state = nullptr;
    return true;
  }
  NudgeFlushThread();
  if (!WaitFor(*s, s->final_sealed, deadline_ns)) {
    Log(LogLevel::kWarn, "flush thread did not finish before the exit deadline; the last segment stays .active");
    // Left running, never joined: detached, so it is not a leaked thread.
    if (!s->thread_detached.exchange(true, std::memory_order_acq_rel)) pthread_detach(s->thread);
    return false;
  }
  if (flags & kFinalProcessEnding) {
    // The uploader's last shipping (its own bound), plus a little for the
    // thread to get there.
    WaitFor(*s, s->final_finished, MonotonicNs() + (GetConfig().upload_shutdown_ms + 100) * kMs);
  }
  if (!s->thread_detached.exchange(true, std::memory_order_acq_rel)) pthread_detach(s->thread);
  // The next StartFlushThread (failed exec, uid switch) makes a new state;
  // this one stays allocated: a late asker may still read it.
  if (first && g_state == s) g_state = nullptr;
  return true;
}

bool RequestCrashFlushAndWait(uint64_t deadline_ns) {
  FlushState* s = g_state;
  if (!s || s->done.load(std::memory_order_acquire) || FinalRequested(*s)) return false;
  s->crash_done.store(false, std::memory_order_relaxed);
  s->crash_requested.store(true, std::memory_order_release);
  NudgeFlushThread();
  // As at exit: the crashing thread lifts the flush thread to its own
  // priority, or a busy machine keeps a nice +10 thread off the CPU past the
  // deadline and the crash leaves nothing (seen under ASan on a loaded host).
  return WaitFor(*s, s->crash_done, deadline_ns);
}

void ResumeAfterCrash() {
  FlushState* s = g_state;
  if (!s) return;
  s->resume_requested.store(true, std::memory_order_release);
  NudgeFlushThread();
}

void RestartFlushThreadInChild(const ProcessInfo& info) {
  // The parent's flush thread may have been asleep, in the sampler's epoll
  // set even: nobody sleeps here, and that eventfd's number is the child's
  // to reuse once the sampler closes its copy (RestartSamplerThreadInChild).
  g_sleepers.store(0, std::memory_order_relaxed);
  g_epoll_wake_fd.store(-1, std::memory_order_relaxed);
  // The parent's FlushState and writer are abandoned (leaked): their memory
  // may be mid-update from a thread that does not exist in the child. Only
  // the inherited descriptor is released, so the child does not hold the
  // parent's segment open.
  // A parent whose flush thread had a table of its own left nothing of its
  // in the child's (fork copies the forking thread's table).
  if (g_state && g_state->seg.writer && !FlushThreadHasOwnFdTable()) {
    CloseOwnFd(g_state->seg.writer->fd());
  }
  OwnFdTableAfterForkChild();
  g_state = nullptr;
  ResetSegmentNumbering();  // a new process: its own numbering
  Launch(info, /*defer_open=*/true);
}

}  // namespace flightrec
