// Distinct 16-byte-aligned pseudo addresses, for the address table's and the
// sampled-address set's unit tests.
#pragma once
#include <cstddef>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

inline std::vector<uintptr_t> PseudoAddresses(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::set<uintptr_t> seen;
  std::vector<uintptr_t> out;
  while (out.size() < n) {
    const uintptr_t a = (rng() & 0x00007ffffffffff0ull) | 0x10;
    if (seen.insert(a).second) out.push_back(a);
  }
  return out;
}
