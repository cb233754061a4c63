// _exit / _Exit hooks: a process that leaves through _exit (forked children,
// daemons) skips atexit handlers, so the recorder would lose what it has not
// yet written. The hook seals the trace (bounded) and then really exits.
// A vfork child sharing our memory is recognised by its pid and left alone.
#include <dlfcn.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace flightrec {
void ShutdownBeforeExit();
}

namespace {
using ExitFn = void (*)(int);

// Resolved at load time: a vfork child must not call into the dynamic loader.
ExitFn g_real_exit = nullptr;
ExitFn g_real_Exit = nullptr;
__attribute__((constructor)) void ResolveExitFunctions() {
  g_real_exit = reinterpret_cast<ExitFn>(dlsym(RTLD_NEXT, "_exit"));
  g_real_Exit = reinterpret_cast<ExitFn>(dlsym(RTLD_NEXT, "_Exit"));
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
