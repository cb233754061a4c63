// Unit tests for the unload record ring (sampler/symbols/code_unloads.h) and the
// symbolizer's history of it (sampler/symbols/unloaded_code.h): eras, the holder of
// a pc in an era, and what a ring overrun does to completeness.
#include <doctest/doctest.h>

#include <cstring>

#include "sampler/symbols/code_unloads.h"
#include "sampler/symbols/unloaded_code.h"

using namespace flightrec::sampler;

namespace {
UnloadedObject Object(uint64_t time, uint64_t lo, uint64_t hi, const char* path) {
  UnloadedObject o;
  o.time_ns = time;
  o.bias = lo;
  o.lo = lo;
  o.hi = hi;
  std::strncpy(o.path, path, sizeof(o.path) - 1);
  return o;
}

// A history that has taken in every unload so far (the ring is
// process-wide: earlier cases leave theirs), and the index of the next.
struct Fresh {
  UnloadedCode code;
  uint64_t latest = 0;
  uint64_t base = 0;
  Fresh() {
    code.Sync(&latest);
    base = CodeUnloadCount();
  }
};
}  // namespace

TEST_CASE_FIXTURE(Fresh,
                  "code unloads: the holder of a pc in an era is the first library unloaded after it that covered it") {
  NoteCodeUnloaded(Object(1000, 0x10000, 0x20000, "/nonexistent/liba.so"));
  NoteCodeUnloaded(Object(2000, 0x10000, 0x20000, "/nonexistent/libb.so"));  // loaded where a was
  NoteCodeUnloaded(Object(3000, 0x30000, 0x40000, "/nonexistent/libc.so"));
  CHECK(code.Sync(&latest) == 3);
  CHECK(latest == 3000);
  CHECK(code.EraOf(500) == base);
  CHECK(code.EraOf(1500) == base + 1);
  CHECK(code.EraOf(2500) == base + 2);
  CHECK(code.EraOf(3500) == base + 3);
  Dwfl_Module* mod = nullptr;
  const UnloadedObject* h = code.Holder(code.EraOf(500), 0x10100, &mod);
  REQUIRE(h);
  CHECK(std::strcmp(h->path, "/nonexistent/liba.so") == 0);
  CHECK(mod == nullptr);  // its file is gone: placed, not named
  h = code.Holder(code.EraOf(1500), 0x10100, &mod);
  REQUIRE(h);
  CHECK(std::strcmp(h->path, "/nonexistent/libb.so") == 0);
  CHECK(code.Holder(code.EraOf(2500), 0x10100, &mod) == nullptr);  // nothing unloaded there after 2000
  h = code.Holder(code.EraOf(2500), 0x30000, &mod);
  REQUIRE(h);
  CHECK(std::strcmp(h->path, "/nonexistent/libc.so") == 0);
  CHECK(code.Holder(code.EraOf(500), 0x40000, &mod) == nullptr);  // hi is past the end
  CHECK(code.Complete(code.EraOf(500)));
}

TEST_CASE_FIXTURE(Fresh,
                  "code unloads: records overwritten before they were read make the eras before them incomplete") {
  for (size_t i = 0; i < kUnloadRingSize + 10; i++)
    NoteCodeUnloaded(Object(10000 + i, 0x10000, 0x20000, "/nonexistent/lib.so"));
  code.Sync(&latest);
  CHECK(latest == 10000 + kUnloadRingSize + 9);
  CHECK_FALSE(code.Complete(base));  // its records were overwritten
  CHECK(code.Complete(CodeUnloadCount() - 1));
  CHECK(code.Complete(CodeUnloadCount()));  // after every unload: nothing to miss
}

TEST_CASE_FIXTURE(Fresh, "code unloads: after a ring overrun, eras still count from the right unload") {
  NoteCodeUnloaded(Object(50000, 0x50000, 0x60000, "/nonexistent/before.so"));
  code.Sync(&latest);  // read: in the history
  for (size_t i = 0; i < kUnloadRingSize + 3; i++)
    NoteCodeUnloaded(Object(60000 + i, 0x70000, 0x80000, "/nonexistent/storm.so"));
  NoteCodeUnloaded(Object(90000, 0x90000, 0xa0000, "/nonexistent/last.so"));
  code.Sync(&latest);
  const uint64_t last = base + 1 + kUnloadRingSize + 3;  // the index of last.so's unload
  CHECK(code.EraOf(89999) == last);
  Dwfl_Module* mod = nullptr;
  const UnloadedObject* h = code.Holder(code.EraOf(89999), 0x90100, &mod);
  REQUIRE(h);
  CHECK(std::strcmp(h->path, "/nonexistent/last.so") == 0);
  CHECK_FALSE(code.Complete(base));  // before.so's era lost the storm's first records
}
