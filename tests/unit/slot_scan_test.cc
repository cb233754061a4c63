// Unit tests for SlotScan (preload/flush/slot_scan.h): which thread slots a flush
// tick visits.
#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

#include "preload/flush/slot_scan.h"

using flightrec::kQuietVisits;
using flightrec::SlotScan;

namespace {

struct FakeSlot {
  int id = 0;
  bool busy = false;  // what a visit reports
  FakeSlot* next = nullptr;
};

// The registry's list: each new slot goes in front of the head.
struct FakeRegistry {
  std::vector<FakeSlot*> all;
  FakeSlot* head = nullptr;
  FakeSlot* Add(int id) {
    auto* s = new FakeSlot{id, false, head};
    head = s;
    all.push_back(s);
    return s;
  }
  ~FakeRegistry() {
    for (FakeSlot* s : all) delete s;
  }
};

// One tick: the ids visited, in order.
std::vector<int> Tick(SlotScan<FakeSlot>& scan, bool full) {
  std::vector<int> seen;
  scan.ForEach(
      full,
      [&](FakeSlot* s) {
        seen.push_back(s->id);
        return s->busy;
      },
      [] { return false; });
  return seen;
}

}  // namespace

TEST_CASE("slot scan: slots are taken in as they are published, oldest first") {
  FakeRegistry reg;
  SlotScan<FakeSlot> scan;
  scan.AddNew(reg.head);
  CHECK(scan.size() == 0);
  reg.Add(1);
  reg.Add(2);
  scan.AddNew(reg.head);
  reg.Add(3);
  reg.Add(4);
  reg.Add(5);
  scan.AddNew(reg.head);
  scan.AddNew(reg.head);  // nothing new: nothing added twice
  CHECK(scan.size() == 5);
  CHECK(Tick(scan, true) == std::vector<int>{1, 2, 3, 4, 5});
}

TEST_CASE("slot scan: an idle slot turns quiet and is visited again only on a full scan") {
  FakeRegistry reg;
  FakeSlot* idle = reg.Add(1);
  FakeSlot* busy = reg.Add(2);
  busy->busy = true;
  SlotScan<FakeSlot> scan;
  scan.AddNew(reg.head);
  for (uint32_t i = 0; i < kQuietVisits; i++) CHECK(Tick(scan, false) == std::vector<int>{1, 2});
  CHECK(scan.quiet() == 1);
  CHECK(Tick(scan, false) == std::vector<int>{2});
  // It says when it passed one over (the socket table then waits for the
  // next full scan before ordering connections across threads).
  auto busy_only = [](FakeSlot* s) { return s->busy; };
  auto never = [] { return false; };
  CHECK(scan.ForEach(false, busy_only, never));
  CHECK_FALSE(scan.ForEach(true, busy_only, never));
  // A full scan visits it; still idle, it stays quiet.
  CHECK(Tick(scan, true) == std::vector<int>{1, 2});
  CHECK(Tick(scan, false) == std::vector<int>{2});
  // Found busy on a full scan: visited on every tick again.
  idle->busy = true;
  CHECK(Tick(scan, true) == std::vector<int>{1, 2});
  CHECK(scan.quiet() == 0);
  idle->busy = false;
  CHECK(Tick(scan, false) == std::vector<int>{1, 2});
}

TEST_CASE("slot scan: a busy visit clears the idle count before it reaches quiet") {
  FakeRegistry reg;
  FakeSlot* s = reg.Add(1);
  SlotScan<FakeSlot> scan;
  scan.AddNew(reg.head);
  for (uint32_t i = 0; i + 1 < kQuietVisits; i++) Tick(scan, false);
  s->busy = true;
  Tick(scan, false);
  s->busy = false;
  for (uint32_t i = 0; i + 1 < kQuietVisits; i++) Tick(scan, false);
  CHECK(scan.quiet() == 0);
  CHECK(Tick(scan, false) == std::vector<int>{1});
}

TEST_CASE("slot scan: a stop request ends the scan") {
  FakeRegistry reg;
  reg.Add(1);
  reg.Add(2);
  reg.Add(3);
  SlotScan<FakeSlot> scan;
  scan.AddNew(reg.head);
  std::vector<int> seen;
  scan.ForEach(
      true,
      [&](FakeSlot* s) {
        seen.push_back(s->id);
        return false;
      },
      [&] { return seen.size() == 2; });
  CHECK(seen == std::vector<int>{1, 2});
}

TEST_CASE("slot scan: names are looked at for new and busy slots each round, for sleeping ones in turn") {
  FakeRegistry reg;
  for (int i = 1; i <= 25; i++) reg.Add(i);
  reg.all[4]->busy = true;  // slot 5 keeps recording
  SlotScan<FakeSlot> scan;
  scan.AddNew(reg.head);
  auto due = [&] {
    std::vector<int> ids;
    scan.ForEachDue(false, [&](FakeSlot* s) { ids.push_back(s->id); });
    return ids;
  };
  // New slots: every one, once.
  CHECK(due().size() == 25);
  // Then each round: the busy slot, and a tenth of the others in turn.
  std::vector<int> seen(26, 0);
  for (uint32_t round = 1; round <= flightrec::kSlowRounds; round++) {
    Tick(scan, false);
    const std::vector<int> ids = due();
    CHECK(std::find(ids.begin(), ids.end(), 5) != ids.end());
    CHECK(ids.size() <= 1 + (25 + flightrec::kSlowRounds - 1) / flightrec::kSlowRounds);
    for (int id : ids) seen[id]++;
  }
  // Over kSlowRounds rounds every sleeping slot came up exactly once.
  for (int id = 1; id <= 25; id++) CHECK(seen[id] == (id == 5 ? static_cast<int>(flightrec::kSlowRounds) : 1));
  // The final tick looks at every one.
  int all = 0;
  scan.ForEachDue(true, [&](FakeSlot*) { all++; });
  CHECK(all == 25);
}
