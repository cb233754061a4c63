// Crash capture: see crash_handler.h.
//
// Signal safety: the handler only uses async-signal-safe operations: the
// ring push (RecordWriter without registration), process_vm_readv to copy
// the stack without faulting, atomics, nanosleep while the flush thread (an
// ordinary thread, not interrupted) does the heavy work, sigaction and raise.
// A second fatal signal while handling one (in any thread, or a crash inside
// the recorder itself) skips straight to the original disposition, so the
// handler can never loop.
//
// Application handlers: the application's own handlers for these signals,
// installed before or after us, are kept behind ours (our sigaction hook
// records them instead of replacing ours, and reports them back as the
// current disposition), and run after the crash is recorded and sealed, with
// the mask and SA_RESETHAND/SA_NODEFER semantics they asked for, and on the
// stack the kernel would have given them: the interrupted thread's own, not
// our small alternate stack (AppHandlerStackTop). A handler
// that exits (_exit, exit) leaves without the ordinary shutdown
// (CrashExitFromHandler). A handler that returns with itself still installed
// recovered the fault (a JVM's implicit null checks): a crash.recovered
// event follows the crash, recording resumes, and from then on that
// signal goes to the application's handler first (g_app_recovers). So does
// one that leaves by siglongjmp; that is only visible later, when the next
// crash signal or exit on the thread finds its sp outside the handler's
// stack range (ForgetChainLeftAt).
//
// Stack overflow: a thread that overflows its stack has no stack left to run
// a handler on, so the kernel would kill the process without us seeing it.
// Each recorded thread therefore gets an alternate signal stack (sigaltstack)
// from its slot, unless the application already set one (then theirs is kept
// and used). The handler is installed SA_ONSTACK.
#include "preload/crash/crash_handler.h"
#include "preload/runtime/trigger.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <ucontext.h>
#include <unistd.h>

#include <dlfcn.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <new>

#include "preload/crash/call_on_stack.h"
#include "preload/fds/validation_pipe.h"
#include "preload/runtime/seccomp_state.h"
#include "preload/runtime/clock.h"
#include "preload/crash/crash_freeze.h"
#include "preload/flush/flush_registry.h"
#include "preload/flush/flush_thread.h"
#include "preload/threads/record_kinds.h"
#include "preload/threads/thread_registry.h"
#include "preload/stacks/stack_unwinder.h"

