// crash_restart: a crash signal whose handler the program installed with
// SA_RESTART (and SIGUSR1 in its sa_mask) arrives while the program sits in
// a blocking read(): the kernel restarts the read, which then returns the
// byte written after the handler ran. Prints "read 1 byte" and exits 0; a
// recorder whose own handler lacks SA_RESTART turns it into EINTR.
//
// usage: crash_restart
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t g_handled;
static int g_pipe[2];
static pid_t g_main_tid;

static void on_bus(int sig) {
  (void)sig;
  g_handled = 1;
}

// The main thread's scheduler state, from /proc ('S' while it sleeps in read).
static char main_state(void) {
  char path[64], buf[256];
  snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)g_main_tid);
  FILE* f = fopen(path, "r");
  if (!f) return '?';
  const size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = 0;
  const char* p = strrchr(buf, ')');
  return p && p[1] && p[2] ? p[2] : '?';
}

static void* poke(void* main_thread) {
  const struct timespec ms = {0, 1000000};
  while (main_state() != 'S') nanosleep(&ms, NULL);
  pthread_kill(*(pthread_t*)main_thread, SIGBUS);
  while (!g_handled) nanosleep(&ms, NULL);
  // The handler ran and returned: the read is either restarted or failed.
  for (int i = 0; i < 50; ++i) nanosleep(&ms, NULL);
  if (write(g_pipe[1], "x", 1) != 1) return NULL;
  return NULL;
}

int main(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_bus;
  sigemptyset(&sa.sa_mask);
  sigaddset(&sa.sa_mask, SIGUSR1);
  sa.sa_flags = SA_RESTART;
  if (sigaction(SIGBUS, &sa, NULL) != 0 || pipe(g_pipe) != 0) return 2;
  g_main_tid = (pid_t)syscall(SYS_gettid);
  pthread_t self = pthread_self(), t;
  if (pthread_create(&t, NULL, poke, &self) != 0) return 2;
  char c;
  const ssize_t n = read(g_pipe[0], &c, 1);
  if (n < 0) printf("read failed: %s\n", strerror(errno));
  else printf("read %zd byte\n", n);
  pthread_join(t, NULL);
  return 0;
}
