// sock_bench: what the socket hooks cost.
//
// 1. Added ns per recorded call, measured inside one preloaded process: the
//    child alternates short batches of send+recv (64 bytes, a socketpair)
//    made through the hooks and made directly to libc's functions (bypassing
//    the hooks), and reports the difference of the fastest batches of each
//    side (the least disturbed by neighbours) and the median over batch
//    pairs of the difference; the median over 5 such processes is printed.
//    Both sides share the process, the socket, the caches and the moment, so
//    the neighbours on a shared machine cancel out of the difference; across
//    processes they do not (a recorded pair is ~3 us, the hook ~0.03 us).
//    Same for write+read on a pipe (not a socket: the one fd-table lookup).
//    Run with recording on and with FLIGHTREC_SOCKETS=0 (hooks only forward).
// 2. Process-level ratios, as before: plain vs preloaded (SOCKETS=0 and
//    recording) in alternating child processes, with the process's extra CPU
//    per recorded call including the flush thread that encodes the events.
// Times are the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID).
//
//   sock_bench LIB            compare (LIB = path to libflightrec.so; SOCK_BENCH_SOCKETS=calls
//                             records one event per call instead of one per exchange)
//   sock_bench --child        process-level measurement: "socket_ns pipe_ns process_ns"
//   sock_bench --interleaved  in-process measurement: added ns per call, socket and pipe,
//                             fastest batches then medians, then a non-blocking socket's
//                             fastest and median: "sock pipe sock_med pipe_med nb nb_med"
//   sock_bench --endpoints LIB  the cost of endpoint names (issue 41): redis-shaped
//                             exchanges (a 36-byte question, an 8-byte answer, both ends of a
//                             non-blocking socketpair: every exchange copies its question's
//                             prefix) hooked vs direct, in processes with FLIGHTREC_ENDPOINTS=on
//                             and =off alternating; added ns per call, and on minus off
#include <dlfcn.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/micro/bench_common.h"

