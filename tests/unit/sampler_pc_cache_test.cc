// Unit tests for sampler/symbols/pc_cache: answers come back as stored, names
// are stored once however many pcs share them, a pc asked again reuses its
// room, long names survive, and the bounds drop everything at once.
#include <doctest/doctest.h>

#include <string>
#include <string_view>

#include "sampler/symbols/pc_cache.h"

namespace {

using flightrec::sampler::PcCache;
using flightrec::sampler::Resolution;
using flightrec::sampler::ResolvedFrame;
using flightrec::sampler::StringPool;

Resolution Answer(int32_t mapping, std::initializer_list<std::pair<const char*, const char*>> frames,
                  uint32_t first_line = 10) {
  Resolution r;
  r.mapping = mapping;
  r.maps_generation = 7;
  uint32_t line = first_line;
  for (const auto& [function, file] : frames) {
    ResolvedFrame f;
    f.function = function;
    f.file = file;
    f.line = line++;
    r.frames.push_back(f);
  }
  return r;
}

std::string FrameText(const PcCache& cache, const PcCache::Entry& e, int i) {
  const PcCache::Frame& f = cache.FramesOf(e)[i];
  return std::string(cache.Text(f.function)) + "@" + std::string(cache.Text(f.file)) + ":" + std::to_string(f.line);
}

}  // namespace

TEST_CASE("pc cache: answers come back as stored, each name stored once") {
  PcCache cache;
  CHECK(cache.Find(0x1000) == nullptr);
  // 1000 pcs of one function (an inline chain of two), as a hot loop gives.
  for (uint64_t pc = 0x1000; pc < 0x1000 + 1000; pc++)
    cache.Store(pc, Answer(3, {{"inlined_helper", "/src/helper.h"}, {"hot_function", "/src/hot.cc"}}));
  CHECK(cache.size() == 1000);
  CHECK(cache.frame_count() == 2000);
  CHECK(cache.string_count() == 4);  // two names and two files, not 4000 strings
  const PcCache::Entry* e = cache.Find(0x1000 + 500);
  REQUIRE(e != nullptr);
  CHECK(e->mapping == 3);
  CHECK(e->maps_generation == 7);
  CHECK_FALSE(e->transient);
  REQUIRE(e->frame_count == 2);
  CHECK(FrameText(cache, *e, 0) == "inlined_helper@/src/helper.h:10");
  CHECK(FrameText(cache, *e, 1) == "hot_function@/src/hot.cc:11");
}

TEST_CASE("pc cache: an unknown pc, and no frames, store nothing but the entry") {
  PcCache cache;
  Resolution unknown;  // mapping -1
  unknown.maps_generation = 2;
  const PcCache::Entry& e = cache.Store(0x42, unknown);
  CHECK(e.mapping == -1);
  CHECK(e.frame_count == 0);
  CHECK(cache.frame_count() == 0);
  // An empty name or file is id 0, the empty string.
  const PcCache::Entry& f = cache.Store(0x43, Answer(1, {{"", ""}}));
  CHECK(cache.FramesOf(f)[0].function == 0);
  CHECK(cache.Text(0).empty());
  CHECK(cache.string_count() == 0);
}

TEST_CASE("pc cache: a pc asked again reuses its frames' room when the answer fits") {
  PcCache cache;
  cache.Store(0x10, Answer(1, {{"a", "f"}, {"b", "f"}, {"c", "f"}}));
  cache.Store(0x20, Answer(1, {{"d", "f"}}));
  REQUIRE(cache.frame_count() == 4);
  // Fewer frames: in place.
  const PcCache::Entry& smaller = cache.Store(0x10, Answer(2, {{"x", "g"}}, 99));
  CHECK(cache.frame_count() == 4);
  CHECK(smaller.frame_count == 1);
  CHECK(smaller.mapping == 2);
  CHECK(FrameText(cache, smaller, 0) == "x@g:99");
  // The other pc's answer is untouched.
  CHECK(FrameText(cache, *cache.Find(0x20), 0) == "d@f:10");
  // More frames than before: appended.
  const PcCache::Entry& bigger = cache.Store(0x20, Answer(1, {{"p", "f"}, {"q", "f"}}));
  CHECK(cache.frame_count() == 6);
  CHECK(FrameText(cache, bigger, 0) == "p@f:10");
  CHECK(FrameText(cache, bigger, 1) == "q@f:11");
  CHECK(FrameText(cache, *cache.Find(0x10), 0) == "x@g:99");
}

TEST_CASE("string pool: long and many strings keep their text") {
  StringPool pool;
  const std::string long_name(20000, 'n');  // longer than a chunk
  std::string names[3000];
  uint32_t ids[3000];
  for (int i = 0; i < 3000; i++) {
    names[i] = "function_number_" + std::to_string(i) + std::string(static_cast<size_t>(i % 50), 'x');
    ids[i] = pool.Intern(names[i]);
    if (i == 1500) CHECK(pool.Intern(long_name) != 0);
  }
  CHECK(pool.size() == 3001);
  for (int i = 0; i < 3000; i++) {
    CHECK(pool.Get(ids[i]) == names[i]);
    CHECK(pool.Intern(names[i]) == ids[i]);
  }
  CHECK(pool.Get(pool.Intern(long_name)) == long_name);
  pool.Clear();
  CHECK(pool.size() == 0);
  CHECK(pool.Get(pool.Intern("again")) == "again");
}

TEST_CASE("pc cache: past its bound, everything is dropped at once") {
  PcCache cache;
  for (uint64_t pc = 0; pc < PcCache::kMaxPcs; pc++) cache.Store(pc, Answer(1, {{"f", "x.c"}}));
  CHECK(cache.size() == PcCache::kMaxPcs);
  const PcCache::Entry& e = cache.Store(PcCache::kMaxPcs, Answer(1, {{"g", "y.c"}}));
  CHECK(cache.size() == 1);
  CHECK(cache.frame_count() == 1);
  CHECK(cache.string_count() == 2);
  CHECK(FrameText(cache, e, 0) == "g@y.c:10");
  CHECK(cache.Find(5) == nullptr);
}
