// Unit tests for sampler/symbols/source_pages: pages of a private file
// mapping that were only read are let go and come back unchanged, a page
// that was written stays with what was written; and the symbolizer lets go
// of what libdw read of libc's file, naming pcs as before afterwards.
#include <doctest/doctest.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "sampler/symbols/source_pages.h"
#include "sampler/symbols/symbolizer.h"

namespace {

using flightrec::format::FrameLine;
using flightrec::format::MappingInfo;
using flightrec::sampler::ReleaseCleanFilePages;
using flightrec::sampler::Symbolizer;

constexpr size_t kPage = 4096;

// Whether the page at p is in our page tables (pagemap bit 63).
bool Present(const void* p) {
  const int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  uint64_t e = 0;
  const ssize_t n = pread(fd, &e, sizeof(e), static_cast<off_t>(reinterpret_cast<uintptr_t>(p) / kPage * 8));
  close(fd);
  REQUIRE(n == static_cast<ssize_t>(sizeof(e)));
  return (e >> 63) & 1;
}

// Resident KiB of the mapping that starts at `start` (smaps).
long RssKbOfMappingAt(uintptr_t start) {
  FILE* f = fopen("/proc/self/smaps", "r");
  REQUIRE(f);
  char line[512];
  bool in = false;
  long rss = -1;
  while (fgets(line, sizeof(line), f)) {
    unsigned long lo = 0, hi = 0;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') == line + strcspn(line, "-")) {
      in = lo == start;
      continue;
    }
    if (in && strncmp(line, "Rss:", 4) == 0) {
      rss = atol(line + 4);
      break;
    }
  }
  fclose(f);
  return rss;
}

}  // namespace

TEST_CASE("sampler_source_pages: read pages go, a written page stays with what was written") {
  char path[] = "/tmp/fr-source-pages-XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  unlink(path);
  constexpr size_t kPages = 16;
  std::vector<char> content(kPages * kPage);
  for (size_t i = 0; i < content.size(); i++) content[i] = static_cast<char>('a' + i / kPage);
  REQUIRE(write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size()));
  auto* map = static_cast<char*>(mmap(nullptr, content.size(), PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0));
  close(fd);
  REQUIRE(map != MAP_FAILED);
  long sum = 0;
  for (size_t i = 0; i < kPages; i++) sum += map[i * kPage];  // every page read
  CHECK(sum > 0);
  map[5 * kPage + 7] = 'Z';  // one page written: anonymous now
  for (size_t i = 0; i < kPages; i++) REQUIRE(Present(map + i * kPage));

  const size_t given =
      ReleaseCleanFilePages(reinterpret_cast<uintptr_t>(map), reinterpret_cast<uintptr_t>(map) + content.size());
  CHECK(given == (kPages - 1) * kPage);
  for (size_t i = 0; i < kPages; i++) CHECK(Present(map + i * kPage) == (i == 5));
  // What comes back is the file's, and the written page kept its write.
  for (size_t i = 0; i < kPages; i++) CHECK(map[i * kPage + 1] == static_cast<char>('a' + i));
  CHECK(map[5 * kPage + 7] == 'Z');
  CHECK(map[5 * kPage + 8] == 'f');
  munmap(map, content.size());
}

TEST_CASE("sampler_source_pages: the symbolizer lets go of what libdw read, and names pcs as before") {
  Symbolizer sym;
  MappingInfo m;
  std::vector<FrameLine> lines;
  void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(libc);
  void* fn = dlsym(libc, "getpid");
  REQUIRE(fn);
  REQUIRE(sym.Describe(reinterpret_cast<uint64_t>(fn) + 1, &m, &lines));
  REQUIRE(!lines.empty());
  const std::string name = lines.back().function;
  CHECK(name.find("getpid") != std::string::npos);
  const std::string libc_path = m.path;

  // libelf's mapping of libc's file: whole, private, writable, offset 0.
  uintptr_t start = 0;
  {
    FILE* f = fopen("/proc/self/maps", "r");
    REQUIRE(f);
    char line[1024];
    while (fgets(line, sizeof(line), f)) {
      unsigned long lo = 0, hi = 0, off = 1;
      char perms[8] = {};
      if (sscanf(line, "%lx-%lx %7s %lx", &lo, &hi, perms, &off) != 4) continue;
      if (strcmp(perms, "rw-p") == 0 && off == 0 && strstr(line, libc_path.c_str())) start = lo;
    }
    fclose(f);
  }
  REQUIRE(start != 0);
  const long before = RssKbOfMappingAt(start);
  CHECK(before > 0);

  sym.DropIdleDebugInfo(1'000'000'000'000ull);
  CHECK(sym.stats().source_bytes_released > 0);
  CHECK(RssKbOfMappingAt(start) < before);

  // Not again without a new resolution in between.
  const uint64_t released = sym.stats().source_bytes_released;
  sym.DropIdleDebugInfo(2'000'000'000'000ull);
  CHECK(sym.stats().source_bytes_released == released);

  // A new pc reads the file again: named as it would have been.
  void* other = dlsym(libc, "getppid");
  REQUIRE(other);
  REQUIRE(sym.Describe(reinterpret_cast<uint64_t>(other) + 1, &m, &lines));
  REQUIRE(!lines.empty());
  CHECK(lines.back().function.find("getppid") != std::string::npos);
  CHECK(m.path == libc_path);
  dlclose(libc);
}
