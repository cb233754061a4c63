// alloc_stress: N threads x M malloc/free pairs with sizes, contents and
// lifetimes drawn from a per-thread deterministic generator. Each block is
// filled, kept in a small window for a while (so frees hit older blocks, and
// some blocks move between threads), verified and freed. Output is a pure
// function of the arguments, so a run under the preload must print exactly
// what a plain run prints.
//
//   alloc_stress [threads=8] [pairs_per_thread=1000000]
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>

namespace {

constexpr int kWindow = 64;
constexpr int kMaxThreads = 64;

long g_pairs = 1000000;
int g_threads = 8;

// One hand-off slot per thread: a block thread i allocated, to be verified
// and freed by thread i^1 (frees from a thread that did not allocate).
std::atomic<uint8_t*> g_handoff[kMaxThreads];
std::atomic<uint64_t> g_checksum{0};
std::atomic<uint64_t> g_bad{0};

inline uint64_t Next(uint64_t* s) {
  uint64_t x = *s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *s = x;
  return x * 0x2545F4914F6CDD1Dull;
}

size_t PickSize(uint64_t r) {
  switch (r & 255) {
    case 0: return 65536 + (r >> 8) % (192 << 10);  // rare large blocks
    case 1: case 2: case 3: case 4: case 5: case 6: case 7: case 8: return 1024 + (r >> 8) % 16384;
    default: return 16 + (r >> 8) % 512;
  }
}

// A block (>= 16 bytes) starts with its size and a seed; the first and last
// 64 bytes are a pattern derived from the seed (cheap for large blocks).
void Fill(uint8_t* p, size_t size, uint64_t seed) {
  memcpy(p, &size, sizeof(size));
  memcpy(p + 8, &seed, sizeof(seed));
  for (size_t i = 16; i < size && i < 80; ++i) p[i] = static_cast<uint8_t>(seed + i);
  for (size_t i = size > 144 ? size - 64 : 80; i < size; ++i) p[i] = static_cast<uint8_t>(seed ^ i);
}

// Verifies a block and returns its contribution to the checksum. The sum over
// all blocks does not depend on which thread verified which block.
uint64_t Check(const uint8_t* p, uint64_t* bad) {
  size_t size;
  uint64_t seed;
  memcpy(&size, p, sizeof(size));
  memcpy(&seed, p + 8, sizeof(seed));
  for (size_t i = 16; i < size && i < 80; ++i)
    if (p[i] != static_cast<uint8_t>(seed + i)) ++*bad;
  for (size_t i = size > 144 ? size - 64 : 80; i < size; ++i)
    if (p[i] != static_cast<uint8_t>(seed ^ i)) ++*bad;
  return seed * 31 + size;
}

void* Worker(void* arg) {
  const int id = static_cast<int>(reinterpret_cast<intptr_t>(arg));
  uint64_t checksum = 0, bad = 0;
  uint64_t rng = 0x9E3779B97F4A7C15ull * (id + 1);
  uint8_t* window[kWindow] = {};
  for (long i = 0; i < g_pairs; ++i) {
    const uint64_t r = Next(&rng);
    const int slot = static_cast<int>((r >> 40) % kWindow);
    if (window[slot]) {
      checksum += Check(window[slot], &bad);
      free(window[slot]);
      window[slot] = nullptr;
    }
    const size_t size = PickSize(r);
    uint8_t* p;
    switch ((r >> 50) & 15) {
      case 0: p = static_cast<uint8_t*>(calloc(1, size)); break;
      case 1:
        p = static_cast<uint8_t*>(malloc(size / 2 + 16));
        p = static_cast<uint8_t*>(realloc(p, size));
        break;
      case 2: {
        void* q = nullptr;
        p = posix_memalign(&q, 64, size) == 0 ? static_cast<uint8_t*>(q) : nullptr;
        break;
      }
      default: p = static_cast<uint8_t*>(malloc(size)); break;
    }
    if (!p) {
      ++bad;
      continue;
    }
    Fill(p, size, r);
    if (((r >> 56) & 31) == 0) {
      // Free whatever the partner handed us, and offer this block if our
      // slot is empty (else keep it: it is verified exactly once either way).
      if (uint8_t* other = g_handoff[id ^ 1].exchange(nullptr, std::memory_order_acq_rel)) {
        checksum += Check(other, &bad);
        free(other);
      }
      uint8_t* expected = nullptr;
      if (g_handoff[id].compare_exchange_strong(expected, p, std::memory_order_acq_rel)) continue;
    }
    window[slot] = p;
  }
  for (uint8_t* p : window)
    if (p) {
      checksum += Check(p, &bad);
      free(p);
    }
  g_checksum.fetch_add(checksum);
  g_bad.fetch_add(bad);
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) g_threads = atoi(argv[1]);
  if (argc > 2) g_pairs = atol(argv[2]);
  if (g_threads < 1 || g_threads > kMaxThreads) g_threads = 8;
  pthread_t th[kMaxThreads];
  for (int i = 0; i < g_threads; ++i)
    pthread_create(&th[i], nullptr, Worker, reinterpret_cast<void*>(static_cast<intptr_t>(i)));
  for (int i = 0; i < g_threads; ++i) pthread_join(th[i], nullptr);
  uint64_t checksum = g_checksum.load(), bad = g_bad.load();
  for (auto& h : g_handoff)
    if (uint8_t* p = h.exchange(nullptr)) {
      checksum += Check(p, &bad);
      free(p);
    }
  printf("threads %d pairs %ld checksum %016llx bad %llu\n", g_threads, g_pairs,
         static_cast<unsigned long long>(checksum), static_cast<unsigned long long>(bad));
  return bad == 0 ? 0 : 1;
}
