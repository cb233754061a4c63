// alloc_work: a fixed amount of allocation-heavy work for the macro
// benchmark (bench/run_macro.py), shaped like a service building and
// discarding request-sized data: strings of mixed sizes, a hash map of
// vectors that grows and is torn down, a linked structure of small nodes.
// Single-threaded and deterministic, so every run does the same
// allocations; prints its own wall and process-CPU seconds and a checksum.
//   alloc_work [ROUNDS]      (default 100; a round is ~245k allocation calls,
//                             counted with heaptrack)
#include <time.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

double Now(clockid_t c) {
  timespec ts;
  clock_gettime(c, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

uint64_t Next(uint64_t* x) {
  *x ^= *x << 13;
  *x ^= *x >> 7;
  *x ^= *x << 17;
  return *x;
}

struct Node {
  std::string name;
  std::vector<uint32_t> values;
  std::unique_ptr<Node> next;
};

// A "request": parse-like string building, an index, and a node chain.
__attribute__((noinline)) uint64_t Round(uint64_t seed) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1, sum = 0;
  std::unordered_map<std::string, std::vector<uint32_t>> index;
  std::list<std::string> lines;
  for (int i = 0; i < 60000; ++i) {
    const uint64_t r = Next(&x);
    std::string key = "key:" + std::to_string(r % 4096);
    std::string line(16 + r % 240, static_cast<char>('a' + r % 26));
    line += key;
    index[key].push_back(static_cast<uint32_t>(r));
    lines.push_back(std::move(line));
    if (lines.size() > 512) lines.pop_front();
  }
  for (const auto& [k, v] : index) sum += k.size() + v.size();
  std::unique_ptr<Node> head;
  for (int i = 0; i < 20000; ++i) {
    auto n = std::make_unique<Node>();
    n->name = "node-" + std::to_string(Next(&x) % 100000);
    n->values.resize(1 + Next(&x) % 64);
    n->next = std::move(head);
    head = std::move(n);
  }
  while (head) {  // iterative teardown: a 20k-deep recursive destructor would be a stack hazard
    sum += head->values.size();
    head = std::move(head->next);
  }
  for (const auto& l : lines) sum += l.size();
  return sum;
}

}  // namespace

int main(int argc, char** argv) {
  const long rounds = argc > 1 ? atol(argv[1]) : 100;
  const double w0 = Now(CLOCK_MONOTONIC), c0 = Now(CLOCK_PROCESS_CPUTIME_ID);
  uint64_t sum = 0;
  for (long r = 0; r < rounds; ++r) sum += Round(static_cast<uint64_t>(r) + 1);
  printf("wall_s %.4f cpu_s %.4f checksum %llu\n", Now(CLOCK_MONOTONIC) - w0, Now(CLOCK_PROCESS_CPUTIME_ID) - c0,
         static_cast<unsigned long long>(sum));
  return 0;
}
