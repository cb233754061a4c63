// Socket exchange slots (preload/sockets/socket_exchange.h), prefix
// "socket exchange": the per-descriptor accounting the data hooks keep, its
// turns, would-blocks and errors, a held slot turning the call away, and
// exact totals when threads race on one descriptor. (No thread here has a
// ring: the records the slots write are dropped; the integration test
// test_socket_exchanges.py decodes real ones.)
#include <doctest/doctest.h>

#include <atomic>
#include <cerrno>
#include <thread>
#include <vector>

#include "preload/sockets/socket_exchange.h"
#include "preload/sockets/socket_fd_table.h"

using namespace flightrec;
using sockfd::SockFamily;
using sockfd::SockRole;
using sockfd::SockType;

namespace {

constexpr uint64_t kNever = ~uint64_t{0} >> 1;

void EnsureSlots() {
  REQUIRE(sockfd::Init(4096));
  REQUIRE(sockex::Init(sockfd::g_table_size, kNever));
}

uint64_t Entry(uint64_t conn, SockRole role, SockType type = SockType::kStream) {
  return sockfd::MakeEntry(conn, role, SockFamily::kInet, type);
}

void Clean(int fd) {
  sockex::Slot& s = sockex::g_slots[fd];
  s.seq.store(0);
  s.word = s.ask_begin = s.ask_end = s.ans_begin = s.ans_end = 0;
  s.tid = s.bytes_in = s.bytes_out = 0;
  s.calls_in = s.calls_out = s.errors = s.would_block = 0;
}

}  // namespace

TEST_CASE("socket exchange: a server's receives then sends are one exchange; the next receive starts another") {
  EnsureSlots();
  const int fd = 3001;
  Clean(fd);
  const uint64_t e = Entry(77, SockRole::kServer);
  sockex::Slot& s = sockex::g_slots[fd];
  CHECK(sockex::Account(e, fd, false, false, false, 100, 110, 10));
  CHECK(sockex::Account(e, fd, false, false, false, 120, 130, 5));
  CHECK(s.bytes_in == 15);
  CHECK(s.calls_in == 2);
  CHECK(s.ask_begin == 110);  // a receive run begins when its first bytes arrived
  CHECK(s.ask_end == 130);
  CHECK(sockex::Account(e, fd, true, false, false, 200, 210, 20));
  CHECK(sockex::Account(e, fd, true, false, false, 220, 230, -EAGAIN));
  CHECK(s.bytes_out == 20);
  CHECK(s.calls_out == 2);
  CHECK(s.would_block == 1);
  CHECK(s.ans_begin == 210);
  CHECK((s.word & sockex::kSAns) != 0);
  // A receive with data: the exchange above is complete and written; a new one starts.
  CHECK(sockex::Account(e, fd, false, false, false, 300, 310, 7));
  CHECK(s.bytes_in == 7);
  CHECK(s.calls_in == 1);
  CHECK(s.bytes_out == 0);
  CHECK(s.calls_out == 0);
  CHECK(s.would_block == 0);
  CHECK(s.ask_begin == 310);
  CHECK((s.word & sockfd::kConnMask) == 77);
  CHECK((s.word & sockex::kSAns) == 0);
  // A receive that finds nothing moves no data and does not turn the exchange.
  CHECK(sockex::Account(e, fd, false, false, false, 320, 330, -EAGAIN));
  CHECK(s.calls_in == 2);
  CHECK(s.bytes_in == 7);
  // An error counts as one.
  CHECK(sockex::Account(e, fd, true, false, false, 340, 350, -ECONNRESET));
  CHECK(s.errors == 1);
  CHECK(s.calls_out == 1);
  CHECK((s.word & sockex::kSErrOut) != 0);  // the record will say a send failed ...
  CHECK((s.word & sockex::kSErrIn) == 0);   // ... and no receive
  // End of stream with an exchange in progress: written, the slot is empty again.
  CHECK(sockex::Account(e, fd, false, false, false, 360, 370, 0));
  CHECK(s.calls_in == 0);
  CHECK(s.calls_out == 0);
  CHECK(s.bytes_in == 0);
}

TEST_CASE("socket exchange: a client asks with sends; MSG_PEEK moves nothing") {
  EnsureSlots();
  const int fd = 3002;
  Clean(fd);
  const uint64_t e = Entry(78, SockRole::kClient);
  sockex::Slot& s = sockex::g_slots[fd];
  CHECK(sockex::Account(e, fd, true, false, false, 100, 110, 40));
  CHECK(s.ask_begin == 100);                                       // a send run begins when its first send began
  CHECK(sockex::Account(e, fd, false, true, false, 120, 130, 9));  // peek
  CHECK(s.bytes_in == 0);
  CHECK(s.calls_in == 1);
  CHECK((s.word & sockex::kSAns) == 0);
  CHECK(sockex::Account(e, fd, false, false, false, 140, 150, 9));
  CHECK(s.bytes_in == 9);
  CHECK((s.word & sockex::kSAns) != 0);
  CHECK(sockex::Account(e, fd, true, false, false, 160, 170, 40));  // the next question
  CHECK(s.bytes_in == 0);
  CHECK(s.bytes_out == 40);
}

TEST_CASE("socket exchange: a held slot turns the call away; another connection on the number starts afresh") {
  EnsureSlots();
  const int fd = 3003;
  Clean(fd);
  sockex::Slot& s = sockex::g_slots[fd];
  const uint64_t e = Entry(79, SockRole::kServer);
  CHECK(sockex::Account(e, fd, false, false, false, 1, 2, 3));
  s.seq.fetch_add(1);  // another thread holds it
  CHECK_FALSE(sockex::Account(e, fd, false, false, false, 3, 4, 5));
  CHECK(s.bytes_in == 3);
  s.seq.fetch_add(1);
  CHECK(sockex::Account(Entry(80, SockRole::kServer), fd, false, false, false, 5, 6, 11));
  CHECK((s.word & sockfd::kConnMask) == 80);
  CHECK(s.bytes_in == 11);
  CHECK(s.calls_in == 1);
  // Close: the exchange goes out and the slot is free.
  sockex::Flush(fd, 80, 7, sockex::FlushWhich::kAny);
  CHECK(s.word == 0);
  CHECK(s.calls_in == 0);
  CHECK((s.seq.load() & 1) == 0);
}

TEST_CASE("socket exchange: threads racing on one descriptor count every call once") {
  EnsureSlots();
  const int fd = 3004;
  Clean(fd);
  const uint64_t e = Entry(81, SockRole::kServer, SockType::kDgram);
  constexpr int kThreads = 4, kCalls = 10000;
  std::atomic<uint64_t> turned_away{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&] {
      for (int i = 0; i < kCalls; ++i)
        if (!sockex::Account(e, fd, true, false, false, 1000 + i, 1001 + i, 1)) turned_away++;
    });
  for (auto& t : ts) t.join();
  const sockex::Slot& s = sockex::g_slots[fd];
  CHECK(s.calls_out + turned_away.load() == uint64_t(kThreads) * kCalls);
  CHECK(s.bytes_out + turned_away.load() == uint64_t(kThreads) * kCalls);
  CHECK((s.seq.load() & 1) == 0);
}
