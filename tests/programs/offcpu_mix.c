// offcpu_mix: threads that block in known functions through different
// blocking calls, for the off-CPU tests.
//
//   sleeper_wait   nanosleep 30 ms, 8 times
//   cond_waiter    pthread_cond_timedwait 30 ms, 8 times (never signalled)
//   mutex_blocked  pthread_mutex_lock on a mutex main holds for 150 ms
//   quick_polls    poll with a 0 timeout, 1000 times (never blocks: the
//                  hooks must not time or record these)
//   socket_reader  recv on a socketpair until main writes, after its 150 ms
//                  hold (a blocking socket read, timed by the socket hooks)
//   acceptor_wait  accept on a listening AF_UNIX socket until main connects,
//                  after the same hold (a blocking accept)
//
// prints "offcpu done" on success.
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t g_cond_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cond = PTHREAD_COND_INITIALIZER;
static volatile int g_sink;

__attribute__((noinline, noipa)) void sleeper_wait(void) {
  const struct timespec ts = {0, 30 * 1000 * 1000};
  for (int i = 0; i < 8; ++i) nanosleep(&ts, NULL);
  g_sink++;
}

__attribute__((noinline, noipa)) void cond_waiter(void) {
  pthread_mutex_lock(&g_cond_lock);
  for (int i = 0; i < 8; ++i) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 30 * 1000 * 1000;
    if (until.tv_nsec >= 1000000000) {
      until.tv_sec++;
      until.tv_nsec -= 1000000000;
    }
    while (pthread_cond_timedwait(&g_cond, &g_cond_lock, &until) != ETIMEDOUT) {
    }
  }
  pthread_mutex_unlock(&g_cond_lock);
  g_sink++;
}

__attribute__((noinline, noipa)) void mutex_blocked(void) {
  pthread_mutex_lock(&g_lock);
  pthread_mutex_unlock(&g_lock);
  g_sink++;
}

static int g_pair[2];

__attribute__((noinline, noipa)) void socket_reader(void) {
  char c;
  if (recv(g_pair[1], &c, 1, 0) == 1) g_sink++;
}

static int g_listener = -1;

__attribute__((noinline, noipa)) void acceptor_wait(void) {
  const int fd = accept(g_listener, NULL, NULL);
  if (fd >= 0) {
    g_sink++;
    close(fd);
  }
}

__attribute__((noinline, noipa)) int quick_polls(void) {
  int ready = 0;
  for (int i = 0; i < 1000; ++i) ready += poll(NULL, 0, 0);
  return ready;
}

static void* sleeper_main(void* a) { (void)a; sleeper_wait(); return NULL; }
static void* cond_main(void* a) { (void)a; cond_waiter(); return NULL; }
static void* mutex_main(void* a) { (void)a; mutex_blocked(); return NULL; }
static void* socket_main(void* a) { (void)a; socket_reader(); return NULL; }
static void* acceptor_main(void* a) { (void)a; acceptor_wait(); return NULL; }

int main(void) {
  pthread_t t[5];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, g_pair) != 0) return 3;
  // An abstract AF_UNIX name (leading NUL): nothing to clean up on disk.
  struct sockaddr_un sun;
  memset(&sun, 0, sizeof(sun));
  sun.sun_family = AF_UNIX;
  const int name_len = snprintf(sun.sun_path + 1, sizeof(sun.sun_path) - 1, "offcpu-mix-%d", (int)getpid());
  const socklen_t sun_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + name_len);
  g_listener = socket(AF_UNIX, SOCK_STREAM, 0);
  if (g_listener < 0 || bind(g_listener, (struct sockaddr*)&sun, sun_len) != 0 || listen(g_listener, 1) != 0)
    return 5;
  pthread_mutex_lock(&g_lock);  // mutex_blocked waits for this
  if (pthread_create(&t[0], NULL, sleeper_main, NULL) || pthread_create(&t[1], NULL, cond_main, NULL) ||
      pthread_create(&t[2], NULL, mutex_main, NULL) || pthread_create(&t[3], NULL, socket_main, NULL) ||
      pthread_create(&t[4], NULL, acceptor_main, NULL))
    return 1;
  if (quick_polls() != 0) return 2;
  const struct timespec hold = {0, 150 * 1000 * 1000};
  nanosleep(&hold, NULL);
  pthread_mutex_unlock(&g_lock);
  if (send(g_pair[0], "x", 1, 0) != 1) return 4;  // socket_reader waited the 150 ms too
  const int client = socket(AF_UNIX, SOCK_STREAM, 0);  // and acceptor_wait
  if (client < 0 || connect(client, (struct sockaddr*)&sun, sun_len) != 0) return 6;
  for (int i = 0; i < 5; ++i) pthread_join(t[i], NULL);
  close(client);
  printf("offcpu done\n");
  return 0;
}
