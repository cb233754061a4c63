// idle_threads: a process whose threads all sleep, as a thread-pool service
// between requests: N threads each make one socket call (so each has a slot
// with a ring, and a socket) and then sleep; main sleeps too. What the
// recorder's threads spend on such a process is the cost of visiting every
// thread's slot on each flush tick (preload/flush/slot_scan.h).
//   idle_threads N SECONDS [BUSY]
// BUSY=1: main makes a send+recv pair every millisecond meanwhile (one
// thread of the pool at work), so the flush thread ticks every
// FLIGHTREC_FLUSH_MS instead of backing off.
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace {

unsigned g_seconds = 0;

void* Worker(void*) {
  int sv[2];
  char b[8];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) == 0) {
    if (send(sv[0], "x", 1, 0) == 1 && recv(sv[1], b, sizeof(b), 0) < 0) perror("recv");
  }
  sleep(g_seconds);
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    fprintf(stderr, "usage: idle_threads N SECONDS [BUSY]\n");
    return 2;
  }
  const int n = atoi(argv[1]);
  g_seconds = static_cast<unsigned>(atoi(argv[2]));
  for (int i = 0; i < n; i++) {
    pthread_t t;
    if (pthread_create(&t, nullptr, Worker, nullptr) != 0) return perror("pthread_create"), 1;
    pthread_detach(t);
  }
  if (argc == 4 && atoi(argv[3]) == 1) {
    int sv[2];
    char b[64] = "GET /";
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) != 0) return perror("socketpair"), 1;
    for (unsigned i = 0; i < g_seconds * 1000; i++) {
      if (send(sv[0], b, 16, 0) != 16 || recv(sv[1], b, sizeof(b), 0) != 16) return perror("send/recv"), 1;
      usleep(1000);
    }
    return 0;
  }
  sleep(g_seconds);
  return 0;
}
