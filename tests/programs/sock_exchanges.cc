// Socket exchanges with known counts, for the exchange records of
// preload/sockets/socket_exchange.h (tests/integration/test_socket_exchanges.py).
// Loopback only. Modes (argv[1]):
//
//   echo N REQ RESP   one TCP connection, N exchanges: the client sends REQ
//                     bytes in two sends, the server reads them (as many
//                     reads as it takes) and answers RESP bytes in two
//                     sends; then the client shuts down, the server reads
//                     EOF, both close.
//   download MS       one request of 4 bytes, then the server streams 64 KiB
//                     writes for MS milliseconds (one exchange that stays
//                     open longer than the recorder's 1 s bound); the client
//                     reads until EOF.
//   wouldblock K      a non-blocking socketpair end: K receives that find no
//                     data (EAGAIN), then one send on a connection whose
//                     peer has closed and reset it (an error: EPIPE or
//                     ECONNRESET).
//   udp THREADS M SIZE  THREADS threads share one connected UDP socket and
//                     each sends M datagrams of SIZE bytes; a receiver reads
//                     them all.
//
// Prints one line of what it did, e.g. "echo exchanges=5 req=100 resp=300".
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

namespace {

void Die(const char* what) {
  perror(what);
  exit(2);
}

uint64_t NowMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000 + uint64_t(ts.tv_nsec) / 1000000;
}

