// Endpoint names of one process (see endpoint_names.h).
#include "preload/sockets/decode/endpoint_names.h"

#include <cstring>
#include <string>

#include "preload/runtime/redaction.h"

namespace flightrec {

bool EndpointGlobMatch(std::string_view p, std::string_view t) {
  // Iterative matcher with one backtrack point (the last '*'): linear-ish.
  size_t pi = 0, ti = 0, star = std::string_view::npos, mark = 0;
  while (ti < t.size()) {
    if (pi < p.size() && (p[pi] == '?' || p[pi] == t[ti])) {
      ++pi;
      ++ti;
    } else if (pi < p.size() && p[pi] == '*') {
      star = pi++;
      mark = ti;
    } else if (star != std::string_view::npos) {
      pi = star + 1;
      ti = ++mark;
    } else {
      return false;
    }
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

EndpointNames::EndpointNames(size_t cap) : cap_(cap < 2 ? 2 : cap) {
  names_.emplace_back("");
  names_.emplace_back("other");
  slow_ns_.push_back(0);
  slow_ns_.push_back(0);
  index_.emplace(format::MiString("other"), 1u);
}

size_t EndpointNames::RecentSlot(std::string_view raw) {
  // Length, the first and the last 8 bytes (names share prefixes: "GET /a",
  // "GET /b"; the two loads overlap under 16 bytes), mixed by one multiply.
  const size_t n = raw.size();
  const char* p = raw.data();
  uint64_t head = 0, tail = 0;
  if (n >= 8) {
    memcpy(&head, p, 8);
    memcpy(&tail, p + n - 8, 8);
  } else {
    for (size_t i = 0; i < n; ++i) head = head << 8 | static_cast<uint8_t>(p[i]);
  }
  const uint64_t h = (head ^ (tail * 0x9e3779b97f4a7c15ull) ^ n) * 0xff51afd7ed558ccdull;
  return static_cast<size_t>(h >> 58);  // kRecent = 64 slots
}

void EndpointNames::Remember(std::string_view raw, const format::MiString* key, uint32_t index) {
  Recent& r = recent_[RecentSlot(raw)];
  r.key = key;
  r.index = index;
}

uint32_t EndpointNames::Admit(std::string_view raw) {
  if (raw.empty()) return 0;
  const Recent& r = recent_[RecentSlot(raw)];
  if (r.key && r.key->size() == raw.size() && memcmp(r.key->data(), raw.data(), raw.size()) == 0) return r.index;
  auto it = index_.find(raw);
  if (it != index_.end()) {
    Remember(raw, &it->first, it->second);
    return it->second;
  }
  if (names_.size() >= cap_) {
    capped_++;
    return 1;
  }
  // Redacted once, here; several raw names may share the redacted one.
  const std::string red = RedactSecretsInText(raw);
  uint32_t idx;
  auto same = index_.find(std::string_view(red));
  if (same != index_.end()) {
    idx = same->second;
  } else {
    idx = static_cast<uint32_t>(names_.size());
    names_.emplace_back(red.data(), red.size());
    slow_ns_.push_back(RuleNs(red));
    if (red != raw) index_.emplace(format::MiString(red.data(), red.size()), idx);
  }
  const auto added = index_.emplace(format::MiString(raw.data(), raw.size()), idx);
  Remember(raw, &added.first->first, idx);
  return idx;
}

uint32_t EndpointNames::StringId(format::SegmentWriter* w, uint32_t index) {
  if (index == 0 || index >= names_.size()) return 0;
  if (ids_epoch_ != w->string_epoch()) {
    ids_epoch_ = w->string_epoch();
    ids_.assign(names_.size(), 0u);
  }
  if (ids_.size() < names_.size()) ids_.resize(names_.size(), 0u);
  uint32_t& id = ids_[index];
  if (id == 0) id = w->StringId(names_[index]);
  return id;
}

uint64_t EndpointNames::RuleNs(std::string_view name) const {
  if (!rules_) return 0;
  for (const SlowRule& r : *rules_)
    if (EndpointGlobMatch(r.pattern, name)) return r.ms * 1000000ull;
  return 0;
}

void EndpointNames::SetSlowRules(const format::MiVector<SlowRule>* rules) {
  rules_ = rules;
  default_ns_ = RuleNs("");  // an exchange with no name: the rule "*", if any
  for (size_t i = 1; i < names_.size(); ++i) slow_ns_[i] = RuleNs(names_[i]);
}

bool ParseSlowRules(std::string_view text, format::MiVector<SlowRule>* rules, uint64_t* min_ms) {
  rules->clear();
  *min_ms = 0;
  auto number = [](std::string_view s, uint64_t* out) {
    if (s.empty() || s.size() > 7) return false;
    uint64_t v = 0;
    for (char c : s) {
      if (c < '0' || c > '9') return false;
      v = v * 10 + uint64_t(c - '0');
    }
    if (v > 3600000) return false;
    *out = v;
    return true;
  };
  auto trim = [](std::string_view s) {
    while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
    while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
    return s;
  };
  uint64_t ms;
  if (number(trim(text), &ms)) {  // the plain form: every exchange
    if (ms) {
      rules->push_back(SlowRule{format::MiString("*"), ms});
      *min_ms = ms;
    }
    return true;
  }
  if (text.size() > 4096) return false;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view item = trim(text.substr(0, comma));
    const size_t eq = item.rfind('=');
    if (eq == std::string_view::npos || eq == 0) return false;
    if (!number(trim(item.substr(eq + 1)), &ms)) return false;
    const std::string_view pat = trim(item.substr(0, eq));
    if (pat.empty()) return false;
    // A rule of 0 ms is kept: it stops the search (that endpoint never triggers).
    rules->push_back(SlowRule{format::MiString(pat.data(), pat.size()), ms});
    if (ms && (!*min_ms || ms < *min_ms)) *min_ms = ms;
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return true;
}

}  // namespace flightrec
