// Sampler orchestration (see sampler.h): mode choice, per-thread arming and
// disarming, fork/exec/exit handling, and the symbolizer handed to the writer.
#include "sampler/sampler.h"

#include <dirent.h>
#include <fcntl.h>
#include <mimalloc.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <new>

#include "preload/clock.h"
#include "preload/log.h"
#include "preload/thread_registry.h"
#include "sampler/local_stack.h"
#include "sampler/offcpu_blocking.h"
#include "sampler/perf_sampler.h"
#include "sampler/sample_events.h"
#include "sampler/sampler_thread.h"
#include "sampler/sigprof_sampler.h"
#include "sampler/symbolizer.h"

namespace flightrec {
namespace {

// How long an exiting thread waits for the sampler thread, and only when it
// is in the middle of a collection (between collections the exiting thread
// takes over at once). One collection is one pass over the rings, well under
// a millisecond of CPU, and the thread runs in the exiting thread's
// scheduling class meanwhile; past this the samples it holds are given up.
constexpr uint64_t kStopBudgetNs = 50ull * 1000000ull;

enum class Mode { kOff, kPerf, kSigprof };

struct SamplerState {
  Mode mode = Mode::kOff;
  bool auto_mode = false;
  bool offcpu = false;             // off-CPU wanted at all
  sampler::SigprofOptions sigprof_opts;
  // Per-thread SIGPROF fallback: decided once, by the first thread perf
  // refuses. kFallbackDeciding -> kFallbackOk | kFallbackFailed.
  std::atomic<int> sigprof_fallback{0};
  std::atomic<bool> shutdown{false};
};

SamplerState g_state;
std::atomic<sampler::Symbolizer*> g_symbolizer{nullptr};

pid_t Gettid() { return static_cast<pid_t>(syscall(SYS_gettid)); }

// auto mode: a thread perf cannot arm (locked-memory limits, fd limits) gets
// the SIGPROF timer instead, if SIGPROF is ours to use.
constexpr int kFallbackUndecided = 0, kFallbackDeciding = 1, kFallbackOk = 2, kFallbackFailed = 3;
// Threads refused while the first one is still installing the fallback wait
// for its answer (thread start, not a hot path), but never longer than this.
constexpr uint64_t kFallbackWaitNs = 200ull * 1000000ull;

bool SigprofFallbackForThread() {
  if (!g_state.auto_mode) return false;
  const int saved_errno = errno;
  int expected = kFallbackUndecided;
  if (g_state.sigprof_fallback.compare_exchange_strong(expected, kFallbackDeciding)) {
    const char* why = "";
    const bool ok = sampler::SigprofInstall(g_state.sigprof_opts, &why);
    g_state.sigprof_fallback.store(ok ? kFallbackOk : kFallbackFailed);
    Log(LogLevel::kWarn, "perf_event_open failed for thread %d (%s); %s", static_cast<int>(Gettid()),
        strerror(saved_errno), ok ? "such threads are sampled with SIGPROF timers" : why);
  } else {
    const uint64_t deadline = MonotonicNs() + kFallbackWaitNs;
    while (g_state.sigprof_fallback.load() == kFallbackDeciding && MonotonicNs() < deadline) {
      const timespec pause{0, 100000};  // 100 us
      nanosleep(&pause, nullptr);
    }
  }
  return g_state.sigprof_fallback.load() == kFallbackOk && sampler::SigprofArmSelf();
}

void ArmSelf(pid_t tid) {
  bool perf_switch = false;
  if (g_state.mode == Mode::kPerf) {
    if (sampler::PerfAdoptThread(tid) || sampler::PerfArmThread(tid, true)) {
      perf_switch = sampler::PerfSelfHasSwitch();
    } else if (!sampler::SigprofAdoptThread(tid)) {
      SigprofFallbackForThread();
    }
  } else if (g_state.mode == Mode::kSigprof) {
    if (!sampler::SigprofAdoptThread(tid)) sampler::SigprofArmSelf();
  }
  sampler::SetThreadOffCpuHooks(g_state.offcpu && !perf_switch && !g_state.shutdown.load());
}

void OnThreadStart(ThreadState* ts) {
  if (g_state.shutdown.load(std::memory_order_relaxed)) return;
  ArmSelf(ts ? ts->tid : Gettid());
}

void OnThreadExit(ThreadState*) {
  sampler::SetThreadOffCpuHooks(false);
  sampler::PerfDisarmSelf();
  sampler::SigprofDisarmSelf();
}

// flightrec's own threads are named "flightrec-*" (recorder_thread.h).
bool IsRecorderTid(pid_t tid) {
  char path[64], comm[32] = {};
  snprintf(path, sizeof(path), "/proc/self/task/%d/comm", static_cast<int>(tid));
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const ssize_t n = read(fd, comm, sizeof(comm) - 1);
  close(fd);
  return n > 0 && strncmp(comm, "flightrec-", 10) == 0;
}

// Threads that exist before init (started by other libraries' constructors)
// are armed from here; they adopt their slot if they later register.
void ArmOtherThreads() {
  const int fd = open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
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
      if (g_state.mode == Mode::kPerf) sampler::PerfArmThread(tid, false);
      else if (g_state.mode == Mode::kSigprof) sampler::SigprofArmThread(tid);
    }
  }
  close(fd);
}

}  // namespace

