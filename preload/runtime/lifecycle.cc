// Lifecycle: the preload's constructor (config, registry, features, flush
// thread), its exit path (final drain and seal within a bounded time, then
// the upload shutdown hooks) and the fork child handler (a fresh recorder for
// the child; the parent is untouched).
//
// Features are linked in as weak symbols (features.h) so each lives in its
// own files and the runtime still builds while one is missing.
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <sys/auxv.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include <mimalloc.h>
#include <valgrind/valgrind.h>

#include "format/fsize_guard.h"
#include "preload/heap/address_space.h"
#include "preload/runtime/clock.h"
#include "preload/crash/crash_freeze.h"
#include "preload/crash/crash_handler.h"
#include "preload/runtime/config.h"
#include "preload/flush/drop_ledger.h"
#include "preload/runtime/exit_keeper.h"
#include "preload/runtime/features.h"
#include "preload/runtime/core_events.h"
#include "preload/fds/fd_guard.h"
#include "preload/fds/validation_pipe.h"
#include "preload/flush/flush_registry_internal.h"
#include "preload/flush/flush_thread.h"
#include "preload/flush/window_keeper.h"
#include "preload/runtime/last_thread_exit.h"
#include "preload/runtime/log.h"
#include "preload/runtime/own_work.h"
#include "preload/runtime/recorder_caps.h"
#include "preload/heap/recorder_heap.h"
#include "preload/flush/output_dir.h"
#include "preload/flush/segment_files.h"
#include "preload/runtime/runtime_state.h"
#include "preload/runtime/seccomp_state.h"
#include "preload/runtime/thread_allowance.h"
#include "preload/threads/ring_growth.h"
#include "preload/threads/thread_registry.h"
#include "preload/stacks/local_stack.h"
#include "preload/stacks/stack_unwinder.h"

extern char** environ;

