// sock_bench: what the socket hooks cost. Runs itself three ways side by side
// — plain, preloaded with FLIGHTREC_SOCKETS=0 (hooks only forward) and
// preloaded recording — alternating rounds, and prints the median ns per
// operation pair and the ratio to plain:
//   * send+recv of 64 bytes on a socketpair (recorded: two clock reads and
//     one ring push per call);
//   * write+read of 64 bytes on a pipe (not a socket: one fd-table lookup).
// Times are the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID): on a
// shared, loaded machine wall time mostly measures the neighbours. The flush
// thread's own work (encoding the events) is reported separately as the
// process's extra CPU per recorded call.
//
//   sock_bench LIB            compare (LIB = path to libflightrec.so)
//   sock_bench --child        one measurement, printed as "socket_ns pipe_ns"
#include <spawn.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern char** environ;

namespace {

constexpr int kPairsPerBatch = 2000;
constexpr int kBatches = 40;

double ThreadCpuNs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

double ProcessCpuNs() {
  rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e9 + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e3;
}

double MedianNsPerPair(int wfd, int rfd, bool use_socket_api) {
  char buf[64] = {};
  std::vector<double> per_batch;
  for (int b = 0; b < kBatches; ++b) {
    const double t0 = ThreadCpuNs();
    for (int i = 0; i < kPairsPerBatch; ++i) {
      if (use_socket_api) {
        if (send(wfd, buf, sizeof(buf), 0) != sizeof(buf) || recv(rfd, buf, sizeof(buf), 0) != sizeof(buf)) exit(2);
      } else {
        if (write(wfd, buf, sizeof(buf)) != sizeof(buf) || read(rfd, buf, sizeof(buf)) != sizeof(buf)) exit(2);
      }
    }
    per_batch.push_back((ThreadCpuNs() - t0) / kPairsPerBatch);
  }
  std::sort(per_batch.begin(), per_batch.end());
  return per_batch[per_batch.size() / 2];
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

// Runs ourselves with --child under the given extra environment; returns "socket pipe".
bool RunChild(const char* self, const std::vector<std::string>& extra_env, double* sock, double* pipe_ns,
              double* process_ns) {
  std::vector<std::string> env_store;
  for (char** e = environ; *e; ++e)
    if (strncmp(*e, "LD_PRELOAD=", 11) != 0 && strncmp(*e, "FLIGHTREC_", 10) != 0) env_store.push_back(*e);
  for (const auto& e : extra_env) env_store.push_back(e);
  std::vector<char*> envp;
  for (auto& e : env_store) envp.push_back(e.data());
  envp.push_back(nullptr);
  int out[2];
  if (pipe(out) != 0) return false;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_addclose(&fa, out[0]);
  char arg0[] = "sock_bench", arg1[] = "--child";
  char* argv[] = {arg0, arg1, nullptr};
  pid_t pid;
  const int rc = posix_spawn(&pid, self, &fa, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&fa);
  close(out[1]);
  if (rc != 0) return false;
  char text[128] = {};
  ssize_t n = 0, got;
  while (n < static_cast<ssize_t>(sizeof(text)) - 1 && (got = read(out[0], text + n, sizeof(text) - 1 - n)) > 0) n += got;
  close(out[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 && sscanf(text, "%lf %lf %lf", sock, pipe_ns, process_ns) == 3;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "--child") == 0) return Child();
  if (argc < 2) {
    fprintf(stderr, "usage: sock_bench PATH/libflightrec.so\n");
    return 2;
  }
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return 1;
  self[n] = '\0';
  char dir[] = "/tmp/fr-sock-bench-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  const std::string lib = std::string("LD_PRELOAD=") + argv[1];
  const std::string out = std::string("FLIGHTREC_OUTPUT=") + dir;
  const std::vector<std::vector<std::string>> configs = {
      {},
      {lib, out, "FLIGHTREC_SOCKETS=0", "FLIGHTREC_SAMPLER=off", "FLIGHTREC_ALLOC_SAMPLE_BYTES=0"},
      {lib, out, "FLIGHTREC_SAMPLER=off", "FLIGHTREC_ALLOC_SAMPLE_BYTES=0", "FLIGHTREC_RING_BYTES=1M"},
  };
  const char* names[] = {"plain", "preloaded, FLIGHTREC_SOCKETS=0", "preloaded, recording"};
  std::vector<std::vector<double>> sock(3), pipes(3), process(3);
  for (int round = 0; round < 5; ++round) {
    for (size_t c = 0; c < configs.size(); ++c) {
      double s, p, pr;
      if (!RunChild(self, configs[c], &s, &p, &pr)) {
        fprintf(stderr, "sock_bench: child run failed (%s)\n", names[c]);
        return 1;
      }
      sock[c].push_back(s);
      pipes[c].push_back(p);
      process[c].push_back(pr);
    }
  }
  const double s0 = Median(sock[0]), p0 = Median(pipes[0]);
  printf("socket hooks: calling thread's CPU ns per pair, median of 5 alternating runs\n"
         "(64-byte messages; CPU and allocation sampling off so only the socket hooks differ)\n");
  printf("  %-32s %14s %7s %14s %7s %16s\n", "", "send+recv ns", "ratio", "pipe w+r ns", "ratio",
         "process CPU ns");
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
