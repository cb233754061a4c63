// exec hooks: the exec family replaces the process image without running
// atexit, so before it the recorder seals its segment (and the sampler
// disarms its timers, so no SIGPROF reaches the new image); if the exec
// fails, both start again and the process records on. An exec of a file
// that does not exist (a shell's PATH search) changes nothing: no seal.
// The variadic execl* forms are rebuilt as argv arrays on the stack, sized
// as glibc sizes its own (no more stack than the plain call uses).
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/stat.h>
#include <unistd.h>

#include "preload/runtime/features.h"
#include "preload/runtime/own_stack.h"

namespace flightrec {
void RecorderBeforeExec();
void RecorderAfterExecFailed();
}  // namespace flightrec

namespace {

using ExecveFn = int (*)(const char*, char* const[], char* const[]);
using ExecvpeFn = int (*)(const char*, char* const[], char* const[]);
using FexecveFn = int (*)(int, char* const[], char* const[]);
using ExecveatFn = int (*)(int, const char*, char* const[], char* const[], int);

template <typename Fn>
Fn Next(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

void BeforeOnOwnStack() {
  // Out of memory in the seal: the exec goes on as it would have.
  try {
    if (flightrec::sampler::SamplerBeforeExec) flightrec::sampler::SamplerBeforeExec();
    flightrec::RecorderBeforeExec();
  } catch (...) {}
}

// The seal runs on a stack of ours (own_stack.h): the thread that execs may
// have as little as 16 KiB of its own.
void Before() { flightrec::RunOnOwnStack(BeforeOnOwnStack); }

int After(int rc) {
  const int saved = errno;
  flightrec::RecorderAfterExecFailed();
  if (flightrec::sampler::SamplerAfterExecFailed) flightrec::sampler::SamplerAfterExecFailed();
  errno = saved;
  return rc;
}

// An exec whose file does not exist fails without replacing anything: a
// shell's own PATH search (dash: one execve per PATH entry) makes one per
// entry before the one that succeeds. Those skip the seal, so the search
// seals once, at the exec that can succeed (or at exit, if none could).
// The file could appear between the check and the call: then that exec
// replaces the image unsealed, and the segment stays .active (readable up
// to its last block; docs/LIMITS.md).
bool CannotFindFile(int dirfd, const char* path, int flags) {
  if (!path) return false;
  if (path[0] == '\0') return (flags & AT_EMPTY_PATH) == 0;  // ENOENT
  const int saved = errno;
  struct stat st;
  const bool missing =
      fstatat(dirfd, path, &st, flags & AT_SYMLINK_NOFOLLOW) != 0 && (errno == ENOENT || errno == ENOTDIR);
  errno = saved;
  return missing;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int execve(const char* path, char* const argv[], char* const envp[]) {
  static ExecveFn real = Next<ExecveFn>("execve");
  if (CannotFindFile(AT_FDCWD, path, 0)) return real(path, argv, envp);
  Before();
  return After(real(path, argv, envp));
}

__attribute__((visibility("default"))) int execv(const char* path, char* const argv[]) {
  static ExecveFn real = Next<ExecveFn>("execve");
  if (CannotFindFile(AT_FDCWD, path, 0)) return real(path, argv, environ);
  Before();
  return After(real(path, argv, environ));
}

__attribute__((visibility("default"))) int execvpe(const char* file, char* const argv[], char* const envp[]) {
  static ExecvpeFn real = Next<ExecvpeFn>("execvpe");
  Before();
  return After(real(file, argv, envp));
}

__attribute__((visibility("default"))) int execvp(const char* file, char* const argv[]) {
  static ExecvpeFn real = Next<ExecvpeFn>("execvpe");
  Before();
  return After(real(file, argv, environ));
}

__attribute__((visibility("default"))) int fexecve(int fd, char* const argv[], char* const envp[]) {
  static FexecveFn real = Next<FexecveFn>("fexecve");
  Before();
  return After(real(fd, argv, envp));
}

__attribute__((visibility("default"))) int execveat(int dirfd, const char* path, char* const argv[], char* const envp[],
                                                    int flags) {
  static ExecveatFn real = Next<ExecveatFn>("execveat");
  if (!real) {
    errno = ENOSYS;
    return -1;
  }
  if (CannotFindFile(dirfd, path, flags)) return real(dirfd, path, argv, envp, flags);
  Before();
  return After(real(dirfd, path, argv, envp, flags));
}

// The variadic forms, as glibc's own execl does it: count the arguments
// first, then an array of exactly that many on the stack (a fixed array of
// 4096 took 32 KiB of a thread's stack, more than a 16 KiB one has, and
// dropped every argument past the 4095th). E2BIG past INT_MAX arguments.
#define COUNT_EXEC_ARGS(first, argc_out)    \
  ptrdiff_t argc_out = 1;                   \
  {                                         \
    va_list count_ap;                       \
    va_start(count_ap, first);              \
    while (va_arg(count_ap, const char*)) { \
      if (argc_out == INT_MAX) {            \
        va_end(count_ap);                   \
        errno = E2BIG;                      \
        return -1;                          \
      }                                     \
      argc_out++;                           \
    }                                       \
    va_end(count_ap);                       \
  }

// Fills argv[0..argc] (argv[argc] = nullptr) and leaves `ap` past the
// terminating null pointer (execle's envp follows it).
#define FILL_EXEC_ARGS(first, argv, argc, ap) \
  argv[0] = const_cast<char*>(first);         \
  for (ptrdiff_t i = 1; i <= argc; i++) argv[i] = va_arg(ap, char*)

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wvla"

__attribute__((visibility("default"))) int execl(const char* path, const char* arg, ...) {
  COUNT_EXEC_ARGS(arg, argc);
  char* argv[argc + 1];
  va_list ap;
  va_start(ap, arg);
  FILL_EXEC_ARGS(arg, argv, argc, ap);
  va_end(ap);
  return execve(path, argv, environ);
}

__attribute__((visibility("default"))) int execlp(const char* file, const char* arg, ...) {
  COUNT_EXEC_ARGS(arg, argc);
  char* argv[argc + 1];
  va_list ap;
  va_start(ap, arg);
  FILL_EXEC_ARGS(arg, argv, argc, ap);
  va_end(ap);
  return execvpe(file, argv, environ);
}

__attribute__((visibility("default"))) int execle(const char* path, const char* arg, ...) {
  COUNT_EXEC_ARGS(arg, argc);
  char* argv[argc + 1];
  va_list ap;
  va_start(ap, arg);
  FILL_EXEC_ARGS(arg, argv, argc, ap);
  char** envp = va_arg(ap, char**);
  va_end(ap);
  return execve(path, argv, envp);
}

#pragma GCC diagnostic pop

}  // extern "C"