namespace {

using bench::Median;
using bench::ThreadCpuNs;

constexpr int kPairsPerBatch = 2000;
constexpr int kBatches = 40;
// In-process: many short alternating batches, so drift cannot favour a side.
constexpr int kInterleavedPairs = 100;
constexpr int kInterleavedRounds = 1000;

double ProcessCpuNs() {
  rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e9 + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e3;
}

using SendFn = ssize_t (*)(int, const void*, size_t, int);
using RecvFn = ssize_t (*)(int, void*, size_t, int);
using WriteFn = ssize_t (*)(int, const void*, size_t);
using ReadFn = ssize_t (*)(int, void*, size_t);

struct Io {
  SendFn send;
  RecvFn recv;
  WriteFn write;
  ReadFn read;
};

// One batch of n pairs through io; thread CPU ns per pair.
double SocketBatch(const Io& io, int wfd, int rfd, int n) {
  char buf[64] = {};
  const double t0 = ThreadCpuNs();
  for (int i = 0; i < n; ++i)
    if (io.send(wfd, buf, sizeof(buf), 0) != sizeof(buf) || io.recv(rfd, buf, sizeof(buf), 0) != sizeof(buf)) exit(2);
  return (ThreadCpuNs() - t0) / n;
}

double PipeBatch(const Io& io, int wfd, int rfd, int n) {
  char buf[64] = {};
  const double t0 = ThreadCpuNs();
  for (int i = 0; i < n; ++i)
    if (io.write(wfd, buf, sizeof(buf)) != sizeof(buf) || io.read(rfd, buf, sizeof(buf)) != sizeof(buf)) exit(2);
  return (ThreadCpuNs() - t0) / n;
}

// The calls as the program makes them: through the preload's hooks, if any.
Io HookedIo() { return Io{send, recv, write, read}; }

// libc's own definitions, bypassing any interposer.
bool DirectIo(Io* io) {
  void* libc = dlopen("libc.so.6", RTLD_NOLOAD | RTLD_LAZY);
  if (!libc) return false;
  io->send = reinterpret_cast<SendFn>(dlsym(libc, "send"));
  io->recv = reinterpret_cast<RecvFn>(dlsym(libc, "recv"));
  io->write = reinterpret_cast<WriteFn>(dlsym(libc, "write"));
  io->read = reinterpret_cast<ReadFn>(dlsym(libc, "read"));
  return io->send && io->recv && io->write && io->read;
}

double MedianNsPerPair(int wfd, int rfd, bool use_socket_api) {
  const Io io = HookedIo();
  std::vector<double> per_batch;
  for (int b = 0; b < kBatches; ++b)
    per_batch.push_back(use_socket_api ? SocketBatch(io, wfd, rfd, kPairsPerBatch)
                                       : PipeBatch(io, wfd, rfd, kPairsPerBatch));
  return Median(per_batch);
}

int Child() {
  int sv[2], pp[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0 || pipe(pp) != 0) return 1;
  MedianNsPerPair(sv[0], sv[1], true);  // warm up (thread registration, page faults)
  const double cpu0 = ProcessCpuNs();
  const double sock = MedianNsPerPair(sv[0], sv[1], true);
  // Let the flush thread catch up (it drains every 5 ms) before counting.
  usleep(50000);
  const double sock_process = (ProcessCpuNs() - cpu0) / (kBatches * kPairsPerBatch);
  const double pipe_ns = MedianNsPerPair(pp[1], pp[0], false);
  printf("%.1f %.1f %.1f\n", sock, pipe_ns, sock_process);
  return 0;
}

// Added ns per call: half the median of (hooked pair - direct pair) over
// alternating batches (which side goes first alternates too).
int Interleaved() {
  int sv[2], nb[2], pp[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0 || pipe(pp) != 0) return 1;
  // Non-blocking, as servers' sockets are: the hooks may then skip libc's
  // wrapper (preload/sockets/socket_direct.h).
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, nb) != 0) return 1;
  Io direct;
  if (!DirectIo(&direct)) return 1;
  const Io hooked = HookedIo();
  for (int i = 0; i < 20; ++i) {  // warm up both paths
    SocketBatch(hooked, sv[0], sv[1], kInterleavedPairs);
    SocketBatch(direct, sv[0], sv[1], kInterleavedPairs);
  }
  std::vector<double> sock_h, sock_d, pipe_h, pipe_d, nb_h, nb_d;
  for (int r = 0; r < kInterleavedRounds; ++r) {
    const bool hooked_first = r & 1;
    for (int side = 0; side < 2; ++side) {
      const bool hooked_now = (side == 0) == hooked_first;
      (hooked_now ? sock_h : sock_d)
          .push_back(SocketBatch(hooked_now ? hooked : direct, sv[0], sv[1], kInterleavedPairs));
    }
    for (int side = 0; side < 2; ++side) {
      const bool hooked_now = (side == 0) == hooked_first;
      (hooked_now ? pipe_h : pipe_d)
          .push_back(PipeBatch(hooked_now ? hooked : direct, pp[1], pp[0], kInterleavedPairs));
    }
    for (int side = 0; side < 2; ++side) {
      const bool hooked_now = (side == 0) == hooked_first;
      (hooked_now ? nb_h : nb_d).push_back(SocketBatch(hooked_now ? hooked : direct, nb[0], nb[1], kInterleavedPairs));
    }
  }
  // Per call (a pair is two calls): the difference of the fastest batches (the
  // least disturbed by neighbours) and the median of the per-round differences.
  auto added = [](const std::vector<double>& h, const std::vector<double>& d, double* fastest, double* median) {
    *fastest = (*std::min_element(h.begin(), h.end()) - *std::min_element(d.begin(), d.end())) / 2;
    std::vector<double> diff;
    for (size_t i = 0; i < h.size(); ++i) diff.push_back((h[i] - d[i]) / 2);
    *median = Median(diff);
  };
  double sf, sm, pf, pm, nf, nm;
  added(sock_h, sock_d, &sf, &sm);
  added(pipe_h, pipe_d, &pf, &pm);
  added(nb_h, nb_d, &nf, &nm);
  printf("%.1f %.1f %.1f %.1f %.1f %.1f\n", sf, pf, sm, pm, nf, nm);
  return 0;
}

// One batch of n redis-shaped exchanges (question on a, answer from b, and
// the mirror on b's side: each end sees a question then an answer); thread
// CPU ns per exchange (4 calls).
double ExchangeBatch(const Io& io, int a, int b, int n) {
  char q[36], r[40];
  memcpy(q, "*2\r\n$3\r\nGET\r\n$16\r\nkey:000000000001\r\n", 36);
  const double t0 = ThreadCpuNs();
  for (int i = 0; i < n; ++i) {
    if (io.send(a, q, 36, 0) != 36 || io.recv(b, r, 36, 0) != 36) exit(2);
    if (io.send(b, "$1\r\nx\r\n\0", 8, 0) != 8 || io.recv(a, r, 8, 0) != 8) exit(2);
  }
  return (ThreadCpuNs() - t0) / n;
}

