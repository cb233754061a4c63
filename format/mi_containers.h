// Containers whose memory comes from mimalloc, the recorder's private heap.
// The writer runs on the recorder's flush thread for the life of the host;
// its buffers and intern maps must never grow the host's malloc heap (which
// would perturb the host and could recurse into our own malloc hooks).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <mimalloc.h>

namespace flightrec::format {

template <class T>
using MiVector = std::vector<T, mi_stl_allocator<T>>;

using MiString = std::basic_string<char, std::char_traits<char>, mi_stl_allocator<char>>;

// Transparent hash/equality so lookups by string_view allocate nothing.
struct MiStringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
struct MiStringEq {
  using is_transparent = void;
  bool operator()(std::string_view a, std::string_view b) const { return a == b; }
};

template <class K, class V, class H = std::hash<K>, class E = std::equal_to<>>
using MiHashMap = std::unordered_map<K, V, H, E, mi_stl_allocator<std::pair<const K, V>>>;

}  // namespace flightrec::format
