// sigprof_reset: a program that puts SIGPROF back to its default action
// behind the recorder's hooks, then computes. Nothing in it asks for a
// SIGPROF, so nothing may kill it: prints "done" and exits 0.
//
// usage: sigprof_reset sigset|sigignore|syscall
//   sigset    glibc's sigset(SIGPROF, SIG_DFL) (libc's internal sigaction)
//   sigignore glibc's sigignore(SIGPROF), then SIG_DFL through sigaction's
//             raw system call
//   syscall   the raw rt_sigaction system call through syscall()
//   inline    SIG_IGN with an inline rt_sigaction system call, past every
//             hook (SIG_DFL there could not be told from our side in time;
//             the recorder notices the change later and steps aside)
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "burn_common.h"

// The kernel's struct sigaction for rt_sigaction (not glibc's).
struct kernel_sigaction {
  void (*handler)(int);
  unsigned long flags;
  void (*restorer)(void);
  unsigned long mask;
};

__attribute__((noinline, noipa)) static void compute_after_reset(double s) { BURN_CPU(s, 100000); }

// rt_sigaction made with the syscall instruction itself.
static long inline_rt_sigaction(int sig, const struct kernel_sigaction* act) {
  long ret;
  register long r10 __asm__("r10") = sizeof(act->mask);
  __asm__ volatile("syscall"
                   : "=a"(ret)
                   : "a"((long)SYS_rt_sigaction), "D"((long)sig), "S"(act), "d"(0L), "r"(r10)
                   : "rcx", "r11", "memory");
  return ret;
}

static int raw_default(void) {
  struct kernel_sigaction ka;
  memset(&ka, 0, sizeof(ka));
  ka.handler = SIG_DFL;
  return (int)syscall(SYS_rt_sigaction, SIGPROF, &ka, NULL, sizeof(ka.mask));
}

// sigset and sigignore are obsolescent (deprecated in glibc's headers),
// which is exactly why old code still reaches SIGPROF through them.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "sigset";
  // Let the recorder start sampling this thread first.
  compute_after_reset(0.05);
  if (strcmp(mode, "sigset") == 0) {
    if (sigset(SIGPROF, SIG_DFL) == SIG_ERR) return 2;
  } else if (strcmp(mode, "sigignore") == 0) {
    if (sigignore(SIGPROF) != 0) return 2;
    compute_after_reset(0.05);
    if (raw_default() != 0) return 2;
  } else if (strcmp(mode, "syscall") == 0) {
    if (raw_default() != 0) return 2;
  } else if (strcmp(mode, "inline") == 0) {
    struct kernel_sigaction ka;
    memset(&ka, 0, sizeof(ka));
    ka.handler = SIG_IGN;
    if (inline_rt_sigaction(SIGPROF, &ka) != 0) return 2;
  } else {
    return 2;
  }
  compute_after_reset(0.3);
  printf("done\n");
  return 0;
}
