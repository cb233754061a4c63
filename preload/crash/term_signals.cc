// Termination signals: see term_signals.h.
//
// Signal safety: the handler uses the ring push (RecordWriter without
// registration), atomics, nanosleep while the flush thread seals
// (RequestCrashFlushAndWait), sigaction and raise.
#include "preload/crash/term_signals.h"
#include "preload/runtime/trigger.h"

#include <dlfcn.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "preload/runtime/clock.h"
#include "preload/flush/flush_registry.h"
#include "preload/flush/flush_thread.h"
#include "preload/threads/record_kinds.h"
#include "preload/runtime/runtime_state.h"
#include "preload/threads/thread_registry.h"

namespace flightrec {
namespace {

constexpr int kSignals[] = {SIGHUP,  SIGINT,  SIGQUIT, SIGTERM, SIGUSR1,  SIGUSR2,
                            SIGPIPE, SIGALRM, SIGXCPU, SIGXFSZ, SIGVTALRM};
// Dying is what the signal asks for: the seal may delay it this long at most.
constexpr uint64_t kSealBudgetNs = 1000ull * 1000000ull;

using SigactionFn = int (*)(int, const struct sigaction*, struct sigaction*);
SigactionFn g_real_sigaction = nullptr;

// Held: our handler is installed in the kernel for the signal.
std::atomic<bool> g_held[NSIG];
// The disposition the application set (always SIG_DFL while held): what
// sigaction reports back and what goes back in before the signal is raised.
struct sigaction g_app_action[NSIG];
// Our handler's sigaction, once TermSignalsInit has set it up.
struct sigaction g_ours;
std::atomic<bool> g_ready{false};
// One termination at a time: a second signal while the first is being
// sealed goes straight to its default action.
std::atomic<int> g_terminating{0};
uint32_t type_killed = 0;

struct KilledRecord {
  uint64_t time_ns;
  int32_t tid;
  int32_t signo;
  int32_t code;        // si_code: SI_USER (kill), SI_TKILL, SI_QUEUE, SI_KERNEL, ...
  int32_t sender_pid;  // for a signal someone sent (si_code <= 0), else 0
  uint32_t sender_uid;
  uint32_t pad;
};

const char* TermSignalName(int sig) {
  switch (sig) {
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    case SIGUSR2: return "SIGUSR2";
    case SIGPIPE: return "SIGPIPE";
    case SIGALRM: return "SIGALRM";
    case SIGXCPU: return "SIGXCPU";
    case SIGXFSZ: return "SIGXFSZ";
    case SIGVTALRM: return "SIGVTALRM";
    default: return "signal";
  }
}

void RecordKilled(ThreadState* ts, int sig, const siginfo_t* si) {
  RecordWriter w(ts, kRecProcessKilled, sizeof(KilledRecord), IfUnregistered::kSkip);
  if (!w.ok()) return;
  auto* r = static_cast<KilledRecord*>(w.data());
  memset(r, 0, sizeof(*r));
  r->time_ns = MonotonicNs();
  r->tid = ts->tid;
  r->signo = sig;
  if (si) {
    r->code = si->si_code;
    if (si->si_code <= 0) {  // sent by a process (kill, tgkill, sigqueue), not raised by the kernel
      r->sender_pid = si->si_pid;
      r->sender_uid = si->si_uid;
    }
  }
}

// Gives the signal its default action: SIG_DFL back in the kernel, and the
// signal raised again. It is blocked while this handler runs, so it stays
// pending and ends the process as the handler returns.
void DefaultAction(int sig) {
  g_held[sig].store(false, std::memory_order_relaxed);
  if (g_real_sigaction) g_real_sigaction(sig, &g_app_action[sig], nullptr);
  raise(sig);
}

void TermSignalHandler(int sig, siginfo_t* si, void*) {
  const int saved_errno = errno;
  if (InVforkChild()) {
    // A vfork child: it shares our memory (so must change none of it) but
    // has its own dispositions. Default action, in the child only.
    struct sigaction dfl;
    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    if (g_real_sigaction) g_real_sigaction(sig, &dfl, nullptr);
    raise(sig);
    errno = saved_errno;
    return;
  }
  if (!g_held[sig].load(std::memory_order_acquire)) {
    // The application put its own disposition in while this was on its way:
    // raise again for that one. Were ours still the kernel's (it should not
    // be), put the default it stands for back first, or raising would bring
    // the signal straight back here, for ever.
    struct sigaction cur;
    if (g_real_sigaction && g_real_sigaction(sig, nullptr, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) &&
        cur.sa_sigaction == TermSignalHandler)
      g_real_sigaction(sig, &g_app_action[sig], nullptr);
    raise(sig);
    errno = saved_errno;
    return;
  }
  // Not ours to record: a thread the recorder never met, or the recorder
  // stopped. The signal still takes its course.
  ThreadState* ts = CurrentThreadState(IfUnregistered::kSkip);
  const bool ours = ts && RuntimeRecording() && !(t_thread_flags & kThreadFlagRecorder);
  if (ours && g_terminating.exchange(1) == 0) {
    RecordKilled(ts, sig, si);
    // Death by signal is an incident, an orderly stop request is not.
    if (sig != SIGTERM && sig != SIGINT) RequestTrigger(TriggerReason::kFatalSignal, static_cast<uint64_t>(sig));
    RequestCrashFlushAndWait(MonotonicNs() + kSealBudgetNs);
  }
  DefaultAction(sig);
  errno = saved_errno;
}

void DecodeKilled(FlushContext& ctx, const RecordHeader& h, const void* payload) {
  if (h.size < sizeof(RecordHeader) + sizeof(KilledRecord) || !type_killed) return;
  const auto* r = static_cast<const KilledRecord*>(payload);
  using format::Value;
  const Value v[] = {Value::U(r->time_ns),
                     Value::U(static_cast<uint64_t>(r->tid)),
                     Value::U(static_cast<uint64_t>(r->signo)),
                     Value::Str(TermSignalName(r->signo)),
                     Value::S(r->code),
                     Value::U(static_cast<uint64_t>(r->sender_pid)),
                     Value::U(r->sender_uid)};
  ctx.writer->Append(type_killed, v, 7);
}

bool IsDefault(const struct sigaction& a) { return !(a.sa_flags & SA_SIGINFO) && a.sa_handler == SIG_DFL; }

}  // namespace

bool IsTermSignal(int sig) {
  for (int s : kSignals)
    if (s == sig) return true;
  return false;
}

void TermSignalsInit(const Config& config) {
  if (!config.crash || getpid() == 1) return;
  g_real_sigaction = reinterpret_cast<SigactionFn>(dlsym(RTLD_NEXT, "sigaction"));
  if (!g_real_sigaction) return;
  using format::FieldType;
  type_killed = DefineEventType({"process.killed",
                                 {{"time", FieldType::kTime, "ns"},
                                  {"tid", FieldType::kUInt, ""},
                                  {"signal", FieldType::kUInt, ""},
                                  {"signal_name", FieldType::kString, ""},
                                  {"code", FieldType::kSInt, ""},
                                  {"sender_pid", FieldType::kUInt, ""},
                                  {"sender_uid", FieldType::kUInt, ""}}});
  RegisterRecordKind(kRecProcessKilled, "process.killed", DecodeKilled);
  memset(&g_ours, 0, sizeof(g_ours));
  g_ours.sa_sigaction = TermSignalHandler;
  g_ours.sa_flags = SA_SIGINFO | SA_ONSTACK;
  // While one is sealed, the others wait (then find SIG_DFL or ours, which
  // hands them on).
  sigemptyset(&g_ours.sa_mask);
  for (int sig : kSignals) sigaddset(&g_ours.sa_mask, sig);
  g_ready.store(true, std::memory_order_release);
  for (int sig : kSignals) {
    struct sigaction cur;
    if (g_real_sigaction(sig, nullptr, &cur) != 0 || !IsDefault(cur)) continue;  // a handler, or ignored
    g_app_action[sig] = cur;
    g_held[sig].store(true, std::memory_order_release);
    if (g_real_sigaction(sig, &g_ours, nullptr) != 0) g_held[sig].store(false, std::memory_order_release);
  }
}

bool TermSigaction(int sig, const struct sigaction* act, struct sigaction* old, int* ret) {
  if (sig <= 0 || sig >= NSIG || !IsTermSignal(sig)) return false;
  if (g_real_sigaction && InVforkChild()) {
    // The child's own table only: what it sets is set for real (it is about
    // to exec or exit; nothing to hold), and the parent's record of what
    // its application set stays as it was. A signal we hold still reads
    // back as what the application set.
    struct sigaction prev;
    *ret = g_real_sigaction(sig, act, &prev);
    if (*ret == 0 && old) {
      const bool ours = (prev.sa_flags & SA_SIGINFO) && prev.sa_sigaction == TermSignalHandler;
      *old = ours ? g_app_action[sig] : prev;
    }
    return true;
  }
  if (!g_held[sig].load(std::memory_order_acquire)) {
    // The application puts the default back after a handler of its own (or
    // a library's, for a while): hold the signal again from here.
    if (!act || !IsDefault(*act) || !g_ready.load(std::memory_order_acquire)) return false;
    *ret = g_real_sigaction(sig, &g_ours, old);
    if (*ret != 0) return true;
    struct sigaction a = *act;
    sigdelset(&a.sa_mask, SIGKILL);
    sigdelset(&a.sa_mask, SIGSTOP);
    g_app_action[sig] = a;
    g_held[sig].store(true, std::memory_order_release);
    return true;
  }
  if (old) *old = g_app_action[sig];
  *ret = 0;
  if (!act) return true;
  if (IsDefault(*act)) {  // still the default: keep holding it
    struct sigaction a = *act;
    sigdelset(&a.sa_mask, SIGKILL);
    sigdelset(&a.sa_mask, SIGSTOP);
    g_app_action[sig] = a;
    return true;
  }
  // A handler or SIG_IGN: theirs from now on. Installed before we let go, so
  // a signal arriving in between finds one of the two.
  *ret = g_real_sigaction(sig, act, nullptr);
  if (*ret == 0) g_held[sig].store(false, std::memory_order_release);
  return true;
}

}  // namespace flightrec
