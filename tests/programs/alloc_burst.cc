// alloc_burst: a known allocation pattern that arrives in bursts, for the
// tests and the benchmark of weights that survive dropped samples (issue 30).
// Each function allocates through one path in a tight loop, so at a small
// sampling interval a thread produces samples far faster than the flush
// thread drains them. The program prints the truth as one JSON line: per
// function, bytes and count allocated.
//
//   keep_pages     20,000 x 4 KiB, kept
//   churn_pairs    100,000 malloc/free pairs of 64 B - 8 KiB, on each of two threads
//   huge_blocks    16 x 8 MiB (never touched: little RSS), freed
//   family_paths   calloc, realloc, posix_memalign, aligned_alloc, new[]
//
//   alloc_burst [scale]   scale divides every loop count (default 1)
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <new>
#include <string>

namespace {

struct Truth {
  const char* name;
  std::atomic<unsigned long long> bytes{0}, count{0};
};

Truth g_truth[] = {{"keep_pages"}, {"churn_pairs"}, {"huge_blocks"}, {"family_paths"}};
long g_scale = 1;

Truth& T(int i) { return g_truth[i]; }

// Keeps the compiler from eliding allocation/free pairs.
inline void Escape(void* p) { asm volatile("" : : "r"(p) : "memory"); }

long N(long n) { return n / g_scale > 0 ? n / g_scale : 1; }

void* g_kept[20000];

__attribute__((noinline)) void keep_pages() {
  const long n = N(20000);
  for (long i = 0; i < n; ++i) {
    g_kept[i] = malloc(4096);
    Escape(g_kept[i]);
  }
  T(0).bytes += 4096ull * n;
  T(0).count += n;
}

// Sizes 64 B - 8 KiB from a per-thread xorshift: deterministic per seed.
__attribute__((noinline)) void* churn_pairs(void* arg) {
  unsigned long long s = reinterpret_cast<unsigned long long>(arg) * 0x9E3779B97F4A7C15ull + 1;
  const long n = N(100000);
  unsigned long long bytes = 0;
  for (long i = 0; i < n; ++i) {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    const size_t size = 64 + (s * 0x2545F4914F6CDD1Dull >> 33) % (8192 - 64 + 1);
    void* p = malloc(size);
    Escape(p);
    free(p);
    bytes += size;
  }
  T(1).bytes += bytes;
  T(1).count += n;
  return nullptr;
}

__attribute__((noinline)) void huge_blocks() {
  const long n = N(16);
  for (long i = 0; i < n; ++i) {
    void* p = malloc(8u << 20);
    Escape(p);
    free(p);
  }
  T(2).bytes += (8ull << 20) * n;
  T(2).count += n;
}

// Per round: calloc 2 KiB, malloc 1 KiB grown by realloc to 3 KiB (the new
// block is an allocation of its new size, the old one a free), posix_memalign
// and aligned_alloc 4 KiB each, new[] 1 KiB: 6 allocations, 15 KiB.
__attribute__((noinline)) void family_paths() {
  const long n = N(5000);
  for (long i = 0; i < n; ++i) {
    void* a = calloc(2, 1024);
    void* b = malloc(1024);
    b = realloc(b, 3072);
    void* c = nullptr;
    if (posix_memalign(&c, 64, 4096) != 0) abort();
    void* d = aligned_alloc(256, 4096);
    char* e = new char[1024];
    Escape(a), Escape(b), Escape(c), Escape(d), Escape(e);
    free(a), free(b), free(c), free(d);
    delete[] e;
  }
  T(3).bytes += (2048ull + 1024 + 3072 + 4096 + 4096 + 1024) * n;
  T(3).count += 6ull * n;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) g_scale = atol(argv[1]) > 0 ? atol(argv[1]) : 1;
  keep_pages();
  pthread_t th[2];
  for (long i = 0; i < 2; ++i) pthread_create(&th[i], nullptr, churn_pairs, reinterpret_cast<void*>(i + 1));
  for (auto& t : th) pthread_join(t, nullptr);
  huge_blocks();
  family_paths();
  std::string out = "{\"scale\": " + std::to_string(g_scale) + ", \"functions\": {";
  for (size_t i = 0; i < sizeof(g_truth) / sizeof(g_truth[0]); ++i) {
    char buf[256];
    snprintf(buf, sizeof(buf), "%s\"%s\": {\"bytes\": %llu, \"count\": %llu}", i ? ", " : "", g_truth[i].name,
             g_truth[i].bytes.load(), g_truth[i].count.load());
    out += buf;
  }
  out += "}}";
  puts(out.c_str());
  return 0;  // g_kept is leaked on purpose
}
