// demo_service: a small "service" for `make demo`. It runs for about two
// seconds: two named worker threads burn CPU in known functions, one of them
// allocates a growing index (and leaks part of it), a TCP echo server and
// client exchange requests on 127.0.0.1, and a housekeeping thread sleeps in
// poll(). Built like a distribution binary (-O2, no frame pointers).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace {

std::atomic<bool> g_stop{false};
std::atomic<uint64_t> g_sink{0};

__attribute__((noinline)) uint64_t checksum_block(uint64_t seed) {
  uint64_t h = seed;
  for (int i = 0; i < 200000; ++i) h = (h ^ (h >> 13)) * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(i);
  return h;
}

__attribute__((noinline)) uint64_t count_primes(uint64_t limit) {
  uint64_t n = 0;
  for (uint64_t x = 2; x < limit; ++x) {
    bool prime = true;
    for (uint64_t d = 2; d * d <= x; ++d)
      if (x % d == 0) { prime = false; break; }
    n += prime;
  }
  return n;
}

std::vector<std::string*> g_leaked;

__attribute__((noinline)) void build_index(int round) {
  std::map<int, std::string> index;
  for (int i = 0; i < 2000; ++i) index[i] = std::string(64 + (i % 128), 'x');
  // Part of every round is "accidentally" kept forever: a leak for the heap report.
  g_leaked.push_back(new std::string(4096 + round, 'L'));
  g_sink += index.size();
}

void* worker_main(void* arg) {
  const long id = reinterpret_cast<long>(arg);
  char name[16];
  snprintf(name, sizeof(name), "worker-%ld", id);
  pthread_setname_np(pthread_self(), name);
  for (int round = 0; !g_stop.load(); ++round) {
    if (id == 0) {
      g_sink += checksum_block(static_cast<uint64_t>(round));
      build_index(round);
    } else {
      g_sink += count_primes(20000);
    }
  }
  return nullptr;
}

void* housekeeping_main(void*) {
  pthread_setname_np(pthread_self(), "housekeeping");
  while (!g_stop.load()) poll(nullptr, 0, 50);  // blocked most of the time
  return nullptr;
}

__attribute__((noinline)) void handle_request(int fd, char* buf, ssize_t n) {
  g_sink += checksum_block(static_cast<uint64_t>(n)) & 1;
  ssize_t off = 0;
  while (off < n) {
    ssize_t w = send(fd, buf + off, static_cast<size_t>(n - off), 0);
    if (w <= 0) return;
    off += w;
  }
}

void* server_main(void* arg) {
  pthread_setname_np(pthread_self(), "echo-server");
  const int listener = static_cast<int>(reinterpret_cast<long>(arg));
  const int fd = accept(listener, nullptr, nullptr);
  if (fd < 0) return nullptr;
  char buf[4096];
  for (;;) {
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    handle_request(fd, buf, n);
  }
  close(fd);
  return nullptr;
}

}  // namespace

int main() {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (listener < 0 || bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(listener, 16) != 0 || getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    perror("demo_service: listen");
    return 1;
  }
  pthread_t workers[2], house, server;
  for (long i = 0; i < 2; ++i) pthread_create(&workers[i], nullptr, worker_main, reinterpret_cast<void*>(i));
  pthread_create(&house, nullptr, housekeeping_main, nullptr);
  pthread_create(&server, nullptr, server_main, reinterpret_cast<void*>(static_cast<long>(listener)));

  const int client = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    perror("demo_service: connect");
    return 1;
  }
  uint64_t requests = 0, bytes = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(2000);
  char msg[512], reply[512];
  memset(msg, 'r', sizeof(msg));
  while (std::chrono::steady_clock::now() < end) {
    const size_t n = 64 + (requests * 37) % 400;
    if (send(client, msg, n, 0) != static_cast<ssize_t>(n)) break;
    size_t got = 0;
    while (got < n) {
      ssize_t r = recv(client, reply + got, n - got, 0);
      if (r <= 0) break;
      got += static_cast<size_t>(r);
    }
    bytes += n;
    ++requests;
    usleep(2000);
  }
  close(client);
  g_stop = true;
  for (auto& w : workers) pthread_join(w, nullptr);
  pthread_join(house, nullptr);
  pthread_join(server, nullptr);
  close(listener);
  printf("demo_service: %llu requests, %llu bytes sent by the client, %zu leaked blocks\n",
         static_cast<unsigned long long>(requests), static_cast<unsigned long long>(bytes), g_leaked.size());
  return 0;
}
