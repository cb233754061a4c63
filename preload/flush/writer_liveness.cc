// Writer liveness: see writer_liveness.h.
#include "preload/flush/writer_liveness.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "format/segment_reader.h"
#include "preload/fds/fd_guard.h"

namespace flightrec {
namespace {

// Reads a small /proc file into buf (NUL-terminated); its length, or -1.
ssize_t ReadSmallFile(const char* path, char* buf, size_t size) {
  const int fd = OpenTransientFd(path, O_RDONLY);
  if (fd < 0) return -1;
  ssize_t n;
  do n = read(fd, buf, size - 1);
  while (n < 0 && errno == EINTR);
  CloseTransientFd(fd);
  if (n < 0) return -1;
  buf[n] = '\0';
  return n;
}

// Field 22 of /proc/<pid>/stat (starttime, clock ticks after boot); 0 if
// unreadable. The command name (field 2) may hold spaces and parentheses:
// fields are counted after its last ')'.
uint64_t StartTicks(const char* stat_path) {
  char buf[1024];
  if (ReadSmallFile(stat_path, buf, sizeof(buf)) <= 0) return 0;
  const char* p = strrchr(buf, ')');
  if (!p) return 0;
  int field = 2;
  for (++p; *p; ++p) {
    if (*p != ' ') continue;
    if (++field == 22) {
      uint64_t v = 0;
      for (++p; *p >= '0' && *p <= '9'; ++p) v = v * 10 + static_cast<uint64_t>(*p - '0');
      return v;
    }
  }
  return 0;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Boot id and pid namespace: the same for every process of this one and its
// forks (a process never changes its own pid namespace), read once.
struct Shared {
  bool read = false;
  uint8_t boot_id[16] = {};
  uint64_t pid_ns = 0;
};
Shared g_shared;
pid_t g_start_pid = 0;
uint64_t g_start_ticks = 0;

void ReadShared() {
  if (g_shared.read) return;
  g_shared.read = true;
  char buf[64];
  if (ReadSmallFile("/proc/sys/kernel/random/boot_id", buf, sizeof(buf)) > 0) {
    int n = 0, hi = -1;
    for (const char* p = buf; *p && n < 16; ++p) {
      const int d = HexDigit(*p);
      if (d < 0) continue;
      if (hi < 0) {
        hi = d;
      } else {
        g_shared.boot_id[n++] = static_cast<uint8_t>(hi << 4 | d);
        hi = -1;
      }
    }
    if (n != 16) memset(g_shared.boot_id, 0, sizeof(g_shared.boot_id));
  }
  struct stat st;
  if (stat("/proc/self/ns/pid", &st) == 0) g_shared.pid_ns = static_cast<uint64_t>(st.st_ino);
}

bool SameBoot(const format::WriterIdentity& a, const format::WriterIdentity& b) {
  static const uint8_t zero[16] = {};
  return memcmp(a.boot_id, zero, sizeof(zero)) != 0 && memcmp(a.boot_id, b.boot_id, sizeof(a.boot_id)) == 0;
}

bool KillSaysGone(pid_t pid) { return pid > 0 && kill(pid, 0) != 0 && errno == ESRCH; }

}  // namespace

format::WriterIdentity OwnWriterIdentity() {
  ReadShared();
  format::WriterIdentity id;
  memcpy(id.boot_id, g_shared.boot_id, sizeof(id.boot_id));
  id.pid_ns = g_shared.pid_ns;
  const pid_t pid = getpid();
  if (g_start_pid != pid) {  // a fork child is a process of its own
    g_start_ticks = StartTicks("/proc/self/stat");
    g_start_pid = pid;
  }
  id.start_ticks = g_start_ticks;
  return id;
}

bool WriterGone(uint32_t header_pid, const format::WriterIdentity& identity, pid_t name_pid, uint64_t mtime_ns,
                uint64_t now_ns) {
  const bool quiet = now_ns > mtime_ns && now_ns - mtime_ns >= kForeignQuietNs;
  if (!identity.known() || header_pid == 0) return quiet && KillSaysGone(name_pid);
  const format::WriterIdentity own = OwnWriterIdentity();
  const pid_t pid = static_cast<pid_t>(header_pid);
  if (!SameBoot(identity, own) || identity.pid_ns == 0 || identity.pid_ns != own.pid_ns) return quiet;
  if (identity.start_ticks == 0) return KillSaysGone(pid);  // the writer could not read its own
  if (pid == getpid()) return identity.start_ticks != own.start_ticks;
  const uint64_t ticks = ProcessStartTicks(pid);
  if (ticks != 0) return ticks != identity.start_ticks;
  return KillSaysGone(pid);
}

uint64_t ProcessStartTicks(pid_t pid) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
  return StartTicks(path);
}

bool ActiveFileWriterGone(int fd, pid_t name_pid, uint64_t now_ns) {
  struct stat st;
  if (fstat(fd, &st) != 0) return false;
  const uint64_t mtime_ns =
      static_cast<uint64_t>(st.st_mtim.tv_sec) * 1000000000ull + static_cast<uint64_t>(st.st_mtim.tv_nsec);
  // A header is a few hundred bytes: service and host are at most 4 KiB each.
  std::vector<uint8_t> buf(16384);
  ssize_t n;
  do n = pread(fd, buf.data(), buf.size(), 0);
  while (n < 0 && errno == EINTR);
  format::SegmentHeader h;
  std::string why;
  if (n <= 0 || !format::ReadSegmentHeader(buf.data(), static_cast<size_t>(n), &h, &why)) {
    h.pid = 0;
    h.identity = format::WriterIdentity{};
  }
  return WriterGone(h.pid, h.identity, name_pid, mtime_ns, now_ns);
}

}  // namespace flightrec
