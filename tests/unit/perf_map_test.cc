// Unit tests for sampler/symbols/perf_map: the line format, incremental reading of a
// map that grows (a line may arrive in two writes), a later line for the same
// start winning, and the ownership rule.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "sampler/symbols/perf_map.h"

using flightrec::sampler::PerfMap;

namespace {

bool Parse(const char* line, uint64_t* start, uint64_t* size, std::string* name) {
  flightrec::format::MiString n;
  const bool ok = PerfMap::ParseLine(line, strlen(line), start, size, &n);
  name->assign(n.data(), n.size());
  return ok;
}

// This process's map file, removed when the test ends.
struct OwnMap {
  std::string path = "/tmp/perf-" + std::to_string(getpid()) + ".map";
  OwnMap() { unlink(path.c_str()); }
  ~OwnMap() { unlink(path.c_str()); }
  void Append(const char* text) const {
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    REQUIRE(fd >= 0);
    REQUIRE(write(fd, text, strlen(text)) == static_cast<ssize_t>(strlen(text)));
    close(fd);
  }
};

}  // namespace

TEST_CASE("perf_map: lines as JIT runtimes write them") {
  uint64_t start = 0, size = 0;
  std::string name;
  REQUIRE(Parse("7f135fe06040 180 JS:*fibAlpha /tmp/burn.js:1:18", &start, &size, &name));
  CHECK(start == 0x7f135fe06040);
  CHECK(size == 0x180);
  CHECK(name == "JS:*fibAlpha /tmp/burn.js:1:18");  // spaces belong to the name
  REQUIRE(Parse("0x1000 0x20 py::main:/x.py\r", &start, &size, &name));
  CHECK((start == 0x1000 && size == 0x20 && name == "py::main:/x.py"));
  CHECK_FALSE(Parse("", &start, &size, &name));
  CHECK_FALSE(Parse("1000 20", &start, &size, &name));       // no name
  CHECK_FALSE(Parse("1000 0 empty", &start, &size, &name));  // no size
  CHECK_FALSE(Parse("zz 20 bad", &start, &size, &name));
  CHECK_FALSE(Parse("11112222333344445 20 toolong", &start, &size, &name));
  CHECK_FALSE(Parse("ffffffffffffffff 20 wraps", &start, &size, &name));
}

TEST_CASE("perf_map: reads what was appended, a later line for a start wins") {
  OwnMap map;
  PerfMap pm;
  CHECK_FALSE(pm.Refresh());
  CHECK_FALSE(pm.present());
  map.Append("1000 100 first\n2000 10 second\n3000 1");  // the third line is cut mid-write
  CHECK(pm.Refresh());
  CHECK(pm.present());
  CHECK(std::string(pm.Find(0x1000)) == "first");
  CHECK(std::string(pm.Find(0x10ff)) == "first");
  CHECK(pm.Find(0x1100) == nullptr);
  CHECK(pm.Find(0x0fff) == nullptr);
  CHECK(std::string(pm.Find(0x200f)) == "second");
  CHECK(pm.Find(0x3000) == nullptr);
  map.Append("0 third\n1000 80 first-again\n");
  CHECK(pm.Refresh());
  CHECK(std::string(pm.Find(0x3005)) == "third");
  CHECK(std::string(pm.Find(0x107f)) == "first-again");
  CHECK(pm.Find(0x1080) == nullptr);
  CHECK(pm.size() == 3);
  CHECK_FALSE(pm.Refresh());  // nothing new
}

TEST_CASE("perf_map: a map owned by another user is ignored") {
  if (geteuid() != 0) return;  // handing the file to another user needs root
  OwnMap map;
  map.Append("1000 100 planted\n");
  REQUIRE(chown(map.path.c_str(), 65534, 65534) == 0);
  PerfMap pm;
  CHECK_FALSE(pm.Refresh());
  CHECK_FALSE(pm.present());
  CHECK(pm.Find(0x1000) == nullptr);
}
