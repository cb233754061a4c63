// Lifecycle: the preload's constructor (config, registry, features, flush
// thread), its exit path (final drain and seal within a bounded time, then
// the upload shutdown hooks) and the fork child handler (a fresh recorder for
// the child; the parent is untouched).
//
// Features are linked in as weak symbols so each lives in its own files and
// the runtime still builds while one is missing.
#include <pthread.h>
#include <sys/auxv.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "preload/clock.h"
#include "preload/config.h"
#include "preload/core_events.h"
#include "preload/flush_registry_internal.h"
#include "preload/flush_thread.h"
#include "preload/last_thread_exit.h"
#include "preload/log.h"
#include "preload/runtime_state.h"
#include "preload/thread_registry.h"

extern char** environ;

namespace flightrec {
// Feature entry points (weak: absent features are skipped).
void AllocProfilerInit(const Config&) __attribute__((weak));
void SamplerInit(const Config&) __attribute__((weak));
const char* SamplerModeName() __attribute__((weak));
void SamplerAtFork() __attribute__((weak));
void SamplerShutdown() __attribute__((weak));
void SocketsInit(const Config&) __attribute__((weak));
void CrashHandlerInit(const Config&) __attribute__((weak));
void UploaderInit(const Config&) __attribute__((weak));
void UploaderAtFork() __attribute__((weak));
}  // namespace flightrec

namespace flightrec {
namespace {

constexpr uint64_t kFlushExitBudgetNs = 2000ull * 1000000ull;

// The pid the recorder belongs to. A vfork child shares our memory but has
// its own pid: it must never touch the parent's recorder.
pid_t g_owner_pid = 0;

ProcessInfo CurrentProcessInfo() {
  ProcessInfo info = CollectProcessInfo();
  info.sampler = SamplerModeName ? SamplerModeName() : "off";
  return info;
}

void Shutdown() {
  if (!RuntimeRecording() || getpid() != g_owner_pid) return;
  if (SamplerShutdown) SamplerShutdown();
  const uint64_t start = MonotonicNs();
  StopFlushThread(start + kFlushExitBudgetNs);
  SetRuntimeRecording(false);
  RunShutdownHooks(MonotonicNs() + GetConfig().upload_shutdown_ms * 1000000ull);
}

void AtForkChild() {
  if (!RuntimeRecording()) return;
  g_owner_pid = getpid();
  ResetRegistryAfterFork();
  TakeFooterCounters();  // the parent's drop totals are not the child's
  LastThreadWatchAtForkChild();
  if (SamplerAtFork) SamplerAtFork();
  if (UploaderAtFork) UploaderAtFork();
  CurrentThreadState(true);
  RestartFlushThreadInChild(CurrentProcessInfo());
}

__attribute__((constructor)) void FlightrecInit() {
  // Never in setuid/setgid (secure-execution) processes.
  if (getauxval(AT_SECURE)) return;
  std::vector<std::string> messages;
  Config cfg = ParseConfig(environ, &messages);
  SetLogLevel(cfg.log);
  for (const std::string& m : messages)
    if (cfg.log != LogLevel::kQuiet) Log(LogLevel::kWarn, "%s", m.c_str() + 11);  // strip "flightrec: "
  if (!cfg.enable) return;
  SetConfig(cfg);
  InitThreadRegistry();
  LastThreadWatchInit();
  RegisterCoreEvents();
  if (AllocProfilerInit) AllocProfilerInit(cfg);
  if (SamplerInit) SamplerInit(cfg);
  if (SocketsInit) SocketsInit(cfg);
  if (CrashHandlerInit) CrashHandlerInit(cfg);
  if (UploaderInit) UploaderInit(cfg);
  g_owner_pid = getpid();
  SetRuntimeRecording(true);
  CurrentThreadState(true);  // the main thread
  if (!StartFlushThread(CurrentProcessInfo())) {
    SetRuntimeRecording(false);
    return;
  }
  atexit(Shutdown);
  pthread_atfork(nullptr, nullptr, AtForkChild);
  Log(LogLevel::kInfo, "recording to %s", cfg.output.c_str());
}

}  // namespace

// Called by the _exit/_Exit hooks: the process skips atexit, so drain and
// seal here, within the same bounded time.
void ShutdownBeforeExit() { Shutdown(); }

// exec replaces the image without running atexit: seal first. If the exec
// fails the process goes on, so recording restarts with the next segment.
namespace {
bool g_exec_pending = false;
}
void RecorderBeforeExec() {
  if (!RuntimeRecording() || getpid() != g_owner_pid) return;  // vfork child: hands off
  StopFlushThread(MonotonicNs() + kFlushExitBudgetNs);
  SetRuntimeRecording(false);
  g_exec_pending = true;
}
void RecorderAfterExecFailed() {
  if (!g_exec_pending || getpid() != g_owner_pid) return;
  g_exec_pending = false;
  SetRuntimeRecording(true);
  if (!StartFlushThread(CurrentProcessInfo())) SetRuntimeRecording(false);
}

}  // namespace flightrec
