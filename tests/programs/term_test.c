/* term_test MODE: how a process meets the signals whose default action ends
 * it (SIGTERM, SIGINT, SIGPIPE, ...). MODE:
 *   dispositions  prints, for each such signal, what sigaction reports
 *                 ("SIGTERM default"), then what signal() reports when
 *                 SIGUSR1 is set to a handler and back; exits 0
 *   burn          prints "ready", then burns CPU in term_burn_inner (called
 *                 from term_burn_outer) until a signal ends it
 *   handler       installs a SIGTERM handler that sets a flag; prints "ready"
 *                 and burns until the flag is set, then prints "handled" and
 *                 exits 7
 *   restore       installs a SIGTERM handler, then puts SIG_DFL back (checking
 *                 signal() hands back its handler), then as burn
 *   vfork         a vfork child sends itself SIGTERM and dies of it (sharing
 *                 the parent's memory meanwhile); the parent prints how the
 *                 child ended, then as burn
 *   vfork-reset   as Python's subprocess does: SIGPIPE ignored and a SIGSEGV
 *                 handler in the parent; a vfork child puts both (and SIGTERM)
 *                 to SIG_DFL and exits; the parent then prints what sigaction
 *                 reports for the three, and execs `grep SigIgn
 *                 /proc/self/status` (what an exec'd program inherits); exits 0
 *   ignore        SIGTERM set to SIG_IGN; prints "ready", burns 1.5 s of CPU,
 *                 prints "survived", exits 0
 *   pipe          writes lines to stdout until the reader goes away (SIGPIPE) */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

static const int kSignals[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2,
                               SIGPIPE, SIGALRM, SIGXCPU, SIGXFSZ, SIGVTALRM};
static volatile sig_atomic_t got_term = 0;
static volatile unsigned long sink;

static void on_term(int sig) { (void)sig; got_term = 1; }
static void on_usr1(int sig) { (void)sig; }
static void on_segv(int sig) { (void)sig; _exit(70); }

static const char* describe(const struct sigaction* a) {
  if (a->sa_flags & SA_SIGINFO) return "handler";
  if (a->sa_handler == SIG_DFL) return "default";
  if (a->sa_handler == SIG_IGN) return "ignored";
  return "handler";
}

static double cpu_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

__attribute__((noinline)) static void term_burn_inner(void) {
  for (int i = 0; i < 200000; i++) sink += (unsigned long)i * 2654435761u;
}

__attribute__((noinline)) static void term_burn_outer(double seconds) {
  const double end = cpu_seconds() + seconds;
  while (!got_term && cpu_seconds() < end) term_burn_inner();
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "burn";
  if (!strcmp(mode, "dispositions")) {
    for (size_t i = 0; i < sizeof(kSignals) / sizeof(kSignals[0]); i++) {
      struct sigaction a;
      sigaction(kSignals[i], NULL, &a);
      printf("%s %s\n", sigabbrev_np(kSignals[i]), describe(&a));
    }
    sighandler_t before = signal(SIGUSR1, on_usr1);
    sighandler_t mine = signal(SIGUSR1, SIG_DFL);
    printf("signal(SIGUSR1) before=%s then=%s\n", before == SIG_DFL ? "default" : "other",
           mine == on_usr1 ? "mine" : "other");
    return 0;
  }
  if (!strcmp(mode, "vfork-reset")) {
    signal(SIGPIPE, SIG_IGN);
    signal(SIGSEGV, on_segv);
    pid_t child = vfork();
    if (child == 0) {
      struct sigaction dfl;
      memset(&dfl, 0, sizeof(dfl));
      dfl.sa_handler = SIG_DFL;
      sigaction(SIGPIPE, &dfl, NULL);
      sigaction(SIGSEGV, &dfl, NULL);
      signal(SIGTERM, SIG_IGN);
      _exit(0);
    }
    waitpid(child, NULL, 0);
    const int sigs[] = {SIGPIPE, SIGSEGV, SIGTERM};
    for (int i = 0; i < 3; i++) {
      struct sigaction a;
      sigaction(sigs[i], NULL, &a);
      printf("%s %s\n", sigabbrev_np(sigs[i]), describe(&a));
    }
    fflush(stdout);
    execlp("grep", "grep", "SigIgn", "/proc/self/status", (char*)NULL);
    return 127;
  }
  if (!strcmp(mode, "handler")) {
    struct sigaction a;
    memset(&a, 0, sizeof(a));
    a.sa_handler = on_term;
    sigaction(SIGTERM, &a, NULL);
  } else if (!strcmp(mode, "restore")) {
    signal(SIGTERM, on_term);
    if (signal(SIGTERM, SIG_DFL) != on_term) return 4;
  } else if (!strcmp(mode, "vfork")) {
    pid_t child = vfork();
    if (child == 0) {
      kill(getpid(), SIGTERM);
      _exit(9);  // not reached: SIGTERM's default action ends the child
    }
    int status = 0;
    waitpid(child, &status, 0);
    printf("child %s %d\n", WIFSIGNALED(status) ? "signal" : "exit",
           WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
  } else if (!strcmp(mode, "ignore")) {
    signal(SIGTERM, SIG_IGN);
  } else if (!strcmp(mode, "pipe")) {
    for (unsigned long n = 0;; n++) printf("line %lu\n", n);
  }
  printf("ready\n");
  fflush(stdout);
  term_burn_outer(!strcmp(mode, "ignore") ? 1.5 : 60);
  if (got_term) {
    printf("handled\n");
    return 7;
  }
  printf("survived\n");
  return 0;
}
