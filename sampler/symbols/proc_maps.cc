// /proc/<pid>/maps reader (see proc_maps.h).
#include "sampler/symbols/proc_maps.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

#include "preload/fds/fd_guard.h"

namespace flightrec::sampler {
namespace {

bool ParseHex(std::string_view* s, uint64_t* out) {
  uint64_t v = 0;
  size_t i = 0;
  for (; i < s->size(); ++i) {
    const char c = (*s)[i];
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else break;
    if (v >> 60) return false;  // overflow
    v = v << 4 | static_cast<uint64_t>(d);
  }
  if (i == 0) return false;
  s->remove_prefix(i);
  *out = v;
  return true;
}

bool ParseDec(std::string_view* s, uint64_t* out) {
  uint64_t v = 0;
  size_t i = 0;
  for (; i < s->size() && (*s)[i] >= '0' && (*s)[i] <= '9'; ++i) v = v * 10 + static_cast<uint64_t>((*s)[i] - '0');
  if (i == 0) return false;
  s->remove_prefix(i);
  *out = v;
  return true;
}

bool Expect(std::string_view* s, char c) {
  if (s->empty() || (*s)[0] != c) return false;
  s->remove_prefix(1);
  return true;
}

void SkipBlanks(std::string_view* s) {
  while (!s->empty() && ((*s)[0] == ' ' || (*s)[0] == '\t')) s->remove_prefix(1);
}

}  // namespace

bool ParseMapsLine(std::string_view s, MapEntry* out) {
  // start-end perms offset dev inode [path]
  MapEntry e;
  if (!ParseHex(&s, &e.start) || !Expect(&s, '-') || !ParseHex(&s, &e.end) || e.end < e.start) return false;
  SkipBlanks(&s);
  if (s.size() < 4) return false;
  e.readable = s[0] == 'r';
  e.writable = s[1] == 'w';
  e.executable = s[2] == 'x';
  s.remove_prefix(4);
  SkipBlanks(&s);
  if (!ParseHex(&s, &e.offset)) return false;
  SkipBlanks(&s);
  uint64_t major, minor;
  if (!ParseHex(&s, &major) || !Expect(&s, ':') || !ParseHex(&s, &minor)) return false;
  SkipBlanks(&s);
  if (!ParseDec(&s, &e.inode)) return false;
  SkipBlanks(&s);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.remove_suffix(1);
  e.path.assign(s.data(), s.size());
  *out = std::move(e);
  return true;
}

void ProcMaps::LoadFromText(std::string_view text) {
  entries_.clear();
  uint64_t fp = 1469598103934665603ull;  // FNV-1a over (start, path) of code mappings
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    MapEntry e;
    if (!ParseMapsLine(line, &e)) continue;
    if (e.executable && !e.path.empty()) {
      for (int i = 0; i < 8; ++i) fp = (fp ^ ((e.start >> (8 * i)) & 0xff)) * 1099511628211ull;
      for (char c : e.path) fp = (fp ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    }
    entries_.push_back(std::move(e));
  }
  std::sort(entries_.begin(), entries_.end(), [](const MapEntry& a, const MapEntry& b) { return a.start < b.start; });
  code_fingerprint_ = fp;
}

bool ProcMaps::Load(pid_t pid) {
  char path[64];
  if (pid == 0) snprintf(path, sizeof(path), "/proc/self/maps");
  else snprintf(path, sizeof(path), "/proc/%d/maps", static_cast<int>(pid));
  const int fd = OpenTransientFd(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  format::MiString text;
  char buf[16384];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  CloseTransientFd(fd);
  if (text.empty()) return false;
  LoadFromText(text);
  return true;
}

bool FindSelfMappingNoAlloc(uint64_t addr, uint64_t* lo, uint64_t* hi) {
  const int fd = OpenTransientFd("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  // Only the "start-end" prefix of each line matters; the rest is skipped.
  char buf[4096];
  char head[40];
  size_t head_len = 0;
  bool found = false;
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (ssize_t i = 0; i < n && !found; ++i) {
      if (buf[i] != '\n') {
        if (head_len < sizeof(head)) head[head_len++] = buf[i];
        continue;
      }
      std::string_view line(head, head_len);
      head_len = 0;
      uint64_t start, end;
      if (!ParseHex(&line, &start) || !Expect(&line, '-') || !ParseHex(&line, &end)) continue;
      if (addr >= start && addr < end) {
        *lo = start;
        *hi = end;
        found = true;
      }
    }
    if (found) break;
  }
  CloseTransientFd(fd);
  return found;
}

const MapEntry* ProcMaps::Find(uint64_t addr) const {
  auto it = std::upper_bound(entries_.begin(), entries_.end(), addr,
                             [](uint64_t a, const MapEntry& e) { return a < e.start; });
  if (it == entries_.begin()) return nullptr;
  --it;
  return addr < it->end ? &*it : nullptr;
}

}  // namespace flightrec::sampler
