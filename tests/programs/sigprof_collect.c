// sigprof_collect: a program that takes its own SIGPROFs synchronously. It
// blocks SIGPROF, arms setitimer(ITIMER_PROF) and burns CPU, collecting the
// ticks with sigwait (mode "sigwait") or by reading a signalfd ("signalfd").
// Without a handler, a SIGPROF that reached the thread would kill it, so a
// recorder that unblocks SIGPROF behind the program's back changes how it
// ends. Prints "collected 20" and exits 0.
//
// usage: sigprof_collect sigwait|signalfd
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/time.h>
#include <unistd.h>

#include "burn_common.h"

// Burns CPU until a SIGPROF is pending (CPU timers expire only on a tick
// that finds the process running, so a fixed burn may see none). Returns 0,
// or -1 after 10 s of CPU without one.
__attribute__((noinline, noipa)) static int burn_until_pending(void) {
  for (int i = 0; i < 2000; ++i) {
    BURN_CPU(0.005, 10000);
    sigset_t pending;
    sigpending(&pending);
    if (sigismember(&pending, SIGPROF)) return 0;
  }
  return -1;
}

int main(int argc, char** argv) {
  const int use_fd = argc > 1 && strcmp(argv[1], "signalfd") == 0;
  sigset_t prof;
  sigemptyset(&prof);
  sigaddset(&prof, SIGPROF);
  if (sigprocmask(SIG_BLOCK, &prof, NULL) != 0) return 2;
  const int fd = use_fd ? signalfd(-1, &prof, SFD_CLOEXEC) : -1;
  if (use_fd && fd < 0) return 2;
  struct itimerval it = {{0, 1000}, {0, 1000}};
  if (setitimer(ITIMER_PROF, &it, NULL) != 0) return 2;
  int collected = 0;
  while (collected < 20) {
    if (burn_until_pending() != 0) return 5;
    if (use_fd) {
      struct signalfd_siginfo si;
      if (read(fd, &si, sizeof(si)) != (ssize_t)sizeof(si) || si.ssi_signo != SIGPROF) return 4;
    } else {
      int sig = 0;
      if (sigwait(&prof, &sig) != 0 || sig != SIGPROF) return 4;
    }
    collected++;
  }
  struct itimerval off = {{0, 0}, {0, 0}};
  setitimer(ITIMER_PROF, &off, NULL);
  // The program's view of its mask is what it set.
  sigset_t now;
  sigprocmask(SIG_BLOCK, NULL, &now);
  printf("collected %d, SIGPROF %s\n", collected, sigismember(&now, SIGPROF) ? "blocked" : "unblocked");
  return 0;
}