void SamplerInit(const Config& cfg) {
  SamplerState& s = g_state;
  s.mode = Mode::kOff;
  if (cfg.sampler == SamplerMode::kOff) {
    Log(LogLevel::kInfo, "sampler: off (FLIGHTREC_SAMPLER=off)");
    return;
  }
  s.auto_mode = cfg.sampler == SamplerMode::kAuto;
  s.offcpu = cfg.offcpu;
  sampler::g_offcpu_min_ns = cfg.offcpu_min_us * 1000;
  s.sigprof_opts.hz = cfg.cpu_hz ? cfg.cpu_hz : 99;
  s.sigprof_opts.stack_bytes = static_cast<uint32_t>(cfg.stack_copy_bytes & ~uint64_t{7});
  sampler::InitLocalStackCapture();
  sampler::RegisterSampleEvents();
  sampler::PrepareSamplerWakeups();  // before the first thread is armed

  const char* offcpu_source = "none";
  if (cfg.sampler == SamplerMode::kAuto || cfg.sampler == SamplerMode::kPerf) {
    sampler::PerfOptions po;
    po.hz = s.sigprof_opts.hz;
    po.stack_bytes = s.sigprof_opts.stack_bytes;
    po.offcpu = cfg.offcpu;
    po.offcpu_min_ns = sampler::g_offcpu_min_ns;
    const sampler::PerfProbeResult probe = sampler::PerfProbe(po);
    if (probe.cpu_ok && sampler::PerfConfigure(po, probe.hardware, probe.kernel, probe.switch_ok)) {
      s.mode = Mode::kPerf;
      if (cfg.offcpu) {
        offcpu_source = probe.switch_ok ? "context switches" : "blocking calls";
        if (!probe.switch_ok)
          Log(LogLevel::kInfo,
              "context-switch sampling refused (%s; needs perf_event_paranoid <= 1 or CAP_PERFMON); "
              "off-CPU from interposed blocking calls",
              strerror(probe.switch_errno));
      }
      Log(LogLevel::kInfo, "sampler: perf (%s of %s time, %llu Hz, %u-byte stacks, off-CPU: %s)",
          probe.hardware ? "cycles" : "cpu-clock", probe.kernel ? "user+kernel" : "user",
          static_cast<unsigned long long>(po.hz), po.stack_bytes, offcpu_source);
    } else if (cfg.sampler == SamplerMode::kPerf) {
      Log(LogLevel::kWarn, "perf_event_open refused (%s); CPU sampling off (FLIGHTREC_SAMPLER=perf)",
          strerror(probe.cpu_errno));
      return;
    } else {
      Log(LogLevel::kWarn, "perf_event_open refused (%s); falling back to SIGPROF sampling",
          strerror(probe.cpu_errno));
    }
  }
  if (s.mode == Mode::kOff) {
    const char* why = "";
    if (!sampler::SigprofInstall(s.sigprof_opts, &why)) {
      Log(LogLevel::kWarn, "SIGPROF sampling unavailable: %s; CPU sampling off", why);
      return;
    }
    s.mode = Mode::kSigprof;
    s.sigprof_fallback.store(kFallbackOk);
    offcpu_source = cfg.offcpu ? "blocking calls" : "none";
    Log(LogLevel::kInfo, "sampler: sigprof (%llu Hz of thread CPU time, %u-byte stacks, off-CPU: %s)",
        static_cast<unsigned long long>(s.sigprof_opts.hz), s.sigprof_opts.stack_bytes, offcpu_source);
  }
  // A perf process may still fall back to SIGPROF per thread, and any mode
  // may use the blocking-call hooks: register both.
  sampler::RegisterSigprofFlushSource();
  sampler::RegisterOffCpuDecoding();
  AddThreadObserver(OnThreadStart, OnThreadExit);
  ArmSelf(Gettid());
  ArmOtherThreads();  // before our own thread exists: it must not be armed
  if (!sampler::StartSamplerThread(cfg.flush_ms)) {
    SamplerShutdown();
    s.mode = Mode::kOff;
  }
}

