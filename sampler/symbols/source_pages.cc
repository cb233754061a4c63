// Symbol sources' pages: see source_pages.h.
#include "sampler/symbols/source_pages.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

#include "preload/fds/fd_guard.h"

namespace flightrec::sampler {
namespace {

constexpr uint64_t kPage = 4096;
// pagemap entry bits (Documentation/admin-guide/mm/pagemap.rst).
constexpr uint64_t kPresent = 1ull << 63;
constexpr uint64_t kFilePage = 1ull << 61;

size_t Zap(uint64_t lo, uint64_t hi) {
  if (hi <= lo) return 0;
  return madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED) == 0 ? hi - lo : 0;
}

}  // namespace

size_t ReleaseCleanFilePages(uint64_t start, uint64_t end) {
  start &= ~(kPage - 1);
  end = (end + kPage - 1) & ~(kPage - 1);
  if (end <= start) return 0;
  const int fd = OpenTransientFd("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  size_t given = 0;
  uint64_t run = 0;  // start of the current run of clean file pages, 0: none
  uint64_t page = start;
  uint64_t entries[512];
  while (page < end) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(512, (end - page) / kPage));
    const ssize_t got = pread(fd, entries, want * sizeof(uint64_t), static_cast<off_t>(page / kPage * 8));
    if (got < static_cast<ssize_t>(sizeof(uint64_t))) break;
    const size_t n = static_cast<size_t>(got) / sizeof(uint64_t);
    for (size_t i = 0; i < n; i++, page += kPage) {
      const bool clean = (entries[i] & kPresent) && (entries[i] & kFilePage);
      if (clean && !run) run = page;
      if (!clean && run) {
        given += Zap(run, page);
        run = 0;
      }
    }
    if (n < want) break;
  }
  if (run) given += Zap(run, page);
  CloseTransientFd(fd);
  return given;
}

}  // namespace flightrec::sampler