namespace flightrec {
namespace {

constexpr uint64_t kFlushExitBudgetNs = 2000ull * 1000000ull;

// The pid the recorder belongs to. A vfork child shares our memory but has
// its own pid: it must never touch the parent's recorder.
pid_t g_owner_pid = 0;
// This image began as a forked child (not by exec): if it execs before its
// recorder goes live it leaves no segment (flush_thread.h).
bool g_forked_child = false;

ProcessInfo CurrentProcessInfo() {
  ProcessInfo info = CollectProcessInfo();
  info.sampler = SamplerModeName ? SamplerModeName() : "off";
  return info;
}

// A forked child's, in its fork handler: the rest is read by its flush
// thread if the child lives to open a segment (most shell children exec at
// once: readlink, /proc/self/cmdline and the strings were ~55 us of every
// fork, perf record of a preloaded bash loop; issue #39).
ProcessInfo ForkedChildInfo() {
  ProcessInfo info = ForkedChildProcessInfo();
  info.sampler = SamplerModeName ? SamplerModeName() : "off";
  return info;
}

// The atexit handler and the _exit hooks: on a program's thread (perhaps in
// a signal handler, on a small stack), so it only asks the flush thread for
// the final seal and waits, bounded (flush_thread.h). The sampler's last
// collection and the uploader's last shipping run there too (final and
// shutdown hooks).
// The thread that first began to exit (the exit hook, or our atexit handler
// for a return from main), and whether its seal is done.
std::atomic<pid_t> g_exiting_tid{0};
std::atomic<bool> g_exit_sealed{false};

bool ClaimExit() {
  const pid_t me = static_cast<pid_t>(syscall(SYS_gettid));
  pid_t expected = 0;
  return g_exiting_tid.compare_exchange_strong(expected, me, std::memory_order_acq_rel) || expected == me;
}

void Shutdown() {
  ClaimExit();
  struct MarkSealed {
    ~MarkSealed() { g_exit_sealed.store(true, std::memory_order_release); }
  } mark;
  if (!RuntimeRecording() || getpid() != g_owner_pid) return;
  // Leaving from inside the application's handler for a crash signal: the
  // crash path seals (async-signal-safe); the ordinary shutdown could
  // deadlock on a lock the crashed code held.
  if (CrashExitFromHandler()) return;
  // Out of memory at exit (only when the flush thread ends the process
  // itself and runs this inline): the process still exits as it would have.
  try {
    StopFlushThread(MonotonicNs() + kFlushExitBudgetNs, StopReason::kProcessEnding);
    SetRuntimeRecording(false);
  } catch (const std::bad_alloc&) {
    SetRuntimeRecording(false);
    Log(LogLevel::kWarn, "out of memory at exit; the last records are lost");
  }
}

void RestartInForkChild();

void AtForkChild() {
  // A parent thread mid-open or mid-close-all is not in the child.
  format::ResetFdOpeningAfterFork();
  RecorderCapsResetAfterFork();  // nor are our threads
  if (!RuntimeRecording()) return;
  // Our work on the program's thread: what it allocates goes to this
  // thread's recorder heap, the one the parent's start-up filled, not to a
  // segment of its own (recorder_heap.cc).
  OwnWorkOnAppThread ours;
  try {
    RestartInForkChild();
  } catch (const std::bad_alloc&) {
    SetRuntimeRecording(false);
    Log(LogLevel::kWarn, "recording off in the forked child: out of memory");
  }
}

void RestartInForkChild() {
  g_owner_pid = getpid();
  g_forked_child = true;
  ResetRegistryAfterFork();
  CrashFreezeResetInChild();           // before the sampler and flush threads start again
  TheDropLedger().ResetInForkChild();  // the parent's drop totals are not the child's
  LastThreadWatchAtForkChild();
  ExitKeeperAtForkChild();
  stacks::DeferUnwindersAfterFork();  // remade on the child's flush thread if it lives
  if (SamplerAtFork) SamplerAtFork();
  if (UploaderAtFork) UploaderAtFork();
  CurrentThreadState(IfUnregistered::kRegister);
  RestartFlushThreadInChild(ForkedChildInfo());
}

// Whether the recorder's heap can serve a first block now: under a tight
// address-space limit (ulimit -v) mimalloc cannot map its first segment, and
// then nothing of ours starts. Probed before anything is installed.
bool HeapHasRoom() {
  // As our own work: the probe makes this thread's heap in the recorder
  // arena, which the rest of start-up then uses (recorder_heap.cc).
  OwnWorkOnAppThread ours;
  void* probe = mi_malloc(4096);
  if (!probe) return false;
  mi_free(probe);
  return true;
}

void StartRecording();
void FlightrecInit();

// For the message when the program's malloc does not reach our hooks: the
// object that serves it, if the lookup names it. Not when the executable
// only holds a PLT entry for it (a non-PIE program that takes malloc's
// address), which stands for whatever comes after it.
const char* MallocOwnerName() {
  void* global = dlsym(RTLD_DEFAULT, "malloc");
  Dl_info owner{};
  void* entry = nullptr;  // the ElfW(Sym) that answered
  if (!global || !dladdr1(global, &owner, &entry, RTLD_DL_SYMENT) || !entry ||
      static_cast<const ElfW(Sym)*>(entry)->st_shndx == SHN_UNDEF || !owner.dli_fname || !owner.dli_fname[0])
    return "an allocator loaded ahead of the preload";
  return owner.dli_fname;
}

__attribute__((constructor)) void FlightrecInit() {
  // Never in setuid/setgid (secure-execution) processes: nothing of ours
  // runs there, not even mimalloc's start-up (it reads MIMALLOC_*).
  if (getauxval(AT_SECURE)) return;
  InitLogTarget();
  // Out of memory anywhere in start-up: record nothing, never abort the host.
  // What was installed before the failure stays passive: every hook checks
  // RuntimeRecording() first.
  try {
    StartRecording();
  } catch (const std::bad_alloc&) {
    SetRuntimeRecording(false);
    Log(LogLevel::kWarn, "recording off: out of memory while starting");
  }
}

void StartRecording() {
  std::vector<std::string> messages;
  Config cfg = ParseConfig(environ, &messages);
  SetLogLevel(cfg.log);
  for (const std::string& m : messages)
    if (cfg.log != LogLevel::kQuiet) Log(LogLevel::kWarn, "%s", m.c_str() + 11);  // strip "flightrec: "
  if (!cfg.enable) return;  // a disabled process never loads the recorder's heap
  // Under Valgrind the CPU is emulated: samples and stacks would describe its
  // translation, not the program. And its allocator replaces functions by
  // name in every library, our private heap's free among them: each of our
  // frees became an "Invalid free" in the program's own Valgrind report, and
  // curl's test suite, which runs curl under Valgrind, failed under the
  // preload. The report is the program's: stay off, quietly (test suites
  // compare stderr). RUNNING_ON_VALGRIND is a no-op instruction sequence
  // natively. Other tools fare no better: under callgrind the SIGPROF
  // sampler's first signal killed the program (Valgrind could not extend the
  // stack to deliver it).
  if (RUNNING_ON_VALGRIND) {
    Log(LogLevel::kInfo, "recording off: running under Valgrind");
    return;
  }
  // Under a tight descriptor limit the numbers are the program's: stay off
  // before anything of ours opens one (fd_guard.h).
  unsigned long nofile = 0;
  if (!NofileLeavesRoomForRecorder(&nofile)) {
    Log(LogLevel::kWarn,
        "recording off: RLIMIT_NOFILE %lu leaves the program too few descriptors (the recorder "
        "needs a soft limit of at least %lu)",
        nofile, kMinNofileForRecording);
    return;
  }
  // Under a tight process-count limit the threads are the program's: stay
  // off before any of ours starts (thread_allowance.h).
  unsigned long nproc = 0;
  if (!NprocLeavesRoomForRecorder(&nproc)) {
    Log(LogLevel::kWarn,
        "recording off: RLIMIT_NPROC %lu leaves the program too few threads (the recorder "
        "needs a soft limit of at least %lu)",
        nproc, kMinNprocForRecording);
    return;
  }
  // Under a tight file-size limit every segment write would pass it, and
  // one on the program's thread (the first segment, opened here) raised
  // SIGXFSZ: stay off (format/fsize_guard.h).
  const uint64_t fsize = format::FileSizeLimit();
  if (fsize < kMinFileSizeForRecording) {
    Log(LogLevel::kWarn, "recording off: RLIMIT_FSIZE %llu bytes is under the %llu a segment needs",
        static_cast<unsigned long long>(fsize), static_cast<unsigned long long>(kMinFileSizeForRecording));
    return;
  }
  // Under a tight address-space limit the room is the program's: stay off
  // before anything of ours is mapped.
  const char* limit = nullptr;
  if (!ProcessHasRoomForRecorder(&limit)) {
    Log(LogLevel::kWarn,
        "recording off: %s leaves too little room for the recorder (needs %llu MiB free, twice "
        "what it maps)",
        limit, static_cast<unsigned long long>(2 * kRecorderAddressSpace >> 20));
    return;
  }
  const HeapState heap = RecorderHeapOpen();
  if (heap != HeapState::kPrivate && heap != HeapState::kShared) {
    Log(LogLevel::kWarn, "recording off: the recorder's heap is unavailable (%s)", HeapStateName(heap));
    return;
  }
  if (!HeapHasRoom()) {
    Log(LogLevel::kWarn, "recording off: no memory for the recorder (address-space limit?)");
    return;
  }
  // From here what init builds for the recorder's life (the configuration's
  // copy, the event types, the unwinders, the symbolizer, the tables) is
  // allocated in the recorder's heap, not the program's: the program's heap
  // at main is as without us, and our threads freeing it later never move
  // the program's next malloc (which block, what usable size: it did,
  // timing-dependent, in test_mimalloc_environment_is_not_read_by_our_heap).
  // Ends before the main thread registers (a flagged thread never does).
  // Whose malloc the program calls, asked before the recorder's own work
  // begins on this thread (that holds its sampling off). Not ours (another
  // allocator first in the lookup order): none of its allocations reaches a
  // hook, and an empty heap profile would look like a program that
  // allocates nothing. Said at info level, as a program built with its own
  // allocator would print it at every start; the trace says it too
  // (process.start's alloc_sample_bytes is 0).
  if (cfg.alloc_sample_bytes == 0) {
    Log(LogLevel::kInfo, "allocation profiling off (FLIGHTREC_ALLOC_SAMPLE_BYTES=0)");
  } else if (MallocReachesAllocHooks && !MallocReachesAllocHooks()) {
    Log(LogLevel::kInfo,
        "allocation profiling off: malloc calls go to %s, not through the recorder (list libflightrec.so ahead "
        "of it in LD_PRELOAD)",
        MallocOwnerName());
    cfg.alloc_sample_bytes = 0;
  }
  std::optional<OwnWorkOnAppThread> ours(std::in_place);
  // A filter inherited through exec (a sandbox's launcher): nothing of ours
  // may make a call it could kill on, from the first unwind on.
  CheckSeccompStatus();
  // Our descriptors go high, out of the numbers programs pick (fd_guard.h).
  SetOwnFdFloorFromLimit();
  // Started with stdin, stdout or stderr closed: what init opens (libunwind's
  // pipes above all, whose numbers we cannot change later) must not take
  // those numbers from the program (fd_guard.h).
  StdioPlaceholders keep_stdio_free;
  SetConfig(cfg);
  InitThreadRegistry();
  // Before any thread can burst: the first drain may be late (nice +10).
  PrepareSpareRings(cfg.ring_bytes);
  LastThreadWatchInit();
  RegisterCoreEvents();
  RegisterTriggerEvents();  // the `trigger` event (preload/flush/window_keeper.h)
  // Before any recorder thread exists, so no unwinding path ever mallocs.
  // Both libunwind libraries start here and ask for their address-validation
  // pipes, which the pipe hook fakes: no descriptor (validation_pipe.h). The
  // snapshot protects real ones where the hook is not reached (fd_guard.h).
  NoteLibunwindCode();
  const OpenFdSnapshot before_unwinders = SnapshotOpenFds();
  {
    LibunwindInitScope libunwind_init;
    stacks::PrepareUnwinders();
    stacks::InitLocalStackCapture();
    if (AllocProfilerInit) AllocProfilerInit(cfg);
  }
  ProtectPipesOpenedSince(before_unwinders);
  if (SamplerInit) SamplerInit(cfg);
  if (SocketsInit) SocketsInit(cfg);
  if (CrashHandlerInit) CrashHandlerInit(cfg);
  if (TermSignalsInit) TermSignalsInit(cfg);
  if (UploaderInit) UploaderInit(cfg);
  g_owner_pid = getpid();
  ours.reset();
  SetRuntimeRecording(true);
  CurrentThreadState(IfUnregistered::kRegister);  // the main thread
  bool started;
  {
    OwnWorkOnAppThread flush_start;
    started = StartFlushThread(CurrentProcessInfo());
  }
  if (!started) {
    SetRuntimeRecording(false);
    return;
  }
  atexit(Shutdown);
  pthread_atfork(nullptr, nullptr, AtForkChild);
  Log(LogLevel::kInfo, "recording to %s", cfg.output.c_str());
}

// Starting the flush thread again (after a failed exec, around a uid drop):
// false, and recording stays off, when memory has run out.
bool StartFlushThreadOrStop() {
  try {
    OwnWorkOnAppThread ours;
    return StartFlushThread(CurrentProcessInfo());
  } catch (const std::bad_alloc&) {
    Log(LogLevel::kWarn, "recording off: out of memory");
    return false;
  }
}

}  // namespace

// Called by the _exit/_Exit hooks: the process skips atexit, so drain and
// seal here, within the same bounded time.
void ShutdownBeforeExit() { Shutdown(); }

// Called by the exit hook: the first thread to exit goes on; any other waits
// (raw sleeps, bounded by the seal's and the uploader's budgets) until that
// one's seal is done, so its exit_group cannot cut the seal short.
void WaitForAnotherExit() {
  if (!RuntimeRecording() || getpid() != g_owner_pid || ClaimExit()) return;
  const uint64_t deadline = MonotonicNs() + kFlushExitBudgetNs + (GetConfig().upload_shutdown_ms + 200) * 1000000ull;
  while (!g_exit_sealed.load(std::memory_order_acquire) && MonotonicNs() < deadline) SleepNs(1000000);
}

// exec replaces the image without running atexit: seal first. If the exec
// fails the process goes on, so recording restarts with the next segment.
namespace {
bool g_exec_pending = false;
}
void RecorderBeforeExec() {
  if (!RuntimeRecording() || getpid() != g_owner_pid) return;  // vfork child: hands off
  // A shell's fork-then-exec: the child's few milliseconds before the exec
  // are dropped with the segment they would have made (flush_thread.h).
  StopFlushThread(MonotonicNs() + kFlushExitBudgetNs,
                  g_forked_child ? StopReason::kRestartDiscardUnlessLive : StopReason::kRestart);
  SetRuntimeRecording(false);
  g_exec_pending = true;
}
void RecorderAfterExecFailed() {
  if (!g_exec_pending || getpid() != g_owner_pid) return;
  g_exec_pending = false;
  SetRuntimeRecording(true);
  if (!StartFlushThreadOrStop()) SetRuntimeRecording(false);
}

// A process started as root drops to uid N (hook_setuid.cc): seal while
// still root, pin OUTPUT/uid-N (output_dir.h), and after the call record on
// in a new segment there (or in the old directory if the call failed). The
// hooks stay on: the rings keep what the application does meanwhile.
bool RecorderBeforeUidDrop(uid_t uid) {
  if (!RuntimeRecording() || getpid() != g_owner_pid) return false;
  OwnWorkOnAppThread own;
  if (!StopFlushThread(MonotonicNs() + kFlushExitBudgetNs, StopReason::kRestart)) {
    // The flush thread still holds the writer and leaves on its own.
    Log(LogLevel::kWarn, "could not seal the segment before the switch to uid %u; recording stopped", uid);
    SetRuntimeRecording(false);
    return false;
  }
  if (!WaitForStoppedFlushThreadGone(MonotonicNs() + kFlushExitBudgetNs))
    Log(LogLevel::kWarn,
        "the stopped flush thread is still leaving; a group change after the switch to uid %u "
        "could fail on it",
        uid);
  std::string error;
  bool pinned = false;
  try {
    pinned = PinOutputDirForUid(GetConfig().output, GetConfig().allow_foreign_dir, uid, &error);
  } catch (const std::bad_alloc&) {
    error = "out of memory";
  }
  if (pinned) return true;
  Log(LogLevel::kWarn, "%s; staying in %s, which uid %u may not be able to use", error.c_str(),
      GetConfig().output.c_str(), uid);
  if (!StartFlushThreadOrStop()) SetRuntimeRecording(false);
  return false;
}
void RecorderAfterUidDrop(bool dropped) {
  OwnWorkOnAppThread own;
  if (!dropped) UnpinOutputDir();
  if (!StartFlushThreadOrStop()) {
    SetRuntimeRecording(false);
    return;
  }
  if (dropped)
    Log(LogLevel::kInfo, "uid %u: recording to %s/%s", geteuid(), GetConfig().output.c_str(),
        UidDirName(geteuid()).c_str());
}

// The way back: a process that dropped only its effective uid (seteuid) and
// returns to root. The segment written as N is sealed in uid-N first (its
// files are N's); after the call root records in OUTPUT again, never in the
// directory N owns. If the call fails, recording goes on in uid-N.
bool RecorderBeforeUidReturn() {
  if (!RuntimeRecording() || getpid() != g_owner_pid || !OutputDirPinned()) return false;
  OwnWorkOnAppThread own;
  if (!StopFlushThread(MonotonicNs() + kFlushExitBudgetNs, StopReason::kRestart)) {
    Log(LogLevel::kWarn, "could not seal the segment before the switch back to root; recording stopped");
    SetRuntimeRecording(false);
    return false;
  }
  WaitForStoppedFlushThreadGone(MonotonicNs() + kFlushExitBudgetNs);
  return true;
}
void RecorderAfterUidReturn(bool returned) {
  OwnWorkOnAppThread own;
  if (returned) UnpinOutputDir();
  if (!StartFlushThreadOrStop()) {
    SetRuntimeRecording(false);
    return;
  }
  if (returned) Log(LogLevel::kInfo, "back to root: recording to %s", GetConfig().output.c_str());
}

}  // namespace flightrec
