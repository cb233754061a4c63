// _exit / _Exit hooks: a process that leaves through _exit (forked children,
// daemons) skips atexit handlers, so the recorder would lose what it has not
// yet written. The hook asks the flush thread to seal the trace (bounded:
// the calling thread only waits, flush_thread.h) and then really exits.
// A vfork child sharing our memory is recognised by its pid and left alone.
//
// The exit hook: several threads calling exit() at once each run what is
// left of the atexit list, and the first to reach glibc's _exit ends the
// process while another may still be in our handler waiting for the seal.
// A thread that calls exit() while another one is already exiting waits for
// that one's seal (bounded) before it goes on.
#include <dlfcn.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace flightrec {
void ShutdownBeforeExit();
void WaitForAnotherExit();
}  // namespace flightrec

namespace {
using ExitFn = void (*)(int);

// Resolved at load time: a vfork child must not call into the dynamic loader.
ExitFn g_real_exit = nullptr;
ExitFn g_real_Exit = nullptr;
ExitFn g_real_exit_fn = nullptr;  // exit(3)
__attribute__((constructor)) void ResolveExitFunctions() {
  g_real_exit = reinterpret_cast<ExitFn>(dlsym(RTLD_NEXT, "_exit"));
  g_real_Exit = reinterpret_cast<ExitFn>(dlsym(RTLD_NEXT, "_Exit"));
  g_real_exit_fn = reinterpret_cast<ExitFn>(dlsym(RTLD_NEXT, "exit"));
}

[[noreturn]] void ReallyExit(ExitFn real, int status) {
  if (real) real(status);
  syscall(SYS_exit_group, status);
  __builtin_unreachable();
}
}  // namespace

extern "C" __attribute__((visibility("default"), noreturn)) void _exit(int status) {
  flightrec::ShutdownBeforeExit();
  ReallyExit(g_real_exit, status);
}

extern "C" __attribute__((visibility("default"), noreturn)) void _Exit(int status) {
  flightrec::ShutdownBeforeExit();
  ReallyExit(g_real_Exit, status);
}

extern "C" __attribute__((visibility("default"), noreturn)) void exit(int status) {
  flightrec::WaitForAnotherExit();
  if (g_real_exit_fn) g_real_exit_fn(status);
  syscall(SYS_exit_group, status);
  __builtin_unreachable();
}