// A listener on 127.0.0.1 with a kernel-chosen port; *port gets it.
int Listen(int* port) {
  const int l = socket(AF_INET, SOCK_STREAM, 0);
  if (l < 0) Die("socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(l, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) Die("bind");
  if (listen(l, 4) != 0) Die("listen");
  socklen_t len = sizeof(a);
  getsockname(l, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return l;
}

int Connect(int port) {
  const int c = socket(AF_INET, SOCK_STREAM, 0);
  if (c < 0) Die("socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(c, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) Die("connect");
  return c;
}

void SendAll(int fd, const char* p, size_t n) {
  while (n) {
    const ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w <= 0) Die("send");
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void RecvAll(int fd, char* p, size_t n) {
  while (n) {
    const ssize_t r = recv(fd, p, n, 0);
    if (r <= 0) Die("recv");
    p += r;
    n -= static_cast<size_t>(r);
  }
}

int Echo(int n, size_t req, size_t resp) {
  int port;
  const int l = Listen(&port);
  std::thread server([&] {
    const int s = accept(l, nullptr, nullptr);
    if (s < 0) Die("accept");
    std::vector<char> in(req), out(resp, 'r');
    for (int i = 0; i < n; ++i) {
      RecvAll(s, in.data(), req);
      SendAll(s, out.data(), resp / 2);
      SendAll(s, out.data() + resp / 2, resp - resp / 2);
    }
    char c;
    if (recv(s, &c, 1, 0) != 0) Die("expected EOF");
    close(s);
  });
  const int c = Connect(port);
  std::vector<char> out(req, 'q'), in(resp);
  for (int i = 0; i < n; ++i) {
    SendAll(c, out.data(), req / 2);
    SendAll(c, out.data() + req / 2, req - req / 2);
    RecvAll(c, in.data(), resp);
  }
  shutdown(c, SHUT_WR);
  server.join();
  close(c);
  close(l);
  printf("echo exchanges=%d req=%zu resp=%zu\n", n, req, resp);
  return 0;
}

int Download(uint64_t ms) {
  int port;
  const int l = Listen(&port);
  std::atomic<uint64_t> sent{0};
  std::thread server([&] {
    const int s = accept(l, nullptr, nullptr);
    if (s < 0) Die("accept");
    char req[4];
    RecvAll(s, req, sizeof(req));
    std::vector<char> chunk(65536, 'd');
    const uint64_t until = NowMs() + ms;
    while (NowMs() < until) {
      SendAll(s, chunk.data(), chunk.size());
      sent += chunk.size();
    }
    close(s);
  });
  const int c = Connect(port);
  SendAll(c, "GET!", 4);
  std::vector<char> buf(65536);
  uint64_t got = 0;
  for (;;) {
    const ssize_t r = recv(c, buf.data(), buf.size(), 0);
    if (r < 0) Die("recv");
    if (r == 0) break;
    got += static_cast<uint64_t>(r);
  }
  server.join();
  close(c);
  close(l);
  printf("download bytes=%llu sent=%llu\n", static_cast<unsigned long long>(got),
         static_cast<unsigned long long>(sent.load()));
  return got == sent ? 0 : 1;
}

int WouldBlock(int k) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) != 0) Die("socketpair");
  char b[16];
  int eagain = 0;
  for (int i = 0; i < k; ++i)
    if (recv(sv[0], b, sizeof(b), 0) < 0 && errno == EAGAIN) eagain++;
  close(sv[0]);
  close(sv[1]);
  // A send on a TCP connection the peer reset: SO_LINGER 0 makes its close an RST.
  int port;
  const int l = Listen(&port);
  const int c = Connect(port);
  const int s = accept(l, nullptr, nullptr);
  linger lg{1, 0};
  setsockopt(s, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
  close(s);
  int errors = 0;
  for (int i = 0; i < 50 && errors == 0; ++i) {  // the RST arrives at once on loopback; a few tries at most
    if (send(c, "x", 1, MSG_NOSIGNAL) < 0 && (errno == EPIPE || errno == ECONNRESET)) errors++;
    else usleep(1000);
  }
  close(c);
  close(l);
  printf("wouldblock eagain=%d errors=%d\n", eagain, errors);
  return eagain == k && errors == 1 ? 0 : 1;
}

int Udp(int threads, int m, size_t size) {
  const int r = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(r, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) Die("bind");
  socklen_t len = sizeof(a);
  getsockname(r, reinterpret_cast<sockaddr*>(&a), &len);
  int rcvbuf = 8 << 20;
  setsockopt(r, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
  const int u = socket(AF_INET, SOCK_DGRAM, 0);
  if (connect(u, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) Die("connect");
  const long total = long(threads) * m;
  std::atomic<long> received{0};
  std::thread reader([&] {
    std::vector<char> buf(size + 1);
    while (received < total) {
      const ssize_t n = recv(r, buf.data(), buf.size(), 0);
      if (n < 0) Die("recv");
      received++;
    }
  });
  std::vector<std::thread> senders;
  std::vector<char> payload(size, 'u');
  std::atomic<long> sent{0};
  for (int t = 0; t < threads; ++t)
    senders.emplace_back([&] {
      for (int i = 0; i < m; ++i) {
        // Paced so the receiver keeps up: a datagram lost to a full buffer
        // would leave the reader waiting.
        while (sent - received > 256) sched_yield();
        if (send(u, payload.data(), size, 0) != static_cast<ssize_t>(size)) Die("send");
        sent++;
      }
    });
  for (auto& t : senders) t.join();
  reader.join();
  close(u);
  close(r);
  printf("udp datagrams=%ld size=%zu\n", total, size);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s echo N REQ RESP | download MS | wouldblock K | udp THREADS M SIZE\n", argv[0]);
    return 2;
  }
  const char* mode = argv[1];
  if (!strcmp(mode, "echo") && argc == 5) return Echo(atoi(argv[2]), strtoul(argv[3], nullptr, 10),
                                                      strtoul(argv[4], nullptr, 10));
  if (!strcmp(mode, "download")) return Download(strtoull(argv[2], nullptr, 10));
  if (!strcmp(mode, "wouldblock")) return WouldBlock(atoi(argv[2]));
  if (!strcmp(mode, "udp") && argc == 5) return Udp(atoi(argv[2]), atoi(argv[3]), strtoul(argv[4], nullptr, 10));
  fprintf(stderr, "bad arguments\n");
  return 2;
}