namespace flightrec {
namespace {

constexpr int kSignals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
constexpr uint64_t kCrashFlushBudgetNs = 1500ull * 1000000ull;
// The handler itself needs little, but it chains to handlers the application
// installed before us, which expect an ordinary thread's room.
constexpr size_t kAltStackBytes = 64 * 1024;
constexpr size_t kGuardBytes = 4096;

struct CrashRecord {
  uint64_t time_ns;
  uint64_t fault_addr;
  int32_t tid;
  int32_t signo;
  int32_t code;
  uint32_t stack_len;   // bytes of stack copied after this struct
  uint64_t stack_addr;  // address the copy starts at (the interrupted sp)
  stacks::RegisterSet regs;
  // followed by stack_len bytes
};

// The application's disposition of each crash signal (what it would have
// without us). Written by the sigaction hook, read by the handler.
struct sigaction g_previous[NSIG];
std::atomic<bool> g_owned[NSIG];  // our handler is installed for the signal
std::atomic<int> g_in_crash{0};
using SigactionFn = int (*)(int, const struct sigaction*, struct sigaction*);
SigactionFn g_real_sigaction = nullptr;  // libc's: ours is the interposer

// Set once the application's handler returned from a crash signal: the
// application recovers from faults (a JVM). From then on its handler runs
// first for that signal, and a crash is recorded only if the signal turns out
// fatal (an exit from the handler, or a fatal signal inside it).
std::atomic<bool> g_app_recovers[NSIG];

// The application crash-signal handler this thread is running (innermost),
// for an exit or a fatal signal from inside it.
struct Chained {
  int sig;
  siginfo_t si;
  void* uc;
  bool recorded;  // the crash was recorded before the handler ran
  // Where code running inside the handler has its sp: [live_lo, live_hi).
  // An sp outside means the handler is no longer running: it left by
  // siglongjmp (ForgetChainLeftAt).
  uintptr_t live_lo;
  uintptr_t live_hi;
};
__thread int t_chain_depth __attribute__((tls_model("initial-exec"))) = 0;
__thread Chained t_chain __attribute__((tls_model("initial-exec")));
uint32_t type_crash_recovered = 0;

struct RecoveredRecord {
  uint64_t time_ns;
  int32_t tid;
  int32_t signo;
};
uint32_t g_stack_copy_max = 0;
uint32_t type_crash = 0;

// The alternate stack this thread runs on because we installed it (nullptr if
// none or the application's own). After fork the child's thread still has its
// parent-side slot's stack installed; on_start sees it here and switches to
// the stack of the slot it claims in the child.
__thread void* t_our_altstack __attribute__((tls_model("initial-exec"))) = nullptr;

// Maps [guard | stack] once per slot; the guard page turns an overflow of the
// alternate stack itself into a fault the kernel handles (it kills), never a
// silent write into the next mapping.
void* SlotAltStack(ThreadState* ts) {
  if (ts->crash_altstack) return ts->crash_altstack;
  void* mem = mmap(nullptr, kGuardBytes + kAltStackBytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mem == MAP_FAILED) return nullptr;
  mprotect(mem, kGuardBytes, PROT_NONE);
  ts->crash_altstack = static_cast<uint8_t*>(mem) + kGuardBytes;
  return ts->crash_altstack;
}

// Thread observer, on the starting thread: give it an alternate stack unless
// it has one that is not ours.
void InstallAltStack(ThreadState* ts) {
  if (!ts) return;
  stack_t cur;
  if (sigaltstack(nullptr, &cur) != 0) return;
  const bool free_to_set = (cur.ss_flags & SS_DISABLE) || (t_our_altstack && cur.ss_sp == t_our_altstack);
  if (!free_to_set || (cur.ss_flags & SS_ONSTACK)) return;
  void* mem = SlotAltStack(ts);
  if (!mem) return;
  stack_t ss;
  ss.ss_sp = mem;
  ss.ss_size = kAltStackBytes;
  ss.ss_flags = 0;
  if (sigaltstack(&ss, nullptr) == 0) t_our_altstack = mem;
}

// Switches the calling thread's alternate stack off (not allowed while running
// on it); `was`, if given, receives the one that was set.
bool SwitchOffAltStack(stack_t* was) {
  stack_t off;
  memset(&off, 0, sizeof(off));
  off.ss_flags = SS_DISABLE;
  return sigaltstack(&off, was) == 0;
}

// Thread observer, on the exiting thread before its slot is retired: the slot
// (and its stack) may go to another thread while this one finishes exiting.
void RemoveAltStack(ThreadState*) {
  if (!t_our_altstack) return;
  stack_t cur;
  if (sigaltstack(nullptr, &cur) == 0 && cur.ss_sp == t_our_altstack && !(cur.ss_flags & SS_ONSTACK))
    SwitchOffAltStack(nullptr);
  t_our_altstack = nullptr;
}

const char* SignalName(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGILL: return "SIGILL";
    case SIGFPE: return "SIGFPE";
    case SIGABRT: return "SIGABRT";
    default: return "signal";
  }
}

// A copy of live stack bytes known to be readable: byte by byte (no libc
// call in a crash handler), and not instrumented (ASan's redzones on the
// stack are the program's business).
__attribute__((no_sanitize("address"))) void CopyReadable(uint8_t* out, uint64_t addr, size_t len) {
  const volatile uint8_t* src = reinterpret_cast<const volatile uint8_t*>(addr);
  for (size_t i = 0; i < len; ++i) out[i] = src[i];
}

// Copies as much of [sp, sp + max) as is readable (the stack may end sooner).
uint32_t CopyStack(uint64_t sp, uint8_t* out, uint32_t max) {
  // Under a seccomp filter process_vm_readv may kill the process: probe page
  // by page (preload/runtime/seccomp_state.h) and copy what is readable.
  if (SeccompFiltered()) {
    const size_t readable = ReadablePrefix(static_cast<uintptr_t>(sp), max);
    CopyReadable(out, sp, readable);
    return static_cast<uint32_t>(readable);
  }
  for (uint32_t len = max; len >= 256; len /= 2) {
    iovec local{out, len};
    iovec remote{reinterpret_cast<void*>(sp), len};
    const ssize_t n = syscall(SYS_process_vm_readv, getpid(), &local, 1, &remote, 1, 0);
    if (n > 0) return static_cast<uint32_t>(n);
  }
  return 0;
}

void RecordCrash(int sig, siginfo_t* si, void* uc_void) {
  ThreadState* ts = CurrentThreadState(IfUnregistered::kSkip);
  if (!ts) return;
  const uint32_t max = g_stack_copy_max;
  RecordWriter w(kRecCrash, static_cast<uint32_t>(sizeof(CrashRecord)) + max, IfUnregistered::kSkip);
  if (!w.ok()) return;
  auto* r = new (w.data()) CrashRecord();
  r->time_ns = MonotonicNs();
  r->fault_addr = reinterpret_cast<uint64_t>(si ? si->si_addr : nullptr);
  r->tid = ts->tid;
  r->signo = sig;
  r->code = si ? si->si_code : 0;
  if (uc_void) {
    stacks::RegisterSetFromUcontext(static_cast<const ucontext_t*>(uc_void), &r->regs);
    r->stack_addr = r->regs.sp();
    r->stack_len = CopyStack(r->stack_addr, reinterpret_cast<uint8_t*>(r + 1), max);
  }
}

bool IsAppHandler(const struct sigaction& a) {
  if (a.sa_flags & SA_SIGINFO) return a.sa_sigaction != nullptr;
  return a.sa_handler != SIG_DFL && a.sa_handler != SIG_IGN;
}

struct AppHandlerCall {
  int sig;
  siginfo_t* si;
  void* uc;
  const struct sigaction* action;
  stack_t ours;         // RunOnThreadStack: our alternate stack, switched off
  bool parked = false;  // ... and to be switched back on once back on it
};

void RunAppHandler(void* p) {
  const auto* c = static_cast<AppHandlerCall*>(p);
  if (c->action->sa_flags & SA_SIGINFO) c->action->sa_sigaction(c->sig, c->si, c->uc);
  else c->action->sa_handler(c->sig);
}

// On the interrupted thread's stack, off ours: while the application's
// handler runs there, a nested signal must not be delivered to the top of our
// alternate stack, where this handler's frames and the kernel's frame of the
// first signal still live. So ours is switched off meanwhile (allowed now
// that we no longer run on it) and back on after. A handler that leaves by
// siglongjmp leaves it off: that thread's later faults run on its own stack,
// as without us, and a later overflow of it goes unrecorded.
// It is switched back on by CallAppHandler once back on it, never from here:
// a SIGPROF (SA_ONSTACK) arriving between a re-enable here and the return
// would be delivered at the top of our alternate stack, over the frames this
// handler returns to (1 run in ~70 of crash_test returns died of SIGSEGV).
void RunOnThreadStack(void* p) {
  auto* c = static_cast<AppHandlerCall*>(p);
  c->parked = SwitchOffAltStack(&c->ours);
  RunAppHandler(p);
}

// Where the application's handler should run: 0 for "here", or the top of
// the interrupted thread's stack. The kernel runs a handler on the
// interrupted stack unless it asked for SA_ONSTACK and an alternate stack is
// set; ours is set (and our handler asks for it) so that stack overflows can
// be recorded, which must not change where the application's handler runs.
// Stay here when: not on our alternate stack (theirs, or none); the
// interrupted code already ran on it (a handler interrupted); or that
// stack is what overflowed (the fault is next to its sp) — the kernel could
// not have run the handler there at all.
// With only our alternate stack set, SA_ONSTACK or not, the kernel would have
// used the thread's stack: the handler's flags do not matter here.
uintptr_t AppHandlerStackTop(int sig, const siginfo_t* si, const void* uc) {
  constexpr uintptr_t kOverflowReach = 64 * 1024;
  stack_t cur;
  if (!uc || !t_our_altstack || sigaltstack(nullptr, &cur) != 0 || !(cur.ss_flags & SS_ONSTACK) ||
      cur.ss_sp != t_our_altstack)
    return 0;
  const auto sp = static_cast<uintptr_t>(static_cast<const ucontext_t*>(uc)->uc_mcontext.gregs[REG_RSP]);
  const auto alt_lo = reinterpret_cast<uintptr_t>(cur.ss_sp);
  if (sp >= alt_lo && sp < alt_lo + cur.ss_size) return 0;
  if ((sig == SIGSEGV || sig == SIGBUS) && si) {
    const auto addr = reinterpret_cast<uintptr_t>(si->si_addr);
    if (addr + kOverflowReach >= sp && addr <= sp + kOverflowReach) return 0;
  }
  return HandlerStackTopBelow(sp);
}

enum class Recorded : bool { kNo = false, kYes = true };  // the crash, before the handler runs

// Runs the application's handler as the kernel would have: its sa_mask (and
// the signal itself unless SA_NODEFER) blocked, SA_RESETHAND applied first.
void CallAppHandler(int sig, siginfo_t* si, void* uc, const struct sigaction& a, Recorded crash) {
  const bool recorded = crash == Recorded::kYes;
  if (a.sa_flags & SA_RESETHAND) {
    memset(&g_previous[sig], 0, sizeof(g_previous[sig]));
    g_previous[sig].sa_handler = SIG_DFL;
  }
  sigset_t block = a.sa_mask, saved;
  if (a.sa_flags & SA_NODEFER) sigdelset(&block, sig);
  else sigaddset(&block, sig);
  pthread_sigmask(SIG_BLOCK, &block, &saved);
  if (a.sa_flags & SA_NODEFER) {
    sigset_t un;
    sigemptyset(&un);
    sigaddset(&un, sig);
    pthread_sigmask(SIG_UNBLOCK, &un, nullptr);
  }
  const Chained outer = t_chain;
  const uintptr_t top = AppHandlerStackTop(sig, si, uc);
  uintptr_t live_lo = 0, live_hi = top;
  if (!top) {  // runs here: below this frame, and on the alternate stack if that is where we are
    live_hi = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
    stack_t cur;
    if (sigaltstack(nullptr, &cur) == 0 && (cur.ss_flags & SS_ONSTACK))
      live_lo = reinterpret_cast<uintptr_t>(cur.ss_sp);
  }
  t_chain = Chained{sig, si ? *si : siginfo_t{}, uc, recorded, live_lo, live_hi};
  t_chain_depth++;
  AppHandlerCall call{sig, si, uc, &a, stack_t{}, false};
  if (top) {
    CallOnStack(RunOnThreadStack, &call, top);
    // Back on our alternate stack, which is off: switching it on now (allowed,
    // the kernel does not count a disabled stack as the one we run on) makes
    // the kernel see us on it, so a nested signal lands below this frame.
    if (call.parked) sigaltstack(&call.ours, nullptr);
  } else {
    RunAppHandler(&call);
  }
  t_chain_depth--;
  t_chain = outer;
  pthread_sigmask(SIG_SETMASK, &saved, nullptr);
}

// No application handler: default or ignored.
void PassOn(int sig, siginfo_t* si) {
  const struct sigaction prev = g_previous[sig];
  // Default or ignored: put it back exactly and let the signal take its
  // course. A fault re-executes and re-faults on return; a signal that was
  // sent (kill, raise, abort) is raised again and stays pending until return.
  g_owned[sig].store(false, std::memory_order_relaxed);
  if (g_real_sigaction) g_real_sigaction(sig, &prev, nullptr);
  if (!si || si->si_code <= 0 || sig == SIGABRT) raise(sig);
}

void PushRecovered(int sig) {
  ThreadState* ts = CurrentThreadState(IfUnregistered::kSkip);
  if (!ts) return;
  RecordWriter w(kRecCrashRecovered, sizeof(RecoveredRecord), IfUnregistered::kSkip);
  if (!w.ok()) return;
  auto* r = static_cast<RecoveredRecord*>(w.data());
  r->time_ns = MonotonicNs();
  r->tid = ts->tid;
  r->signo = sig;
}

// The program went on after a crash signal: its handler returned, or left by
// siglongjmp. Say so, let the next crash be recorded, resume recording.
// Order matters: the record is in the ring and the flush thread told to
// resume before it is let go; a paused flush thread that ran first would
// drain the record while paused, i.e. discard it (seen under TSan).
void MarkRecovered(int sig) {
  PushRecovered(sig);
  g_app_recovers[sig].store(true, std::memory_order_relaxed);
  g_in_crash.store(0, std::memory_order_release);
  ResumeAfterCrash();
  CrashFreezeEnd();
}

// The application's handler this thread was in is no longer running when sp
// is outside its stack range: it left by siglongjmp (a program that probes
// memory, a GC's write barrier, a JVM-like null check) and the program went
// on. Forget the chain, so a later exit or fault is not taken for one from
// inside that handler; a crash recorded before it ran was recovered from.
void ForgetChainLeftAt(uintptr_t sp) {
  if (t_chain_depth == 0 || (sp >= t_chain.live_lo && sp < t_chain.live_hi)) return;
  const bool recorded = t_chain.recorded;
  const int sig = t_chain.sig;
  t_chain_depth = 0;
  t_chain = Chained{};
  if (recorded && sig != SIGABRT) MarkRecovered(sig);
}

void RecordAndSeal(int sig, siginfo_t* si, void* uc) {
  RecordCrash(sig, si, uc);
  // Keep (and ship) what led here: the flush tick below opens the incident
  // before its seal (async-signal-safe: atomics and a futex wake).
  RequestTrigger(TriggerReason::kCrash, static_cast<uint64_t>(sig));
  RequestCrashFlushAndWait(MonotonicNs() + kCrashFlushBudgetNs);
}

// A vfork child shares the parent's memory (and TLS) but has dispositions of
// its own: recording there would mark the parent as crashed, seal the
// parent's segment, leave g_in_crash set (the parent's next real crash went
// unrecorded) and hold the suspended parent up to the seal budget. The child
// changes none of our state: the program's handler runs as the kernel would
// run it, or the default action takes the child alone.
void VforkChildCrash(int sig, siginfo_t* si, void* uc) {
  const struct sigaction app = g_previous[sig];
  if (IsAppHandler(app)) {
    if (app.sa_flags & SA_SIGINFO) app.sa_sigaction(sig, si, uc);
    else app.sa_handler(sig);
    return;
  }
  struct sigaction dfl;
  memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = app.sa_handler == SIG_IGN ? SIG_IGN : SIG_DFL;
  if (g_real_sigaction) g_real_sigaction(sig, &dfl, nullptr);  // the child's own table
  if (!si || si->si_code <= 0 || sig == SIGABRT) raise(sig);   // sent: again, now default; a fault re-faults
}

void CrashSignalHandler(int sig, siginfo_t* si, void* uc) {
  const int saved_errno = errno;
  if (InVforkChild()) {
    VforkChildCrash(sig, si, uc);
    errno = saved_errno;
    return;
  }
  if (uc) ForgetChainLeftAt(static_cast<uintptr_t>(static_cast<const ucontext_t*>(uc)->uc_mcontext.gregs[REG_RSP]));
  const struct sigaction app = g_previous[sig];
  const bool app_handler = IsAppHandler(app);
  if (app_handler && g_app_recovers[sig].load(std::memory_order_relaxed)) {
    CallAppHandler(sig, si, uc, app, Recorded::kNo);  // it handles its faults; fatal ones are caught on the way out
    return;
  }
  // Record and seal first, before anything of the application's runs: its
  // crash report may fault again, scribble over memory (redis-server runs a
  // memory test) or never return. Fatal inside the handler of an earlier,
  // unrecorded crash signal: that one is the crash (its context is still on
  // this stack).
  const bool first = g_in_crash.exchange(1) == 0;
  const bool record = first && !(t_thread_flags & kThreadFlagRecorder);
  if (record) {
    if (t_chain_depth > 0 && !t_chain.recorded) RecordAndSeal(t_chain.sig, &t_chain.si, t_chain.uc);
    else RecordAndSeal(sig, si, uc);
  }
  errno = saved_errno;
  if (app_handler) {
    // Its crash report may test memory in place: our threads keep still.
    if (record) CrashFreezeBegin();
    CallAppHandler(sig, si, uc, app, record ? Recorded::kYes : Recorded::kNo);
    // It returned with its handler still in place: the application handled
    // the signal and goes on. (A handler that put the default back, or
    // SA_RESETHAND, means to die: it re-raises or re-faults; abort() kills
    // regardless.) Say so, let the next crash be recorded, resume.
    if (record && sig != SIGABRT && IsAppHandler(g_previous[sig])) MarkRecovered(sig);
    errno = saved_errno;
    return;
  }
  PassOn(sig, si);
}

void DecodeRecovered(FlushContext& ctx, const RecordHeader& h, const void* payload) {
  if (h.size < sizeof(RecordHeader) + sizeof(RecoveredRecord) || !type_crash_recovered) return;
  const auto* r = static_cast<const RecoveredRecord*>(payload);
  using format::Value;
  const Value v[] = {Value::U(r->time_ns), Value::U(static_cast<uint64_t>(r->tid)),
                     Value::U(static_cast<uint64_t>(r->signo)), Value::Str(SignalName(r->signo))};
  ctx.writer->Append(type_crash_recovered, v, 4);
}

void DecodeCrash(FlushContext& ctx, const RecordHeader& h, const void* payload) {
  if (h.size < sizeof(RecordHeader) + sizeof(CrashRecord)) return;
  const auto* r = static_cast<const CrashRecord*>(payload);
  const uint32_t avail = h.size - static_cast<uint32_t>(sizeof(RecordHeader) + sizeof(CrashRecord));
  const uint32_t len = r->stack_len <= avail ? r->stack_len : avail;
  uint64_t pcs[128];
  int n = 0;
  if (r->regs.ip() != 0)
    n = stacks::UnwindCopiedStack(stacks::UnwindRole::kFlush, r->regs, r->stack_addr,
                                  reinterpret_cast<const uint8_t*>(r + 1), len, pcs, 128);
  using format::Value;
  Value v[] = {Value::U(r->time_ns),
               Value::U(static_cast<uint64_t>(r->tid)),
               Value::U(static_cast<uint64_t>(r->signo)),
               Value::Str(SignalName(r->signo)),
               Value::S(r->code),
               Value::U(r->fault_addr),
               Value::Stack(pcs, static_cast<uint32_t>(n))};
  ctx.writer->Append(type_crash, v, 7);
}

// Our handler as the kernel should run it for `sig`, given the
// application's disposition behind it: with the application's sa_mask, so
// no signal it blocks for its handler runs while we record (which can take
// up to kCrashFlushBudgetNs), and with its SA_RESTART, so a call the signal
// interrupts is restarted or fails with EINTR as without us (the kernel
// decides that from the installed action, not from what its handler does).
bool InstallOurs(int sig, struct sigaction* previous) {
  const struct sigaction& app = g_previous[sig];
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = CrashSignalHandler;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  if (IsAppHandler(app)) {
    sa.sa_mask = app.sa_mask;
    sa.sa_flags |= app.sa_flags & SA_RESTART;
  }
  return g_real_sigaction(sig, &sa, previous) == 0;
}

}  // namespace

