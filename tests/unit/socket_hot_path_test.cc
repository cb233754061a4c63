// Socket hot path unit tests (prefix "socket hot path"): the push reads the
// calling thread's state through a TLS offset kept with the hot globals
// (preload/sockets/socket_hot_path.h); it must be the same state t_state holds, on
// every thread, and the ordinary read before the offset is known.
#include <doctest/doctest.h>

#include <thread>
#include <vector>

#include "preload/sockets/socket_hot_path.h"
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
