// flush_socket_bench: the flush thread's per-event work for socket calls,
// in-process and single-threaded, so it can be timed and profiled without
// the noise of a server under load: socket.op records as a redis-like
// server produces them (20 accepted connections, a read and a write per
// request, ~1.7 µs apart) go through SocketFlushSide (the event, the
// pending queue, the connection table) and the SegmentWriter (columns,
// encode, zstd, write) exactly as the flush thread drives them: Process()
// once per drained batch, Flush() every 50 ms of record time. The TSC
// conversion and the ring are not included (ring_bench times the push).
// With `exchanges`, the default FLIGHTREC_SOCKETS=1 path instead: one
// socket.exchange per request (a RESP question's first bytes classified into
// its endpoint name, the event written), as OnExchangeRecord drives it.
//   flush_socket_bench [EVENTS [RUNS [exchanges]]]   the median of RUNS runs of EVENTS events
#include <arpa/inet.h>
#include <netinet/in.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/micro/bench_common.h"
#include "format/segment_writer.h"
#include "preload/sockets/decode/socket_events.h"
#include "preload/sockets/decode/socket_flush.h"

using namespace flightrec;
using bench::ThreadCpuNs;  // bench_common.h

namespace {

SocketAddrRecord Accepted(uint64_t t, uint64_t conn, uint64_t listener, int fd, AddrWhich which, bool complete) {
  SocketAddrRecord r{};
  r.time_ns = t;
  r.conn = conn;
  r.parent_conn = listener;
  r.fd = fd;
  r.role = uint8_t(sockfd::SockRole::kServer);
  r.family = uint8_t(sockfd::SockFamily::kInet);
  r.type = uint8_t(sockfd::SockType::kStream);
  r.which = uint8_t(which);
  r.complete = complete;
  sockaddr_in in{};
  in.sin_family = AF_INET;
  in.sin_port = htons(which == AddrWhich::kLocal ? 6379 : uint16_t(40000 + fd));
  inet_pton(AF_INET, "127.0.0.1", &in.sin_addr);
  memcpy(r.addr, &in, sizeof(in));
  r.addr_len = sizeof(in);
  return r;
}

SocketOpRecord Op(SockOp op, int fd, uint64_t conn, uint64_t start, uint64_t dur, int64_t result) {
  SocketOpRecord r{};
  r.start_ns = start;
  r.duration_ns = dur;
  r.result = result;
  r.conn = conn;
  r.fd = fd;
  r.op = uint8_t(op);
  return r;
}

// One run: flush-side CPU ns per event; *bytes_per_event from the sealed file.
// Returns a negative value on a writer error.
double RunOnce(long events, bool exchanges, double* bytes_per_event) {
  char dir[] = "/tmp/flush_socket_bench.XXXXXX";
  if (!mkdtemp(dir)) return perror("mkdtemp"), -1;
  const std::string path = std::string(dir) + "/s.active";

  format::SegmentWriter w;
  DefineSocketEventTypesOn(&w);
  format::SegmentHeaderInfo header;
  header.pid = static_cast<uint32_t>(getpid());
  std::string err;
  if (!w.Open(path, header, &err)) return fprintf(stderr, "open: %s\n", err.c_str()), -1;
  SocketFlushSide side{ConnProbe{}};
  side.ConfigureEndpoints(~0u, false, 1000, nullptr);
  // redis-benchmark's questions (their first bytes, as the hooks copy them).
  static const char* const kQuestions[] = {
      "*3\r\n$3\r\nSET\r\n$16\r\nkey:000000000042\r\n$3\r\nxxx\r\n",
      "*2\r\n$3\r\nGET\r\n$16\r\nkey:000000000042\r\n",
      "*3\r\n$5\r\nLPUSH\r\n$6\r\nmylist\r\n$3\r\nxxx\r\n",
      "*2\r\n$4\r\nLPOP\r\n$6\r\nmylist\r\n",
  };

  // Their lengths (as the record carries them): not a strlen per event, which
  // is the benchmark's own work, not the flush thread's.
  size_t kQuestionLen[4];
  for (int i = 0; i < 4; i++) kQuestionLen[i] = strlen(kQuestions[i]);

  constexpr int kConns = 20, kListenFd = 6, kFirstFd = 8;
  constexpr uint64_t kListener = 1;
  constexpr uint32_t kTid = 4242;
  constexpr long kDrain = 4096;                   // records per drained batch
  constexpr uint64_t kFlushEveryNs = 50'000'000;  // the flush tick
  uint64_t t = 1'000'000'000;
  for (int c = 0; c < kConns; c++) {
    const int fd = kFirstFd + c;
    side.OnAddr(Accepted(t, 2 + c, kListener, fd, AddrWhich::kPeer, false), kTid);
    side.OnAddr(Accepted(t, 2 + c, kListener, fd, AddrWhich::kLocal, true), kTid);
    side.OnOp(&w, Op(SockOp::kAccept, kListenFd, kListener, t - 500, 500, fd), kTid);
    t += 2000;
  }

  // Deterministic jitter: durations and gaps vary as on a real server.
  uint64_t x = 88172645463325252ull;
  auto rnd = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  const double cpu0 = ThreadCpuNs();
  uint64_t next_flush = t + kFlushEveryNs;
  long n = 0;
  while (exchanges && n < events) {
    for (long i = 0; i < kDrain && n < events; i++, n++) {
      const int c = static_cast<int>(rnd() % kConns);
      const int which = static_cast<int>(rnd() % 4);
      const char* q = kQuestions[which];
      ExchangeEvent e;
      e.conn = 2 + c;
      e.fd = kFirstFd + c;
      e.tid = kTid;
      e.time = QuantizeExchangeTime(t);
      e.ask_ns = 0;
      e.answer_ns = QuantizeExchangeTime(900 + rnd() % 600);
      e.end_ns = QuantizeExchangeTime(t + 1600 + rnd() % 300);
      e.bytes_in = kQuestionLen[which];
      e.bytes_out = 5;
      e.calls_in = 2;  // the data, then the read that finds nothing more
      e.calls_out = 1;
      e.would_block = 1;
      EndpointInfo info;
      side.Classify(reinterpret_cast<const uint8_t*>(q), kQuestionLen[which], &e, &info);
      side.OnExchange(&w, e, kTid, &info);
      t += 3300 + rnd() % 600;
    }
    side.Process(&w, t - kSocketTimeGrainNs, false);
    if (t >= next_flush) {
      next_flush = t + kFlushEveryNs;
      if (!w.Flush(&err)) return fprintf(stderr, "flush: %s\n", err.c_str()), -1;
    }
  }
  while (!exchanges && n < events) {
    for (long i = 0; i < kDrain && n < events; i += 2, n += 2) {
      const int c = static_cast<int>(rnd() % kConns);
      const int fd = kFirstFd + c;
      const uint64_t len = 27 + rnd() % 40;
      side.OnOp(&w, Op(SockOp::kRead, fd, 2 + c, t, 900 + rnd() % 600, static_cast<int64_t>(len)), kTid);
      t += 1600 + rnd() % 300;
      side.OnOp(&w, Op(SockOp::kWrite, fd, 2 + c, t, 1500 + rnd() % 900, 5), kTid);
      t += 1700 + rnd() % 300;
    }
    side.Process(&w, t - kSocketTimeGrainNs, false);
    if (t >= next_flush) {
      next_flush = t + kFlushEveryNs;
      if (!w.Flush(&err)) return fprintf(stderr, "flush: %s\n", err.c_str()), -1;
    }
  }
  side.Process(&w, t, true);
  if (!w.Seal({}, &err)) return fprintf(stderr, "seal: %s\n", err.c_str()), -1;
  const double ns = ThreadCpuNs() - cpu0;
  const double bytes = static_cast<double>(w.stats().bytes_written);
  unlink(path.c_str());
  rmdir(dir);
  *bytes_per_event = bytes / static_cast<double>(n);
  return ns / static_cast<double>(n);
}

}  // namespace

int main(int argc, char** argv) {
  const long events = argc > 1 ? atol(argv[1]) : 4'000'000;
  const int runs = argc > 2 ? atoi(argv[2]) : 5;
  const bool exchanges = argc > 3 && strcmp(argv[3], "exchanges") == 0;
  std::vector<double> ns;
  double bytes = 0;
  for (int i = 0; i < runs; i++) {
    const double v = RunOnce(events, exchanges, &bytes);
    if (v < 0) return 1;
    ns.push_back(v);
  }
  std::sort(ns.begin(), ns.end());
  printf(
      "flush_socket_bench: median %.1f ns per %s event (min %.1f, max %.1f; %d runs of %ld events), "
      "%.2f bytes per event on disk\n",
      ns[ns.size() / 2], exchanges ? "socket.exchange (RESP endpoint classified)" : "socket.op", ns.front(), ns.back(),
      runs, events, bytes);
  return 0;
}
