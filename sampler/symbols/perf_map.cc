// PerfMap (see perf_map.h).
#include "sampler/symbols/perf_map.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "preload/fds/fd_guard.h"

namespace flightrec::sampler {
namespace {

bool ParseHex(const char*& p, const char* end, uint64_t* out) {
  if (p + 2 <= end && p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) p += 2;
  const char* begin = p;
  uint64_t v = 0;
  for (; p < end; ++p) {
    const char c = *p;
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else break;
    if (p - begin >= 16) return false;  // more than 64 bits
    v = v << 4 | static_cast<uint64_t>(d);
  }
  *out = v;
  return p > begin;
}

}  // namespace

bool PerfMap::ParseLine(const char* line, size_t len, uint64_t* start, uint64_t* size, format::MiString* name) {
  const char* p = line;
  const char* end = line + len;
  if (!ParseHex(p, end, start) || p >= end || *p != ' ') return false;
  ++p;
  if (!ParseHex(p, end, size) || p >= end || *p != ' ') return false;
  ++p;
  while (end > p && (end[-1] == '\r' || end[-1] == ' ')) --end;
  if (p >= end || *size == 0 || *start + *size < *start) return false;
  name->assign(p, static_cast<size_t>(end - p));
  return true;
}

void PerfMap::Add(const char* line, size_t len) {
  uint64_t start = 0, size = 0;
  format::MiString name;
  if (!ParseLine(line, len, &start, &size, &name)) return;
  auto it = entries_.find(start);
  if (it == entries_.end() && entries_.size() >= kMaxEntries) return;
  Code& c = entries_[start];
  c.size = size;
  c.name = std::move(name);
}

bool PerfMap::Refresh() {
  const pid_t pid = getpid();
  if (pid != pid_) {
    pid_ = pid;
    present_ = false;
    offset_ = 0;
    partial_.clear();
    entries_.clear();
  }
  char path[64];
  snprintf(path, sizeof(path), "/tmp/perf-%d.map", static_cast<int>(pid));
  const int fd = OpenTransientFd(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return false;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (st.st_uid != geteuid() && st.st_uid != 0)) {
    CloseTransientFd(fd);
    return false;
  }
  present_ = true;
  if (st.st_size < offset_) {  // rewritten from the start
    offset_ = 0;
    partial_.clear();
  }
  bool changed = false;
  char buf[16 * 1024];  // on the symbolizer thread's stack: modest, the loop reads on
  for (;;) {
    const ssize_t n = pread(fd, buf, sizeof(buf), offset_);
    if (n <= 0) break;
    offset_ += n;
    const char* p = buf;
    const char* end = buf + n;
    while (p < end) {
      const char* nl = static_cast<const char*>(memchr(p, '\n', static_cast<size_t>(end - p)));
      if (!nl) {
        if (partial_.size() < 4096) partial_.append(p, static_cast<size_t>(end - p));
        break;
      }
      if (!partial_.empty()) {
        partial_.append(p, static_cast<size_t>(nl - p));
        Add(partial_.data(), partial_.size());
        partial_.clear();
      } else {
        Add(p, static_cast<size_t>(nl - p));
      }
      changed = true;
      p = nl + 1;
    }
  }
  CloseTransientFd(fd);
  return changed;
}

const char* PerfMap::Find(uint64_t pc) const {
  auto it = entries_.upper_bound(pc);
  if (it == entries_.begin()) return nullptr;
  --it;
  return pc - it->first < it->second.size ? it->second.name.c_str() : nullptr;
}

}  // namespace flightrec::sampler
