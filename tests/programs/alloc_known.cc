// alloc_known: allocations with known totals per function, for the heap
// profile tests. Each function below allocates through one path (malloc,
// calloc, realloc, the memalign family, operator new[], other threads) and
// either frees everything or keeps (leaks) it. The program prints the truth
// as one JSON line: per function, bytes and count allocated and bytes still
// live at exit, so tests compare the trace against it without hard-coding.
//
// Sizes are chosen so the default sampling rate (512 KiB) estimates every
// function within a few percent (thousands of effective samples each), while
// kept memory is mostly never touched (large blocks: little RSS).
//
//   alloc_known [scale]   scale divides every loop count (default 1)
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <string>
#include <vector>

namespace {

struct Truth {
  const char* name;
  unsigned long long bytes = 0, count = 0, live = 0;
};

Truth g_truth[16];
int g_ntruth = 0;
long g_scale = 1;

Truth* T(const char* name) {
  for (int i = 0; i < g_ntruth; ++i)
    if (strcmp(g_truth[i].name, name) == 0) return &g_truth[i];
  g_truth[g_ntruth].name = name;
  return &g_truth[g_ntruth++];
}

// Keeps the compiler from eliding allocation/free pairs.
inline void Escape(void* p) { asm volatile("" : : "r"(p) : "memory"); }

long N(long n) { return n / g_scale > 0 ? n / g_scale : 1; }

std::vector<void*> g_kept;  // reserved up front so it never allocates in the loops

// 1 GiB in 1 KiB blocks, each freed at once: live 0.
__attribute__((noinline)) void churn_small() {
  const long n = N(1 << 20);
  for (long i = 0; i < n; ++i) {
    void* p = malloc(1024);
    Escape(p);
    free(p);
  }
  Truth* t = T("churn_small");
  t->bytes += 1024ull * n;
  t->count += n;
}

// 512 MiB in 1 MiB blocks, kept: live 512 MiB (never touched: little RSS).
__attribute__((noinline)) void leak_large() {
  const long n = N(512);
  for (long i = 0; i < n; ++i) {
    void* p = malloc(1 << 20);
    Escape(p);
    g_kept.push_back(p);
  }
  Truth* t = T("leak_large");
  t->bytes += (1ull << 20) * n;
  t->count += n;
  t->live += (1ull << 20) * n;
}

// 16 MiB in 256-byte blocks, kept: a realistic small leak (too few samples at
// the default rate for a tight estimate; exact at rate 1).
__attribute__((noinline)) void leak_small() {
  const long n = N(65536);
  for (long i = 0; i < n; ++i) {
    void* p = malloc(256);
    Escape(p);
    g_kept.push_back(p);
  }
  Truth* t = T("leak_small");
  t->bytes += 256ull * n;
  t->count += n;
  t->live += 256ull * n;
}

// 256 MiB in 8 MiB blocks, freed: every one is sampled (p = 1 - e^-16).
__attribute__((noinline)) void large_blocks() {
  const long n = N(32);
  for (long i = 0; i < n; ++i) {
    void* p = malloc(8 << 20);
    Escape(p);
    free(p);
  }
  Truth* t = T("large_blocks");
  t->bytes += (8ull << 20) * n;
  t->count += n;
}

// 1 GiB through calloc(16, 64 KiB), freed.
__attribute__((noinline)) void calloc_path() {
  const long n = N(1024);
  for (long i = 0; i < n; ++i) {
    void* p = calloc(16, 64 << 10);
    Escape(p);
    free(p);
  }
  Truth* t = T("calloc_path");
  t->bytes += (1ull << 20) * n;
  t->count += n;
}

// Growth by realloc: 4 KiB doubling to 16 MiB, then freed. Each realloc
// counts as an allocation of its new size (see alloc_profiler.h).
__attribute__((noinline)) void realloc_path() {
  const long n = N(64);
  Truth* t = T("realloc_path");
  for (long i = 0; i < n; ++i) {
    size_t size = 4096;
    void* p = realloc(nullptr, size);  // realloc(NULL, n) is malloc(n)
    t->bytes += size;
    t->count += 1;
    while (size < (16u << 20)) {
      size *= 2;
      p = realloc(p, size);
      Escape(p);
      t->bytes += size;
      t->count += 1;
    }
    free(p);
  }
}

// The memalign family, 64 KiB + 128 KiB + 32 KiB + 32 KiB per round, freed.
__attribute__((noinline)) void memalign_path() {
  const long n = N(4096);
  for (long i = 0; i < n; ++i) {
    void* a = nullptr;
    if (posix_memalign(&a, 64, 64 << 10) != 0) abort();
    void* b = aligned_alloc(4096, 128 << 10);
    void* c = memalign(256, 32 << 10);
    void* d = valloc(32 << 10);
    Escape(a);
    Escape(b);
    Escape(c);
    Escape(d);
    free(a);
    free(b);
    free(c);
    free(d);
  }
  Truth* t = T("memalign_path");
  t->bytes += (256ull << 10) * n;
  t->count += 4ull * n;
}

// operator new[] (through libstdc++'s operator new to malloc): 1 GiB in
// 64 KiB arrays, freed. The site must be this function, not operator new.
__attribute__((noinline)) void new_path() {
  const long n = N(16384);
  for (long i = 0; i < n; ++i) {
    char* p = new char[64 << 10];
    Escape(p);
    delete[] p;
  }
  Truth* t = T("new_path");
  t->bytes += (64ull << 10) * n;
  t->count += n;
}

// Two other threads, 512 MiB each in 4 KiB blocks, freed.
__attribute__((noinline)) void* thread_alloc_loop(void*) {
  const long n = N(131072);
  for (long i = 0; i < n; ++i) {
    void* p = malloc(4096);
    Escape(p);
    free(p);
  }
  return nullptr;
}

void other_threads() {
  pthread_t th[2];
  for (auto& t : th) pthread_create(&t, nullptr, thread_alloc_loop, nullptr);
  for (auto& t : th) pthread_join(t, nullptr);
  Truth* t = T("thread_alloc_loop");
  t->bytes += 2ull * 4096 * N(131072);
  t->count += 2ull * N(131072);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) g_scale = atol(argv[1]) > 0 ? atol(argv[1]) : 1;
  churn_small();  // first: at rate 1, even the process's first allocations must be recorded
  g_kept.reserve(200000);
  leak_large();
  leak_small();
  large_blocks();
  calloc_path();
  realloc_path();
  memalign_path();
  new_path();
  other_threads();
  std::string out = "{\"scale\": " + std::to_string(g_scale) + ", \"functions\": {";
  for (int i = 0; i < g_ntruth; ++i) {
    char buf[256];
    snprintf(buf, sizeof(buf), "%s\"%s\": {\"bytes\": %llu, \"count\": %llu, \"live\": %llu}", i ? ", " : "",
             g_truth[i].name, g_truth[i].bytes, g_truth[i].count, g_truth[i].live);
    out += buf;
  }
  out += "}}";
  puts(out.c_str());
  return 0;  // g_kept is leaked on purpose
}
