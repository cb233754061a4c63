// crash_sigset: a program that sets a crash signal's handler with glibc's
// sigset() (libc's internal sigaction, past the sigaction interposer), then
// replaces it with sigaction() and raises the signal. The handler it set
// last must be the one that runs, and sigaction must report it.
// Prints "second handler ran, reported second" and exits 0.
//
// usage: crash_sigset SIGNAL_NUMBER   (e.g. 8 for SIGFPE, 11 for SIGSEGV)
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile sig_atomic_t g_ran;

static void first(int sig) {
  (void)sig;
  g_ran = 1;
}

static void second(int sig) {
  (void)sig;
  g_ran = 2;
}

// sigset is obsolescent (deprecated in glibc's headers), which is exactly
// why old code still reaches crash signals through it.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

int main(int argc, char** argv) {
  const int sig = argc > 1 ? atoi(argv[1]) : SIGFPE;
  if (sigset(sig, first) == SIG_ERR) return 2;
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = second;
  sigemptyset(&sa.sa_mask);
  if (sigaction(sig, &sa, NULL) != 0) return 2;
  struct sigaction now;
  if (sigaction(sig, NULL, &now) != 0) return 2;
  raise(sig);
  printf("%s handler ran, reported %s\n", g_ran == 2 ? "second" : g_ran == 1 ? "first" : "no",
         now.sa_handler == second ? "second" : now.sa_handler == first ? "first" : "other");
  return 0;
}
