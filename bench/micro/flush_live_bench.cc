// flush_live_bench: what the flush thread spends per socket.op event in a
// live process, the figure flush_socket_bench's in-process loop leaves out
// (records read from another core's ring, wake-ups, the connection table
// and the column vectors competing for cache with the host).
//
// A child process under the preload makes send+recv pairs on a non-blocking
// socketpair (pausing 100 us every 1024 pairs, so the flush thread works
// alongside, as in a server), then reads the flush thread's CPU from its
// schedstat. Children under each library given alternate, ROUNDS rounds;
// the median per library is printed, with the ratio to the first library.
//   flush_live_bench LIB [LIB2 ...]     (FLB_ROUNDS, FLB_PAIRS override)
#include <dirent.h>
#include <sys/socket.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_common.h"

namespace {

// The flush thread's CPU ns so far (0 if it is not found).
double FlushThreadCpuNs() {
  DIR* d = opendir("/proc/self/task");
  double ns = 0;
  while (dirent* e = d ? readdir(d) : nullptr) {
    if (e->d_name[0] == '.') continue;
    const std::string base = std::string("/proc/self/task/") + e->d_name;
    char comm[64] = {};
    FILE* f = fopen((base + "/comm").c_str(), "r");
    if (!f) continue;
    if (!fgets(comm, sizeof(comm), f)) comm[0] = 0;
    fclose(f);
    if (strncmp(comm, "flightrec-flush", 15) != 0) continue;
    f = fopen((base + "/schedstat").c_str(), "r");
    unsigned long long v = 0;
    if (f && fscanf(f, "%llu", &v) == 1) ns += static_cast<double>(v);
    if (f) fclose(f);
  }
  if (d) closedir(d);
  return ns;
}

// The child: prints flush-thread ns per event.
int Child(long pairs) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) != 0) return 1;
  char buf[64] = "GET /key:000123 HTTP/1.1";
  usleep(200000);  // the recorder's start-up work is not ours to count
  const double before = FlushThreadCpuNs();
  for (long i = 0; i < pairs; i++) {
    buf[0] = static_cast<char>(i);
    if (send(sv[0], buf, 20 + (i & 7), 0) < 0 || recv(sv[1], buf, sizeof(buf), 0) < 0) return 1;
    if ((i & 1023) == 0) usleep(100);
  }
  usleep(300000);  // two flush periods: every record drained and encoded
  const double after = FlushThreadCpuNs();
  if (after <= 0) return 1;  // not preloaded, or no flush thread
  printf("%.2f\n", (after - before) / (2.0 * static_cast<double>(pairs)));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const char* pairs_env = getenv("FLB_PAIRS");
  const long pairs = pairs_env ? atol(pairs_env) : 500000;
  if (argc == 2 && strcmp(argv[1], "child") == 0) return Child(pairs);
  if (argc < 2) {
    fprintf(stderr, "usage: flush_live_bench LIB [LIB2 ...]\n");
    return 2;
  }
  const char* rounds_env = getenv("FLB_ROUNDS");
  const int rounds = rounds_env ? atoi(rounds_env) : 8;
  std::vector<std::vector<double>> per_lib(argc - 1);
  for (int r = 0; r < rounds; r++) {
    for (int l = 1; l < argc; l++) {
      std::vector<double> v;
      const std::string out_dir = "/tmp/flush_live_bench." + std::to_string(getpid());
      if (!bench::RunSelf(argv[0], "child",
                          {std::string("LD_PRELOAD=") + argv[l], "FLIGHTREC_OUTPUT=" + out_dir,
                           "FLB_PAIRS=" + std::to_string(pairs)},
                          1, &v)) {
        fprintf(stderr, "flush_live_bench: the run under %s failed\n", argv[l]);
        return 1;
      }
      per_lib[l - 1].push_back(v[0]);
      const std::string rm = "rm -rf " + out_dir;
      if (system(rm.c_str()) != 0) return 1;
    }
  }
  printf("flush thread CPU per socket.op event, live (%ld send+recv pairs, %d alternating rounds, medians):\n", pairs,
         rounds);
  const double first = bench::Median(per_lib[0]);
  for (int l = 1; l < argc; l++) {
    const double m = bench::Median(per_lib[l - 1]);
    printf("  %-40s %7.1f ns/event  (%.3fx of the first)\n", argv[l], m, m / first);
  }
  return 0;
}
