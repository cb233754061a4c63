// exec hooks: the exec family replaces the process image without running
// atexit, so before it the recorder seals its segment (and the sampler
// disarms its timers, so no SIGPROF reaches the new image); if the exec
// fails, both start again and the process records on. An exec of a file
// that does not exist (a shell's PATH search) changes nothing: no seal.
// The variadic execl* forms are rebuilt as argv arrays on the stack.
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <unistd.h>

namespace flightrec {
void RecorderBeforeExec();
void RecorderAfterExecFailed();
namespace sampler {
void SamplerBeforeExec() __attribute__((weak));
void SamplerAfterExecFailed() __attribute__((weak));
}  // namespace sampler
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

void Before() {
  if (flightrec::sampler::SamplerBeforeExec) flightrec::sampler::SamplerBeforeExec();
  flightrec::RecorderBeforeExec();
}

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
  const bool missing = fstatat(dirfd, path, &st, flags & AT_SYMLINK_NOFOLLOW) != 0 &&
                       (errno == ENOENT || errno == ENOTDIR);
  errno = saved;
  return missing;
}

constexpr int kMaxArgs = 4096;

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

__attribute__((visibility("default"))) int execveat(int dirfd, const char* path, char* const argv[],
                                                    char* const envp[], int flags) {
  static ExecveatFn real = Next<ExecveatFn>("execveat");
  if (!real) {
    errno = ENOSYS;
    return -1;
  }
  if (CannotFindFile(dirfd, path, flags)) return real(dirfd, path, argv, envp, flags);
  Before();
  return After(real(dirfd, path, argv, envp, flags));
}

#define COLLECT_EXEC_ARGS(first, argv, envp_out)           \
  char* argv[kMaxArgs];                                         \
  int argc = 0;                                                 \
  va_list ap;                                                   \
  va_start(ap, first);                                          \
  argv[argc++] = const_cast<char*>(first);                      \
  while (argc < kMaxArgs - 1) {                                 \
    char* a = va_arg(ap, char*);                                \
    argv[argc++] = a;                                           \
    if (!a) break;                                              \
  }                                                             \
  argv[kMaxArgs - 1] = nullptr;                                 \
  envp_out;                                                     \
  va_end(ap)

__attribute__((visibility("default"))) int execl(const char* path, const char* arg, ...) {
  COLLECT_EXEC_ARGS(arg, argv, (void)0);
  return execve(path, argv, environ);
}

__attribute__((visibility("default"))) int execlp(const char* file, const char* arg, ...) {
  COLLECT_EXEC_ARGS(arg, argv, (void)0);
  return execvpe(file, argv, environ);
}

__attribute__((visibility("default"))) int execle(const char* path, const char* arg, ...) {
  char** envp = nullptr;
  COLLECT_EXEC_ARGS(arg, argv, envp = va_arg(ap, char**));
  return execve(path, argv, envp);
}

}  // extern "C"