// In-process: added ns per call over exchanges, "fastest median".
int ExchangeChild() {
  int nb[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, nb) != 0) return 1;
  Io direct;
  if (!DirectIo(&direct)) return 1;
  const Io hooked = HookedIo();
  for (int i = 0; i < 20; ++i) {
    ExchangeBatch(hooked, nb[0], nb[1], kInterleavedPairs);
    ExchangeBatch(direct, nb[0], nb[1], kInterleavedPairs);
  }
  std::vector<double> h, d;
  for (int r = 0; r < kInterleavedRounds; ++r) {
    const bool hooked_first = r & 1;
    for (int side = 0; side < 2; ++side) {
      const bool hooked_now = (side == 0) == hooked_first;
      (hooked_now ? h : d).push_back(ExchangeBatch(hooked_now ? hooked : direct, nb[0], nb[1], kInterleavedPairs));
    }
  }
  std::vector<double> diff;
  for (size_t i = 0; i < h.size(); ++i) diff.push_back((h[i] - d[i]) / 4);
  printf("%.1f %.1f\n", (*std::min_element(h.begin(), h.end()) - *std::min_element(d.begin(), d.end())) / 4,
         Median(diff));
  return 0;
}

int Endpoints(const char* libpath) {
  char dir[] = "/tmp/fr-sock-bench-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  const std::string lib = std::string("LD_PRELOAD=") + libpath;
  const std::string out = std::string("FLIGHTREC_OUTPUT=") + dir;
  const std::vector<std::string> base = {lib, out, "FLIGHTREC_SAMPLER=off", "FLIGHTREC_ALLOC_SAMPLE_BYTES=0",
                                         "FLIGHTREC_RING_BYTES=1M"};
  std::vector<std::string> on = base, off = base;
  on.push_back("FLIGHTREC_ENDPOINTS=on");
  off.push_back("FLIGHTREC_ENDPOINTS=off");
  std::vector<double> v, fast[2], med[2], delta;
  constexpr int kProcesses = 7;
  for (int round = 0; round < kProcesses; ++round) {
    double m[2];
    for (int c = 0; c < 2; ++c) {
      if (!bench::RunSelf("sock_bench", "--exchange-child", c == 0 ? on : off, 2, &v)) {
        fprintf(stderr, "sock_bench: exchange run failed\n");
        return 1;
      }
      fast[c].push_back(v[0]);
      med[c].push_back(v[1]);
      m[c] = v[1];
    }
    delta.push_back(m[0] - m[1]);
  }
  printf(
      "endpoint names: added ns per call over redis-shaped exchanges (36-byte question, 8-byte answer,\n"
      "non-blocking socketpair, hooked vs libc direct in-process; median of %d processes each)\n",
      kProcesses);
  printf("  %-28s %10s %10s\n", "", "fastest", "median");
  printf("  %-28s %10.1f %10.1f\n", "FLIGHTREC_ENDPOINTS=on", Median(fast[0]), Median(med[0]));
  printf("  %-28s %10.1f %10.1f\n", "FLIGHTREC_ENDPOINTS=off", Median(fast[1]), Median(med[1]));
  printf("  endpoints on minus off, per call: %+.1f ns (median over paired processes)\n", Median(delta));
  std::string rm = std::string("rm -rf ") + dir;
  if (system(rm.c_str()) != 0) return 1;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "--child") == 0) return Child();
  if (argc > 1 && strcmp(argv[1], "--interleaved") == 0) return Interleaved();
  if (argc > 1 && strcmp(argv[1], "--exchange-child") == 0) return ExchangeChild();
  if (argc > 2 && strcmp(argv[1], "--endpoints") == 0) return Endpoints(argv[2]);
  if (argc < 2) {
    fprintf(stderr, "usage: sock_bench PATH/libflightrec.so\n");
    return 2;
  }
  char dir[] = "/tmp/fr-sock-bench-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  const std::string lib = std::string("LD_PRELOAD=") + argv[1];
  const std::string out = std::string("FLIGHTREC_OUTPUT=") + dir;
  const std::vector<std::string> quiet = {"FLIGHTREC_SAMPLER=off", "FLIGHTREC_ALLOC_SAMPLE_BYTES=0"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> env = {lib, out};
    env.insert(env.end(), quiet.begin(), quiet.end());
    env.insert(env.end(), extra.begin(), extra.end());
    return env;
  };
  // SOCK_BENCH_SOCKETS=calls: the recording side records one event per call
  // (FLIGHTREC_SOCKETS=calls) instead of one per exchange (the default).
  const char* mode = getenv("SOCK_BENCH_SOCKETS");
  std::vector<std::string> recording = {"FLIGHTREC_RING_BYTES=1M"};
  if (mode && *mode) recording.push_back(std::string("FLIGHTREC_SOCKETS=") + mode);
  const std::string recording_name = std::string("preloaded, recording") + (mode && *mode ? " (" : "") +
                                     (mode && *mode ? mode : "") + (mode && *mode ? ")" : "");
  const std::vector<std::vector<std::string>> configs = {{}, with({"FLIGHTREC_SOCKETS=0"}), with(recording)};
  const char* names[] = {"plain", "preloaded, FLIGHTREC_SOCKETS=0", recording_name.c_str()};

  // 1. In-process, hooked vs direct; the two configurations alternate.
  constexpr int kProcesses = 5;
  std::vector<double> v;
  // [config][metric]: metrics are socket fastest, pipe fastest, socket median, pipe median,
  // non-blocking socket fastest, non-blocking socket median.
  std::vector<std::vector<double>> added[2] = {std::vector<std::vector<double>>(6),
                                               std::vector<std::vector<double>>(6)};
  for (int round = 0; round < kProcesses; ++round) {
    for (int c = 0; c < 2; ++c) {
      const int config = c == 0 ? 2 : 1;
      if (!bench::RunSelf("sock_bench", "--interleaved", configs[config], 6, &v)) {
        fprintf(stderr, "sock_bench: in-process run failed (%s)\n", names[config]);
        return 1;
      }
      for (int m = 0; m < 6; ++m) added[c][m].push_back(v[m]);
    }
  }
  printf(
      "socket hooks, added ns per call on the calling thread (in-process: hooked vs libc direct,\n"
      "%d alternating batches of %d pairs; median of %d processes; CPU and allocation sampling off).\n"
      "fastest: difference of the least disturbed batches; median: median of per-round differences;\n"
      "send/recv: a blocking socketpair; nonblock: a SOCK_NONBLOCK one (servers' sockets)\n",
      kInterleavedRounds, kInterleavedPairs, kProcesses);
  printf("  %-32s %14s %14s %14s %14s %14s %14s\n", "", "send/recv fast", "pipe w/r fast", "send/recv med",
         "pipe w/r med", "nonblock fast", "nonblock med");
  for (int c = 0; c < 2; ++c)
    printf("  %-32s %14.1f %14.1f %14.1f %14.1f %14.1f %14.1f\n", names[c == 0 ? 2 : 1], Median(added[c][0]),
           Median(added[c][1]), Median(added[c][2]), Median(added[c][3]), Median(added[c][4]), Median(added[c][5]));

  // 2. Process-level, alternating processes.
  std::vector<std::vector<double>> sock(3), pipes(3), process(3);
  for (int round = 0; round < 5; ++round) {
    for (size_t c = 0; c < configs.size(); ++c) {
      if (!bench::RunSelf("sock_bench", "--child", configs[c], 3, &v)) {
        fprintf(stderr, "sock_bench: child run failed (%s)\n", names[c]);
        return 1;
      }
      sock[c].push_back(v[0]);
      pipes[c].push_back(v[1]);
      process[c].push_back(v[2]);
    }
  }
  const double s0 = Median(sock[0]), p0 = Median(pipes[0]);
  printf("\nprocess level: calling thread's CPU ns per pair, median of 5 alternating runs\n");
  printf("  %-32s %14s %7s %14s %7s %16s\n", "", "send+recv ns", "ratio", "pipe w+r ns", "ratio", "process CPU ns");
  for (size_t c = 0; c < configs.size(); ++c) {
    const double s = Median(sock[c]), p = Median(pipes[c]);
    printf("  %-32s %14.1f %7.3f %14.1f %7.3f %16.1f\n", names[c], s, s / s0, p, p / p0, Median(process[c]));
  }
  printf("  recorded socket call: +%.1f ns on the calling thread, +%.1f ns of process CPU incl. the flush thread\n",
         (Median(sock[2]) - s0) / 2, (Median(process[2]) - Median(process[0])) / 2);
  std::string rm = std::string("rm -rf ") + dir;
  if (system(rm.c_str()) != 0) return 1;
  return 0;
}
