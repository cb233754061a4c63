// crash_sa_mask: a SIGFPE handler installed with SIGUSR1 in its sa_mask,
// while another thread sends SIGUSR1 to the faulting thread as fast as it
// can. The kernel blocks SIGUSR1 from the moment SIGFPE is delivered, so
// the SIGUSR1 handler never runs on the program's alternate signal stack
// (no handler of the program asks for it: only a handler that runs there,
// like a recorder's crash handler, can be interrupted there). Prints
// "SIGUSR1 inside the SIGFPE delivery: never" and exits 0.
//
// usage: crash_sa_mask
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <ucontext.h>

static char g_altstack[64 * 1024];
static volatile sig_atomic_t g_fpe_done, g_usr1_on_altstack, g_usr1_count;

static void on_usr1(int sig, siginfo_t* si, void* ucv) {
  (void)sig;
  (void)si;
  const ucontext_t* uc = ucv;
  const uintptr_t sp = (uintptr_t)uc->uc_mcontext.gregs[REG_RSP];
  if (sp >= (uintptr_t)g_altstack && sp < (uintptr_t)g_altstack + sizeof(g_altstack)) g_usr1_on_altstack = 1;
  g_usr1_count++;
}

static void on_fpe(int sig) {
  (void)sig;
  g_fpe_done = 1;
}

static pthread_t g_main;

static void* flood(void* arg) {
  (void)arg;
  while (!g_fpe_done) pthread_kill(g_main, SIGUSR1);
  return NULL;
}

int main(void) {
  stack_t ss = {.ss_sp = g_altstack, .ss_size = sizeof(g_altstack), .ss_flags = 0};
  if (sigaltstack(&ss, NULL) != 0) return 2;
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = on_usr1;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGUSR1, &sa, NULL) != 0) return 2;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_fpe;
  sigemptyset(&sa.sa_mask);
  sigaddset(&sa.sa_mask, SIGUSR1);
  if (sigaction(SIGFPE, &sa, NULL) != 0) return 2;
  g_main = pthread_self();
  pthread_t t;
  if (pthread_create(&t, NULL, flood, NULL) != 0) return 2;
  while (g_usr1_count < 100) {
  }
  raise(SIGFPE);
  pthread_join(t, NULL);
  printf("SIGUSR1 inside the SIGFPE delivery: %s\n", g_usr1_on_altstack ? "yes" : "never");
  return 0;
}
