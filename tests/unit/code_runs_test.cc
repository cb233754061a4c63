// Unit tests for ForEachCodeRun (sampler/symbols/code_runs.h): which stretches of a
// maps snapshot are reported to libdw as code images.
#include <doctest/doctest.h>

#include <string>
#include <tuple>
#include <vector>

#include "sampler/symbols/code_runs.h"

using namespace flightrec::sampler;

namespace {
using Run = std::tuple<std::string, uint64_t, uint64_t>;

std::vector<Run> RunsOf(const char* text) {
  ProcMaps maps;
  maps.LoadFromText(text);
  std::vector<Run> runs;
  ForEachCodeRun(maps, [&](const char* name, uint64_t lo, uint64_t hi) { runs.emplace_back(name, lo, hi); });
  return runs;
}
}  // namespace

TEST_CASE("code runs: a library's segments and .bss make one image; a data file makes none") {
  const auto runs = RunsOf(
      "7f0000000000-7f0000001000 r--p 00000000 08:01 100 /usr/lib/libfoo.so\n"
      "7f0000001000-7f0000003000 r-xp 00001000 08:01 100 /usr/lib/libfoo.so\n"
      "7f0000003000-7f0000004000 r--p 00003000 08:01 100 /usr/lib/libfoo.so\n"
      "7f0000004000-7f0000005000 rw-p 00004000 08:01 100 /usr/lib/libfoo.so\n"
      "7f0000005000-7f0000006000 rw-p 00000000 00:00 0 \n"
      "7f0000100000-7f0000200000 r--p 00000000 08:01 200 /usr/share/locale/locale-archive\n"
      "7ffff7fc0000-7ffff7fc2000 r-xp 00000000 00:00 0 [vdso]\n");
  REQUIRE(runs.size() == 2);
  CHECK(runs[0] == Run{"/usr/lib/libfoo.so", 0x7f0000000000, 0x7f0000005000});
  CHECK(runs[1] == Run{"[vdso]", 0x7ffff7fc0000, 0x7ffff7fc2000});
}

TEST_CASE("code runs: the recorder's own mapping of a library's file never joins the library's image") {
  // The symbolizer maps libfoo.so whole to read it: right below the loaded
  // library, or with only anonymous memory between. libdw's own reporting
  // made one module of both (low = our mapping: a wrong bias).
  for (const char* gap : {"", "7f0000005000-7f0000010000 rw-p 00000000 00:00 0 \n"}) {
    std::string text = "7f0000000000-7f0000005000 r--p 00000000 08:01 100 /usr/lib/libfoo.so\n";
    text += gap;
    const char* start = *gap ? "7f0000010000" : "7f0000005000";
    text += std::string(start) + "-7f0000011000 r--p 00000000 08:01 100 /usr/lib/libfoo.so\n";
    const uint64_t lo = *gap ? 0x7f0000010000 : 0x7f0000005000;
    text += "7f0000011000-7f0000013000 r-xp 00001000 08:01 100 /usr/lib/libfoo.so\n";
    text += "7f0000013000-7f0000014000 rw-p 00003000 08:01 100 /usr/lib/libfoo.so\n";
    const auto runs = RunsOf(text.c_str());
    REQUIRE(runs.size() == 1);
    CHECK(runs[0] == Run{"/usr/lib/libfoo.so", lo, 0x7f0000014000});
  }
}

TEST_CASE("code runs: a hole or another file ends an image; two loads of one file are two images; a piece is none") {
  const auto runs = RunsOf(
      "7f0000000000-7f0000001000 r--p 00000000 08:01 100 /tmp/libplug.so\n"
      "7f0000001000-7f0000002000 r-xp 00001000 08:01 100 /tmp/libplug.so\n"
      "7f0000002000-7f0000003000 r--p 00000000 08:01 100 /tmp/libplug.so\n"  // loaded again, right after
      "7f0000003000-7f0000004000 r-xp 00001000 08:01 100 /tmp/libplug.so\n"
      "7f0000010000-7f0000011000 r-xp 00002000 08:01 100 /tmp/libplug.so\n"  // past a hole
      "7f0000011000-7f0000012000 r-xp 00000000 08:01 300 /tmp/libother.so\n");
  // (The piece past the hole starts at offset 0x2000: not an image.)
  REQUIRE(runs.size() == 3);
  CHECK(runs[0] == Run{"/tmp/libplug.so", 0x7f0000000000, 0x7f0000002000});
  CHECK(runs[1] == Run{"/tmp/libplug.so", 0x7f0000002000, 0x7f0000004000});
  CHECK(runs[2] == Run{"/tmp/libother.so", 0x7f0000011000, 0x7f0000012000});
}
