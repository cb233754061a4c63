// Endpoint names of one process (issue 41), flush thread only: the distinct
// names the classifier gave (endpoint_classify.h), capped, redacted, with
// each name's slow-request threshold (FLIGHTREC_TRIGGER_SLOW_MS rules) and
// its string id in the current segment.
//
// Index 0 is "no name" (no prefix: endpoints off, a record without one);
// index 1 is "other", where every name beyond the cap goes (counted: capped()).
// Memory is bounded by the cap: a name is kept only when it is admitted.
// A name is redacted once, when admitted (preload/runtime/redaction.h: URL
// userinfo, secret query parameters, Bearer/Basic credentials); the query
// string is never part of a name in the first place.
#pragma once
#include <cstdint>
#include <string_view>
#include <utility>

#include "format/mi_containers.h"
#include "format/segment_writer.h"

namespace flightrec {

// Glob match with '*' (any run, '/' included) and '?' (one byte). Bounded:
// O(len(pattern) * len(text)) at worst.
bool EndpointGlobMatch(std::string_view pattern, std::string_view text);

struct SlowRule {
  format::MiString pattern;
  uint64_t ms = 0;
};

class EndpointNames {
 public:
  // cap: distinct names kept (at least 2: none and other).
  explicit EndpointNames(size_t cap);
  // recent_ points into index_: a copy would point into the original's map.
  EndpointNames(const EndpointNames&) = delete;
  EndpointNames& operator=(const EndpointNames&) = delete;

  // The index of a name as the classifier gave it.
  uint32_t Admit(std::string_view raw);
  std::string_view Name(uint32_t index) const { return index < names_.size() ? std::string_view(names_[index]) : ""; }
  // The writer's string id of a name (0 for index 0), per segment.
  uint32_t StringId(format::SegmentWriter* w, uint32_t index);
  // Slow threshold of a name (ns, 0: none): the first rule whose pattern
  // matches it. Index 0 (no name) gets the rule that matches "" ("*").
  void SetSlowRules(const format::MiVector<SlowRule>* rules);
  uint64_t SlowNs(uint32_t index) const {  // inline: asked once per exchange
    return index == 0 || index >= slow_ns_.size() ? default_ns_ : slow_ns_[index];
  }

  size_t size() const { return names_.size(); }
  uint64_t capped() const { return capped_; }

 private:
  size_t cap_;
  uint64_t capped_ = 0;
  // Recently admitted raw names, direct-mapped by a hash of their length and
  // outer bytes: a server's exchanges repeat a handful of names, and hashing
  // each one whole for the map was a fifth of the flush thread's time per
  // exchange (flush_socket_bench). `key` points at the map's own key (nodes
  // of an unordered_map never move); a miss or a collision falls to the map.
  struct Recent {
    const format::MiString* key = nullptr;
    uint32_t index = 0;
  };
  static constexpr size_t kRecent = 64;
  Recent recent_[kRecent];
  static size_t RecentSlot(std::string_view raw);
  void Remember(std::string_view raw, const format::MiString* key, uint32_t index);
  format::MiHashMap<format::MiString, uint32_t, format::MiStringHash, format::MiStringEq> index_;
  format::MiVector<format::MiString> names_;
  format::MiVector<uint64_t> slow_ns_;
  format::MiVector<uint32_t> ids_;
  uint64_t ids_epoch_ = ~uint64_t{0};
  const format::MiVector<SlowRule>* rules_ = nullptr;
  uint64_t default_ns_ = 0;
  uint64_t RuleNs(std::string_view name) const;
};

// Parses "GET /api/*=200,*=1000" (or a plain number of ms: one rule "*").
// Returns false on a bad value. `min_ms`: the smallest threshold (0 if none).
bool ParseSlowRules(std::string_view text, format::MiVector<SlowRule>* rules, uint64_t* min_ms);

}  // namespace flightrec
