/* req_slow: a request/response server on 127.0.0.1 whose slow requests are
 * slow for a known reason, for `requests --diff`. One client connection
 * sends REQUESTS requests of 64 bytes; the server thread answers each with
 * fast_path() (FAST_US of CPU) except every 8th, which goes through
 * slow_path() (SLOW_US of CPU). The slowest requests must then show
 * slow_path as where they spend more time than typical ones.
 *
 * usage: req_slow [REQUESTS (default 160)] [FAST_US (default 300)] [SLOW_US (default 15000)]
 * prints "req_slow: N requests, M slow" */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "burn_common.h"

static int fast_us = 300, slow_us = 15000;

__attribute__((noinline, noipa)) void fast_path(void) { BURN_CPU(fast_us * 1e-6, 2000); }
__attribute__((noinline, noipa)) void slow_path(void) { BURN_CPU(slow_us * 1e-6, 2000); }

static int read_full(int fd, char* buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = recv(fd, buf + got, n - got, 0);
    if (r <= 0) return -1;
    got += (size_t)r;
  }
  return 0;
}

static void* server_main(void* arg) {
  const int listener = (int)(long)arg;
  const int fd = accept(listener, NULL, NULL);
  if (fd < 0) return NULL;
  char buf[64];
  for (unsigned n = 0; read_full(fd, buf, sizeof(buf)) == 0; ++n) {
    if (n % 8 == 7) slow_path(); else fast_path();
    if (send(fd, buf, sizeof(buf), 0) != (ssize_t)sizeof(buf)) break;
  }
  close(fd);
  return NULL;
}

int main(int argc, char** argv) {
  const int requests = argc > 1 ? atoi(argv[1]) : 160;
  if (argc > 2) fast_us = atoi(argv[2]);
  if (argc > 3) slow_us = atoi(argv[3]);
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof(addr);
  if (listener < 0 || bind(listener, (struct sockaddr*)&addr, sizeof(addr)) != 0 || listen(listener, 4) != 0 ||
      getsockname(listener, (struct sockaddr*)&addr, &len) != 0) {
    perror("req_slow: listen");
    return 1;
  }
  pthread_t server;
  pthread_create(&server, NULL, server_main, (void*)(long)listener);
  const int client = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(client, (struct sockaddr*)&addr, sizeof(addr)) != 0) {
    perror("req_slow: connect");
    return 1;
  }
  char msg[64], reply[64];
  memset(msg, 'q', sizeof(msg));
  int done = 0;
  for (; done < requests; ++done) {
    if (send(client, msg, sizeof(msg), 0) != (ssize_t)sizeof(msg) || read_full(client, reply, sizeof(reply)) != 0) break;
    usleep(1000);
  }
  close(client);
  pthread_join(server, NULL);
  close(listener);
  printf("req_slow: %d requests, %d slow\n", done, done / 8);
  return done == requests ? 0 : 1;
}
