// prctl hook: a program that installs a seccomp filter through libc's prctl
// (PR_SET_SECCOMP) tells the recorder first (seccomp_state.h), so that no
// call of ours after it is one the filter may kill on. The seccomp(2) and
// raw prctl forms through libc's syscall() are seen by the syscall hook
// (preload/crash/hook_signal.cc). The call itself is made as asked.
// PR_SET_KEEPCAPS, per thread, is then made on the recorder's threads too
// (recorder_caps.h).
#include <errno.h>
#include <linux/seccomp.h>
#include <stdarg.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include "preload/crash/raw_syscall.h"
#include "preload/runtime/recorder_caps.h"
#include "preload/runtime/seccomp_state.h"

extern "C" __attribute__((visibility("default"))) int prctl(int option, ...) {
  va_list ap;
  va_start(ap, option);
  unsigned long a[4];
  for (unsigned long& v : a) v = va_arg(ap, unsigned long);  // as glibc: four words, used or not
  va_end(ap);
  if (option == PR_SET_SECCOMP) flightrec::NoteSeccompFilter("the program's prctl(PR_SET_SECCOMP)");
  const long ret = flightrec::RawSyscall6(SYS_prctl, option, static_cast<long>(a[0]), static_cast<long>(a[1]),
                                          static_cast<long>(a[2]), static_cast<long>(a[3]), 0);
  if (ret < 0 && ret > -4096) {
    errno = static_cast<int>(-ret);
    return -1;
  }
  // Keep-caps is per thread: ours follow the program's (recorder_caps.h).
  if (option == PR_SET_KEEPCAPS) {
    const int saved = errno;
    flightrec::RecorderCapsAfterKeepCaps(a[0]);
    errno = saved;
  }
  return static_cast<int>(ret);
}
