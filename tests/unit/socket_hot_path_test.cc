// Socket hot path unit tests (prefix "socket hot path"): the push reads the
// calling thread's state through a TLS offset kept with the hot globals
// (preload/sockets/socket_hot_path.h); it must be the same state t_state holds, on
// every thread, and the ordinary read before the offset is known. An
// address record takes only its address's bytes in the ring.
#include <doctest/doctest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "preload/sockets/socket_hot_path.h"
#include "preload/sockets/socket_records.h"
#include "preload/threads/thread_registry.h"

using flightrec::ThreadState;
using flightrec::t_state;
namespace sockhot = flightrec::sockhot;

TEST_CASE("socket hot path: the thread state read through the hot line's TLS offset is t_state") {
  const intptr_t saved_offset = sockhot::g_tls_state_offset;
  ThreadState* const saved_state = t_state;
  alignas(ThreadState) static unsigned char fake[4][sizeof(ThreadState)];

  sockhot::g_tls_state_offset = 0;  // before init: the ordinary TLS read
  t_state = reinterpret_cast<ThreadState*>(fake[0]);
  CHECK(sockhot::ThreadStateViaHotLine() == t_state);

  sockhot::InitTlsStateOffset();
  CHECK(sockhot::g_tls_state_offset != 0);
  CHECK(sockhot::ThreadStateViaHotLine() == reinterpret_cast<ThreadState*>(fake[0]));
  t_state = nullptr;
  CHECK(sockhot::ThreadStateViaHotLine() == nullptr);

  // Other threads: one offset, each its own state.
  std::vector<ThreadState*> seen(3, nullptr);
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([i, &seen] {
      ThreadState* const before = t_state;
      t_state = reinterpret_cast<ThreadState*>(fake[i + 1]);
      seen[i] = sockhot::ThreadStateViaHotLine();
      t_state = before;
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < 3; ++i) CHECK(seen[i] == reinterpret_cast<ThreadState*>(fake[i + 1]));

  t_state = saved_state;
  sockhot::g_tls_state_offset = saved_offset;
}

// An address record takes the ring bytes its address needs, not the whole
// 128-byte sockaddr_storage, and reads back as the full struct.
TEST_CASE("socket hot path: an address record carries only its address's bytes") {
  using namespace flightrec;
  constexpr size_t kRing = 64 << 10;
  std::vector<uint8_t> storage(kRing + 64);
  auto ts = std::make_unique<ThreadState>();
  ts->ring.Init(reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(storage.data()) + 63) & ~uintptr_t{63}), kRing);
  ThreadState* const saved_state = t_state;
  t_state = ts.get();

  sockaddr_in in{};
  in.sin_family = AF_INET;
  in.sin_port = htons(6379);
  in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  sockaddr_un un{};
  un.sun_family = AF_UNIX;
  memset(un.sun_path, 'p', sizeof(un.sun_path) - 1);
  sockaddr_storage big{};
  memset(&big, 0x5a, sizeof(big));
  const uint64_t entry =
      sockfd::MakeEntry(11, sockfd::SockRole::kClient, sockfd::SockFamily::kInet, sockfd::SockType::kStream);
  sockhot::PushAddr(1, 11, 0, 5, entry, AddrWhich::kPeer, &in, sizeof(in), false);
  sockhot::PushAddr(2, 12, 0, 6, entry, AddrWhich::kNone, nullptr, 0, true);
  sockhot::PushAddr(3, 13, 0, 7, entry, AddrWhich::kLocal, &un, sizeof(un), true);
  sockhot::PushAddr(4, 14, 0, 8, entry, AddrWhich::kLocal, &big, 4096, true);  // cut to 128
  t_state = saved_state;

  std::vector<uint32_t> sizes;
  std::vector<SocketAddrRecord> got;
  ts->ring.Drain([&](const RecordHeader& h, const void* payload) {
    sizes.push_back(h.size);
    SocketAddrRecord r;
    REQUIRE(ReadAddrRecord(payload, h.size - sizeof(RecordHeader), &r));
    got.push_back(r);
  });
  // Header (8) + 40 fixed bytes + the address, rounded up to 8.
  CHECK(sizes == std::vector<uint32_t>{8 + 40 + 16, 8 + 40, 8 + 40 + 112, 8 + 40 + 128});
  REQUIRE(got.size() == 4);
  CHECK(got[0].conn == 11);
  CHECK(got[0].fd == 5);
  CHECK(got[0].which == uint8_t(AddrWhich::kPeer));
  CHECK(got[0].addr_len == sizeof(in));
  CHECK(memcmp(got[0].addr, &in, sizeof(in)) == 0);
  CHECK(got[0].addr[sizeof(in)] == 0);  // past the address: zeros, not ring bytes
  CHECK(got[1].addr_len == 0);
  CHECK(got[1].complete == 1);
  CHECK(got[2].addr_len == sizeof(un));
  CHECK(memcmp(got[2].addr, &un, sizeof(un)) == 0);
  CHECK(got[3].addr_len == 128);
  CHECK(got[3].time_ns == 4);
}

TEST_CASE("socket hot path: a short or overclaiming address record is cut, never overread") {
  using namespace flightrec;
  alignas(8) uint8_t raw[kAddrRecordFixedBytes + 16] = {};
  SocketAddrRecord r;
  CHECK_FALSE(ReadAddrRecord(raw, kAddrRecordFixedBytes - 1, &r));
  SocketAddrRecord claim{};
  claim.conn = 9;
  claim.addr_len = 128;  // claims the whole address; the record holds 16 bytes of it
  memcpy(raw, &claim, kAddrRecordFixedBytes);
  memset(raw + kAddrRecordFixedBytes, 0x33, 16);
  REQUIRE(ReadAddrRecord(raw, sizeof(raw), &r));
  CHECK(r.conn == 9);
  CHECK(r.addr_len == 16);
  CHECK(r.addr[15] == 0x33);
  CHECK(r.addr[16] == 0);
}
