// cpu_own_sigprof: an application that uses SIGPROF itself, started under
// the preload. flightrec must never take its signal away, never deliver one
// of its own samples to the application, and honour SIG_IGN / SIG_DFL.
//
// usage: cpu_own_sigprof MODE
//   handler  burn, then install a SA_SIGINFO handler + setitimer(ITIMER_PROF)
//            and burn again: every tick the handler sees must be the
//            application's own (si_code != SI_TIMER). Prints
//            "ticks=N foreign=M"; exits 3 if a foreign SIGPROF arrived.
//   signal   the same with signal() (no siginfo: only counts ticks).
//   ignore   signal(SIGPROF, SIG_IGN), burn, raise(SIGPROF): must survive.
//   default  sigaction(SIGPROF, SIG_DFL), raise(SIGPROF): must die of it.
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "burn_common.h"

static volatile sig_atomic_t g_ticks, g_foreign;

__attribute__((noinline, noipa)) void burn_before_handler(double s) { BURN_CPU(s, 100000); }
__attribute__((noinline, noipa)) void own_profiler_burn(double s) { BURN_CPU(s, 100000); }
__attribute__((noinline, noipa)) void burn_while_ignored(double s) { BURN_CPU(s, 100000); }

static void on_prof_info(int sig, siginfo_t* si, void* uc) {
  (void)sig;
  (void)uc;
  if (si->si_code == SI_TIMER) g_foreign++;
  else g_ticks++;
}

static void on_prof_plain(int sig) {
  (void)sig;
  g_ticks++;
}

static void start_itimer(void) {
  struct itimerval it;
  memset(&it, 0, sizeof(it));
  it.it_interval.tv_usec = 5000;
  it.it_value.tv_usec = 5000;
  setitimer(ITIMER_PROF, &it, NULL);
}

static void stop_itimer(void) {
  struct itimerval it;
  memset(&it, 0, sizeof(it));
  setitimer(ITIMER_PROF, &it, NULL);
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "handler";
  if (!strcmp(mode, "handler") || !strcmp(mode, "signal")) {
    burn_before_handler(0.4);
    if (!strcmp(mode, "handler")) {
      struct sigaction sa;
      memset(&sa, 0, sizeof(sa));
      sa.sa_sigaction = on_prof_info;
      sa.sa_flags = SA_SIGINFO | SA_RESTART;
      sigemptyset(&sa.sa_mask);
      if (sigaction(SIGPROF, &sa, NULL) != 0) return 5;
      struct sigaction back;
      if (sigaction(SIGPROF, NULL, &back) != 0 || back.sa_sigaction != on_prof_info) return 6;
    } else {
      if (signal(SIGPROF, on_prof_plain) == SIG_ERR) return 5;
    }
    start_itimer();
    own_profiler_burn(0.4);
    stop_itimer();
    printf("ticks=%d foreign=%d\n", (int)g_ticks, (int)g_foreign);
    if (g_foreign) return 3;
    return g_ticks ? 0 : 4;
  }
  if (!strcmp(mode, "ignore")) {
    if (signal(SIGPROF, SIG_IGN) == SIG_ERR) return 5;
    if (signal(SIGPROF, SIG_IGN) != SIG_IGN) return 6;  // reads back what we set
    burn_while_ignored(0.4);
    raise(SIGPROF);
    printf("survived\n");
    return 0;
  }
  if (!strcmp(mode, "default")) {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = SIG_DFL;
    if (sigaction(SIGPROF, &sa, NULL) != 0) return 5;
    burn_while_ignored(0.1);
    raise(SIGPROF);
    printf("not killed\n");
    return 7;
  }
  return 2;
}
