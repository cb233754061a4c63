/* crash_test MODE: dies the way MODE says, from a named thread, inside a
 * known call chain (crash_worker -> crash_outer -> crash_here), after doing
 * a little recorded work. MODE: segv | abort | fpe | handled (installs its
 * own SIGSEGV handler, which prints and exits 3) | reraise (a handler like
 * redis-server's: SA_RESETHAND|SA_NODEFER, prints, re-raises with kill and
 * dies by the signal) | recovers (1000 faults a handler recovers from with
 * siglongjmp, as a JVM does with null checks; checks sigaction reports the
 * handler it installed; exits 0) | recovers-then-abort (the same, then
 * abort() on the same thread) | returns (1000 faults on a PROT_NONE page
 * whose handler makes the page writable and returns, so the access is
 * retried and succeeds, as a JVM's handler returns; exits 0) | overflow (unbounded recursion in
 * overflow_stack until the thread's stack runs out) | bigstack (a handler,
 * installed without SA_ONSTACK, that puts 1 MiB on the stack, as
 * redis-server's memory test does, says whether it runs on an alternate
 * stack, and exits 3) | none (exits 0). */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static const char* mode;
static volatile int zero = 0;
static int* volatile null_ptr = NULL;

static void on_segv(int sig) {
  (void)sig;
  static const char msg[] = "handled SIGSEGV\n";
  ssize_t w = write(1, msg, sizeof(msg) - 1);
  (void)w;
  _exit(3);
}

static void on_segv_reraise(int sig, siginfo_t* si, void* uc) {
  (void)si;
  (void)uc;
  static const char msg[] = "crash report: SIGSEGV\n";
  ssize_t w = write(1, msg, sizeof(msg) - 1);
  (void)w;
  kill(getpid(), sig);
}

static void on_segv_big_stack(int sig) {
  (void)sig;
  volatile char big[1 << 20];
  memset((char*)big, 1, sizeof(big));
  stack_t ss;
  const int on_alt = sigaltstack(NULL, &ss) == 0 && (ss.ss_flags & SS_ONSTACK) != 0;
  char msg[64];
  const int n = snprintf(msg, sizeof(msg), "handler used %d KiB of stack, on an alternate stack: %d\n",
                         (int)(sizeof(big) / 1024) * big[12345], on_alt);
  ssize_t w = write(1, msg, (size_t)n);
  (void)w;
  _exit(3);
}

static sigjmp_buf recover_point;
static void on_segv_recover(int sig) {
  (void)sig;
  siglongjmp(recover_point, 1);
}

static int recover_many(void) {
  struct sigaction sa, now;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_segv_recover;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGSEGV, &sa, NULL) != 0) return -1;
  if (sigaction(SIGSEGV, NULL, &now) != 0 || now.sa_handler != on_segv_recover) {
    printf("sigaction reports another handler\n");
    return -1;
  }
  int recovered = 0;
  for (int i = 0; i < 1000; ++i) {
    if (sigsetjmp(recover_point, 1) == 0) recovered -= *null_ptr;
    else ++recovered;
  }
  return recovered;
}

static char* volatile guarded_page;
static void on_segv_unprotect(int sig, siginfo_t* si, void* uc) {
  (void)sig;
  (void)uc;
  if ((char*)((uintptr_t)si->si_addr & ~(uintptr_t)4095) != guarded_page) _exit(4);
  mprotect(guarded_page, 4096, PROT_READ | PROT_WRITE);
}

static int fault_and_return_many(void) {
  guarded_page = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (guarded_page == MAP_FAILED) return -1;
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = on_segv_unprotect;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGSEGV, &sa, NULL) != 0) return -1;
  int done = 0;
  for (int i = 0; i < 1000; ++i) {
    guarded_page[i % 4096] = (char)i;  /* faults, handler unprotects, retried */
    done += guarded_page[i % 4096] == (char)i;
    mprotect(guarded_page, 4096, PROT_NONE);
  }
  return done;
}

/* Each frame keeps a buffer live so the compiler can neither turn the
 * recursion into a loop nor keep the frames small. */
static volatile int keep_going = 1;
__attribute__((noinline)) static int overflow_stack(int depth) {
  volatile char pad[512];
  pad[depth % 512] = (char)depth;
  if (!keep_going) return pad[0];
  return overflow_stack(depth + 1) + pad[(depth * 7) % 512];
}

__attribute__((noinline)) static int crash_here(int depth) {
  if (strcmp(mode, "overflow") == 0) return overflow_stack(depth);
  if (strcmp(mode, "segv") == 0 || strcmp(mode, "handled") == 0 || strcmp(mode, "reraise") == 0 ||
      strcmp(mode, "bigstack") == 0)
    return *null_ptr + depth;
  if (strcmp(mode, "recovers") == 0) return recover_many();
  if (strcmp(mode, "recovers-then-abort") == 0) {
    printf("recovered %d\n", recover_many());
    fflush(stdout);
    abort();
  }
  if (strcmp(mode, "returns") == 0) return fault_and_return_many();
  if (strcmp(mode, "abort") == 0) abort();
  if (strcmp(mode, "fpe") == 0) return depth / zero;
  return depth;
}

__attribute__((noinline)) static int crash_outer(int depth) { return crash_here(depth + 1) + 1; }

static void* crash_worker(void* arg) {
  (void)arg;
  pthread_setname_np(pthread_self(), "crasher");
  usleep(50 * 1000);
  int r = crash_outer(1);
  printf("no crash: %d\n", r);
  return NULL;
}

int main(int argc, char** argv) {
  mode = argc > 1 ? argv[1] : "none";
  if (strcmp(mode, "handled") == 0) signal(SIGSEGV, on_segv);
  if (strcmp(mode, "bigstack") == 0) signal(SIGSEGV, on_segv_big_stack);
  if (strcmp(mode, "reraise") == 0) {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = on_segv_reraise;
    sa.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, NULL);
  }
  printf("crash_test %s starting\n", mode);
  fflush(stdout);
  pthread_t t;
  pthread_create(&t, NULL, crash_worker, NULL);
  pthread_join(t, NULL);
  return 0;
}