void CrashHandlerInit(const Config& config) {
  if (!config.crash) return;
  g_real_sigaction = reinterpret_cast<SigactionFn>(dlsym(RTLD_NEXT, "sigaction"));
  if (!g_real_sigaction) return;
  using format::FieldType;
  type_crash = DefineEventType({"crash",
                                {{"time", FieldType::kTime, "ns"},
                                 {"tid", FieldType::kUInt, ""},
                                 {"signal", FieldType::kUInt, ""},
                                 {"signal_name", FieldType::kString, ""},
                                 {"code", FieldType::kSInt, ""},
                                 {"fault_addr", FieldType::kUInt, ""},
                                 {"stack", FieldType::kStack, ""}}});
  RegisterRecordKind(kRecCrash, "crash", DecodeCrash);
  type_crash_recovered = DefineEventType({"crash.recovered",
                                          {{"time", FieldType::kTime, "ns"},
                                           {"tid", FieldType::kUInt, ""},
                                           {"signal", FieldType::kUInt, ""},
                                           {"signal_name", FieldType::kString, ""}}});
  RegisterRecordKind(kRecCrashRecovered, "crash.recovered", DecodeRecovered);
  uint64_t max = config.stack_copy_bytes;
  const uint64_t ring_room = config.ring_bytes / 2 - sizeof(CrashRecord) - 64;
  if (max > ring_room) max = ring_room;
  g_stack_copy_max = static_cast<uint32_t>(max);
  AddThreadObserver(InstallAltStack, RemoveAltStack);
  for (int sig : kSignals) {
    // Keep whatever the application (or a library loaded before us) had.
    if (g_real_sigaction(sig, nullptr, &g_previous[sig]) != 0) continue;
    if (InstallOurs(sig, nullptr)) g_owned[sig].store(true, std::memory_order_release);
  }
}

bool CrashSigaction(int sig, const struct sigaction* act, struct sigaction* old) {
  if (sig <= 0 || sig >= NSIG || !g_owned[sig].load(std::memory_order_acquire)) return false;
  if (old) *old = g_previous[sig];
  if (act) {
    struct sigaction a = *act;
    sigdelset(&a.sa_mask, SIGKILL);  // what the kernel would keep of the mask
    sigdelset(&a.sa_mask, SIGSTOP);
    g_previous[sig] = a;
    InstallOurs(sig, nullptr);  // its mask and SA_RESTART now apply to ours
  }
  return true;
}

bool CrashExitFromHandler() {
  ForgetChainLeftAt(reinterpret_cast<uintptr_t>(__builtin_frame_address(0)));
  if (t_chain_depth == 0) return false;
  // Inside the application's handler for a crash signal, leaving: the crash
  // was fatal. Record it unless that was done before the handler ran; only
  // async-signal-safe work from here.
  if (!t_chain.recorded && g_in_crash.exchange(1) == 0 && !(t_thread_flags & kThreadFlagRecorder))
    RecordAndSeal(t_chain.sig, &t_chain.si, t_chain.uc);
  return true;
}

}  // namespace flightrec
