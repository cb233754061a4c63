// sampled_threads_rss: resident memory of a process whose N threads each
// malloc and free 4 MiB in 1 KiB blocks (at the default 512 KiB sampling
// rate, about 8 allocation samples each) and then wait: what a thread pool
// that allocates costs in flightrec's per-thread state, above all
// libunwind's frame cache (see unwind_paths_bench.cc). Prints VmRSS in KiB
// while every thread is alive.
//   sampled_threads_rss N
#include <pthread.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

pthread_barrier_t g_allocated, g_release;

void* Worker(void*) {
  for (int i = 0; i < 4096; ++i) {
    char* volatile block = static_cast<char*>(malloc(1024));  // volatile: the pair is not optimised away
    block[0] = static_cast<char>(i);
    free(block);
  }
  pthread_barrier_wait(&g_allocated);
  pthread_barrier_wait(&g_release);
  return nullptr;
}

long RssKib() {
  FILE* f = fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long kib = -1;
  while (fgets(line, sizeof line, f))
    if (strncmp(line, "VmRSS:", 6) == 0) kib = atol(line + 6);
  fclose(f);
  return kib;
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? atoi(argv[1]) : 100;
  if (n <= 0 || n > 4096) {
    fprintf(stderr, "usage: sampled_threads_rss N (1..4096)\n");
    return 2;
  }
  pthread_barrier_init(&g_allocated, nullptr, n + 1);
  pthread_barrier_init(&g_release, nullptr, n + 1);
  std::vector<pthread_t> threads(n);
  for (auto& t : threads) pthread_create(&t, nullptr, Worker, nullptr);
  pthread_barrier_wait(&g_allocated);
  printf("%ld\n", RssKib());
  pthread_barrier_wait(&g_release);
  for (auto& t : threads) pthread_join(t, nullptr);
  return 0;
}