const char* SamplerModeName() {
  switch (g_state.mode) {
    case Mode::kPerf: return "perf";
    case Mode::kSigprof: return "sigprof";
    default: return "off";
  }
}

void SamplerAtFork() {
  // The parent's symbolizer may have been mid-update on its flush thread,
  // which does not exist here: abandon it (leaked) and start afresh. It also
  // serves allocation stacks, so this holds with sampling off too.
  g_symbolizer.store(nullptr, std::memory_order_release);
  if (g_state.mode == Mode::kOff) return;
  sampler::PerfAtForkChild();
  sampler::SigprofAtForkChild();
  sampler::ResetSampleQueueAfterFork();
  sampler::RestartSamplerThreadInChild();
  if (!g_state.shutdown.load()) ArmSelf(Gettid());
}

void SamplerShutdown() {
  // The final drain must not start loading debug info (see SetExitMode).
  if (sampler::Symbolizer* sym = g_symbolizer.load(std::memory_order_acquire)) sym->SetExitMode(true);
  if (g_state.mode == Mode::kOff) return;
  g_state.shutdown.store(true);
  sampler::SetThreadOffCpuHooks(false);
  sampler::PerfShutdown();
  sampler::SigprofShutdown();
  // The last collection queues what the rings still hold; the flush
  // thread's final drain (next) writes it.
  switch (sampler::StopSamplerThread(MonotonicNs() + kStopBudgetNs)) {
    case sampler::StopOutcome::kNotRunning: break;
    case sampler::StopOutcome::kTookOverIdle:
      Log(LogLevel::kDebug, "sampler stopped: thread idle, last collection on the exiting thread (no wait)");
      break;
    case sampler::StopOutcome::kWaitedForCollection:
      Log(LogLevel::kDebug, "sampler stopped: waited for the collection in progress");
      break;
    case sampler::StopOutcome::kTimedOut: {
      // Samples still in the rings it is not reading are counted, not written.
      const uint64_t lost = sampler::PerfDiscardUnread(MonotonicNs());
      Log(LogLevel::kWarn,
          "sampler thread did not finish its collection within %llu ms of exit; %llu samples left in perf "
          "rings counted as sampler.lost",
          static_cast<unsigned long long>(kStopBudgetNs / 1000000ull), static_cast<unsigned long long>(lost));
      break;
    }
  }
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
  if (g_state.mode == Mode::kOff) return;
  SigprofBeforeExec();
}

void SamplerAfterExecFailed() {
  if (g_state.mode == Mode::kOff) return;
  SigprofAfterExecFailed();
}

}  // namespace sampler
}  // namespace flightrec
