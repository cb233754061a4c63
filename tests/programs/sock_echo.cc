// sock_echo: a threaded request/response server and client over loopback
// with known byte counts, for the socket tests.
//
//   sock_echo [conns_per_phase] [requests_per_conn] [cpu_us_per_request] [family]
//     family: tcp4 (default), tcp6, unix
//
// Three phases, each with conns_per_phase client connections (two client
// threads, a server thread per connection):
//   phase 0 uses send/recv, phase 1 read/write, phase 2 sendmsg/recvmsg.
// Connection i of a phase sends requests of 100 + 37*i bytes and gets
// answers of 2*request+1 bytes; the server burns cpu_us of CPU per request in
// echo_handle_request (so CPU samples land inside requests). Every request
// is read and answered in several pieces (so requests span several ops).
//
// Output, one line per client connection and a total:
//   conn phase=P local=PORT_OR_PATH sent=N received=M requests=R
//   total conns=C requests=R client_sent=N client_received=M
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

enum Api { kSendRecv = 0, kReadWrite = 1, kMsg = 2 };

int g_family = AF_INET;
std::string g_unix_path;
int g_cpu_us = 0;

// Moves exactly n bytes with the phase's API, in pieces of at most `piece`.
bool SendAll(int fd, Api api, const char* p, size_t n, size_t piece) {
  while (n > 0) {
    const size_t chunk = n < piece ? n : piece;
    ssize_t w;
    if (api == kSendRecv) {
      w = send(fd, p, chunk, MSG_NOSIGNAL);
    } else if (api == kReadWrite) {
      w = write(fd, p, chunk);
    } else {
      // Two iovecs so the gather path is exercised.
      iovec iov[2] = {{const_cast<char*>(p), chunk / 2}, {const_cast<char*>(p) + chunk / 2, chunk - chunk / 2}};
      msghdr m{};
      m.msg_iov = iov;
      m.msg_iovlen = 2;
      w = sendmsg(fd, &m, MSG_NOSIGNAL);
    }
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Reads exactly n bytes (false on EOF/error); pieces of at most `piece`.
bool RecvAll(int fd, Api api, char* p, size_t n, size_t piece) {
  while (n > 0) {
    const size_t chunk = n < piece ? n : piece;
    ssize_t r;
    if (api == kSendRecv) {
      r = recv(fd, p, chunk, 0);
    } else if (api == kReadWrite) {
      r = read(fd, p, chunk);
    } else {
      iovec iov{p, chunk};
      msghdr m{};
      m.msg_iov = &iov;
      m.msg_iovlen = 1;
      r = recvmsg(fd, &m, 0);
    }
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// One EOF probe with the phase's API: true when the peer closed.
bool AtEof(int fd, Api api) {
  char c;
  if (api == kSendRecv) return recv(fd, &c, 1, 0) == 0;
  if (api == kReadWrite) return read(fd, &c, 1) == 0;
  iovec iov{&c, 1};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  return recvmsg(fd, &m, 0) == 0;
}

double ThreadCpuUs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

// The server's work per request: burn CPU, then build the answer.
__attribute__((noinline)) void echo_handle_request(const char* req, size_t n, char* resp) {
  const double until = ThreadCpuUs() + g_cpu_us;
  volatile uint64_t h = 1469598103934665603ull;
  while (ThreadCpuUs() < until)
    for (int i = 0; i < 1000; ++i) h = (h ^ static_cast<uint64_t>(i)) * 1099511628211ull;
  for (size_t i = 0; i < n; ++i) resp[2 * i] = resp[2 * i + 1] = req[i];
  resp[2 * n] = '\n';
}

struct Server {
  int listen_fd = -1;
  std::string where;  // port or path
};

Server Listen() {
  Server s;
  s.listen_fd = socket(g_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s.listen_fd < 0) {
    perror("socket");
    exit(1);
  }
  int one = 1;
  setsockopt(s.listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_storage ss{};
  socklen_t len;
  if (g_family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    len = sizeof(*a);
  } else if (g_family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    a->sin6_addr = in6addr_loopback;
    len = sizeof(*a);
  } else {
    auto* a = reinterpret_cast<sockaddr_un*>(&ss);
    a->sun_family = AF_UNIX;
    g_unix_path = "/tmp/sock_echo." + std::to_string(getpid());
    unlink(g_unix_path.c_str());
    snprintf(a->sun_path, sizeof(a->sun_path), "%s", g_unix_path.c_str());
    len = sizeof(*a);
  }
  if (bind(s.listen_fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 || listen(s.listen_fd, 64) != 0) {
    perror("bind/listen");
    exit(1);
  }
  len = sizeof(ss);
  getsockname(s.listen_fd, reinterpret_cast<sockaddr*>(&ss), &len);
  return s;
}

// Requests go out in several small writes: without TCP_NODELAY, Nagle plus
// delayed ACKs would add ~40 ms to every exchange.
void NoDelay(int fd) {
  int one = 1;
  if (g_family != AF_UNIX) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

int Connect(const Server& s) {
  const int fd = socket(g_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  NoDelay(fd);
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  getsockname(s.listen_fd, reinterpret_cast<sockaddr*>(&ss), &len);
  if (connect(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    perror("connect");
    exit(1);
  }
  return fd;
}

std::string LocalName(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  if (ss.ss_family == AF_INET) return std::to_string(ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port));
  if (ss.ss_family == AF_INET6) return std::to_string(ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port));
  return "unix";
}

void ServeConnection(int fd, Api api) {
  NoDelay(fd);
  // Request sizes are known from the protocol: a 4-byte length prefix.
  std::vector<char> req, resp;
  for (;;) {
    uint32_t n;
    if (!RecvAll(fd, api, reinterpret_cast<char*>(&n), sizeof(n), sizeof(n))) break;
    req.resize(n);
    if (!RecvAll(fd, api, req.data(), n, 64)) break;
    resp.resize(2 * n + 1);
    echo_handle_request(req.data(), n, resp.data());
    if (!SendAll(fd, api, resp.data(), resp.size(), 128)) break;
  }
  close(fd);
}

void* ServerThread(void* arg) {
  const intptr_t packed = reinterpret_cast<intptr_t>(arg);
  pthread_setname_np(pthread_self(), "echo-server");
  ServeConnection(static_cast<int>(packed >> 8), static_cast<Api>(packed & 0xff));
  return nullptr;
}

struct ClientResult {
  std::string local;
  uint64_t sent = 0, received = 0, requests = 0;
};

ClientResult RunClient(const Server& s, Api api, int index, int requests) {
  ClientResult r;
  const int fd = Connect(s);
  r.local = LocalName(fd);
  const uint32_t n = 100 + 37 * static_cast<uint32_t>(index);
  std::vector<char> req(sizeof(n) + n), resp(2 * n + 1);
  memcpy(req.data(), &n, sizeof(n));
  for (uint32_t i = 0; i < n; ++i) req[sizeof(n) + i] = static_cast<char>('a' + (i + index) % 26);
  for (int k = 0; k < requests; ++k) {
    if (!SendAll(fd, api, req.data(), req.size(), 96) || !RecvAll(fd, api, resp.data(), resp.size(), 200)) {
      fprintf(stderr, "client %d: short exchange\n", index);
      exit(1);
    }
    r.sent += req.size();
    r.received += resp.size();
    r.requests++;
  }
  // Half-close, then wait for the server's close: every byte is accounted for
  // on both sides before the connection goes away.
  shutdown(fd, SHUT_WR);
  if (!AtEof(fd, api)) fprintf(stderr, "client %d: expected EOF\n", index);
  close(fd);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const int conns = argc > 1 ? atoi(argv[1]) : 6;
  const int requests = argc > 2 ? atoi(argv[2]) : 10;
  g_cpu_us = argc > 3 ? atoi(argv[3]) : 0;
  const std::string family = argc > 4 ? argv[4] : "tcp4";
  g_family = family == "tcp6" ? AF_INET6 : family == "unix" ? AF_UNIX : AF_INET;
  const Server s = Listen();

  uint64_t total_sent = 0, total_received = 0, total_requests = 0;
  int total_conns = 0;
  for (int phase = 0; phase < 3; ++phase) {
    const Api api = static_cast<Api>(phase);
    // Accept on this thread, serve each connection on its own thread.
    std::thread acceptor([&] {
      for (int i = 0; i < conns; ++i) {
        const int fd = accept(s.listen_fd, nullptr, nullptr);
        if (fd < 0) {
          perror("accept");
          exit(1);
        }
        pthread_t t;
        pthread_create(&t, nullptr, ServerThread, reinterpret_cast<void*>((intptr_t(fd) << 8) | phase));
        pthread_detach(t);
      }
    });
    std::vector<ClientResult> results(conns);
    std::vector<std::thread> clients;
    std::atomic<int> next{0};
    for (int t = 0; t < 2; ++t) {
      clients.emplace_back([&] {
        for (int i; (i = next.fetch_add(1)) < conns;) results[i] = RunClient(s, api, i, requests);
      });
    }
    for (auto& t : clients) t.join();
    acceptor.join();
    for (const ClientResult& r : results) {
      printf("conn phase=%d local=%s sent=%llu received=%llu requests=%llu\n", phase, r.local.c_str(),
             static_cast<unsigned long long>(r.sent), static_cast<unsigned long long>(r.received),
             static_cast<unsigned long long>(r.requests));
      total_sent += r.sent;
      total_received += r.received;
      total_requests += r.requests;
      total_conns++;
    }
  }
  close(s.listen_fd);
  if (!g_unix_path.empty()) unlink(g_unix_path.c_str());
  printf("total conns=%d requests=%llu client_sent=%llu client_received=%llu\n", total_conns,
         static_cast<unsigned long long>(total_requests), static_cast<unsigned long long>(total_sent),
         static_cast<unsigned long long>(total_received));
  return 0;
}
