// paced_client: a redis client that sends requests at a fixed rate, for the
// paced latency benchmark (bench/run_paced_latency.py). redis-benchmark
// drives the server as hard as it can, so its p99 is mostly queueing behind
// other clients; at a rate well under saturation a request waits only for
// what stalls the server's thread, which is what the recorder may add.
//
// Open loop on one connection (loopback only): request i is due at
// start + i / RATE; the client sleeps until then (or sends at once when a slow
// reply made it late) and alternates SET key:N and GET key:N over 1000 keys.
// Latency is from the send to the whole reply; "sched" latency is from the
// due time (it also counts the wait behind a slow reply, so one stall is
// counted for every request it delays). The first second is warm-up, not
// measured. Prints one line of "name value" pairs.
//   paced_client PORT RATE SECONDS
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void SleepUntil(uint64_t ns) {
  timespec ts{static_cast<time_t>(ns / 1000000000ull), static_cast<long>(ns % 1000000000ull)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {}
}

bool SendAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

// Reads one whole RESP reply of the two kinds we cause: "+OK\r\n" (SET) and
// "$N\r\n<N bytes>\r\n" (GET; "$-1\r\n" for a missing key).
bool ReadReply(int fd, std::string* buf) {
  buf->clear();
  char tmp[512];
  for (;;) {
    const size_t eol = buf->find("\r\n");
    if (eol != std::string::npos) {
      if ((*buf)[0] == '+' || (*buf)[0] == '-') return true;
      if ((*buf)[0] == '$') {
        const long len = atol(buf->c_str() + 1);
        if (len < 0) return true;
        if (buf->size() >= eol + 2 + static_cast<size_t>(len) + 2) return true;
      } else {
        return false;  // not a reply we asked for
      }
    }
    const ssize_t n = recv(fd, tmp, sizeof tmp, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    buf->append(tmp, static_cast<size_t>(n));
  }
}

std::string Command(bool set, int key) {
  const std::string k = "key:" + std::to_string(key);
  if (!set) return "*2\r\n$3\r\nGET\r\n$" + std::to_string(k.size()) + "\r\n" + k + "\r\n";
  const std::string v(32, 'v');
  return "*3\r\n$3\r\nSET\r\n$" + std::to_string(k.size()) + "\r\n" + k + "\r\n$" + std::to_string(v.size()) + "\r\n" +
         v + "\r\n";
}

double Pct(const std::vector<uint64_t>& sorted, double p) {
  if (sorted.empty()) return 0;
  size_t i = static_cast<size_t>(p / 100.0 * static_cast<double>(sorted.size()));
  if (i >= sorted.size()) i = sorted.size() - 1;
  return static_cast<double>(sorted[i]) / 1000.0;  // µs
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: paced_client PORT RATE SECONDS\n");
    return 2;
  }
  const int port = atoi(argv[1]);
  const double rate = atof(argv[2]), seconds = atof(argv[3]);
  if (port <= 0 || rate <= 0 || seconds <= 0) {
    fprintf(stderr, "paced_client: bad arguments\n");
    return 2;
  }
  prctl(PR_SET_TIMERSLACK, 1UL);  // wake on time: the default 50 µs slack would bunch requests
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    perror("paced_client: connect");
    return 1;
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);

  const uint64_t interval = static_cast<uint64_t>(1e9 / rate);
  const uint64_t warmup = static_cast<uint64_t>(rate);  // one second's requests
  const uint64_t total = warmup + static_cast<uint64_t>(rate * seconds);
  std::vector<std::string> cmds;
  for (int i = 0; i < 2000; ++i) cmds.push_back(Command(i % 2 == 0, (i / 2) % 1000));
  std::vector<uint64_t> lat, sched;
  lat.reserve(total);
  sched.reserve(total);
  std::string reply;
  uint64_t late = 0;
  const uint64_t start = NowNs() + 1000000;
  for (uint64_t i = 0; i < total; ++i) {
    const uint64_t due = start + i * interval;
    if (NowNs() < due) SleepUntil(due);
    const uint64_t t0 = NowNs();
    if (!SendAll(fd, cmds[i % cmds.size()]) || !ReadReply(fd, &reply)) {
      fprintf(stderr, "paced_client: connection failed at request %llu\n", static_cast<unsigned long long>(i));
      return 1;
    }
    const uint64_t t1 = NowNs();
    if (i < warmup) continue;
    if (t0 > due + interval) ++late;
    lat.push_back(t1 - t0);
    sched.push_back(t1 - due);
  }
  const double elapsed = static_cast<double>(NowNs() - start - warmup * interval) / 1e9;
  close(fd);
  std::sort(lat.begin(), lat.end());
  std::sort(sched.begin(), sched.end());
  printf(
      "requests %zu rate %.0f achieved_rate %.0f p50_us %.1f p90_us %.1f p99_us %.1f p999_us %.1f max_us %.1f "
      "sched_p99_us %.1f sched_p999_us %.1f late_sends %llu\n",
      lat.size(), rate, static_cast<double>(lat.size()) / elapsed, Pct(lat, 50), Pct(lat, 90), Pct(lat, 99),
      Pct(lat, 99.9), static_cast<double>(lat.back()) / 1000.0, Pct(sched, 99), Pct(sched, 99.9),
      static_cast<unsigned long long>(late));
  return 0;
}
