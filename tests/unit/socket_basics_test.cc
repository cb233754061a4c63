// Socket unit tests (prefix "socket"): the fd table, connection ids, the fd
// guard and address formatting. (Request inference is the reader's:
// tests/integration/test_request_inference.py.)
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "preload/fds/fd_guard.h"
#include "preload/sockets/decode/socket_addr_format.h"
#include "preload/sockets/socket_direct.h"
#include "preload/sockets/socket_fd_table.h"

using namespace flightrec;
using sockfd::SockFamily;
using sockfd::SockRole;
using sockfd::SockType;

namespace {

void EnsureTable() { REQUIRE(sockfd::Init(4096)); }

std::string Fmt(const void* addr, size_t len) {
  char buf[160];
  const size_t n = FormatSockaddr(addr, len, buf, sizeof(buf));
  CHECK(n == strlen(buf));
  return buf;
}

}  // namespace

TEST_CASE("socket fd table: set, look up, change role, clear") {
  EnsureTable();
  const uint64_t conn = sockfd::NewConnId();
  const uint64_t e = sockfd::MakeEntry(conn, SockRole::kOther, SockFamily::kInet6, SockType::kStream);
  REQUIRE(sockfd::Set(100, e));
  CHECK(sockfd::Lookup(100) == e);
  CHECK(sockfd::EntryConn(sockfd::Lookup(100)) == conn);
  CHECK(sockfd::EntryFamily(e) == SockFamily::kInet6);
  CHECK(sockfd::EntryType(e) == SockType::kStream);
  CHECK(sockfd::HighWater() >= 101);

  // The role changes only while the fd still names the same connection.
  CHECK(sockfd::SetRole(100, conn + 12345, SockRole::kClient) == 0);
  const uint64_t client = sockfd::SetRole(100, conn, SockRole::kClient);
  CHECK(sockfd::EntryRole(client) == SockRole::kClient);
  CHECK(sockfd::EntryConn(client) == conn);
  CHECK(sockfd::EntryFamily(client) == SockFamily::kInet6);

  // A conditional clear only removes the entry it was told about.
  CHECK_FALSE(sockfd::ClearIf(100, e));
  CHECK(sockfd::Lookup(100) == client);
  CHECK(sockfd::Clear(100) == client);
  CHECK(sockfd::Lookup(100) == 0);
  CHECK_FALSE(sockfd::ClearIf(100, client));
  sockfd::Set(100, client);
  CHECK(sockfd::ClearIf(100, client));
  CHECK(sockfd::Lookup(100) == 0);
  CHECK(sockfd::Clear(100) == 0);
  // Out of range and negative fds are never sockets and never crash.
  CHECK(sockfd::Lookup(-1) == 0);
  CHECK(sockfd::Lookup(1 << 30) == 0);
  CHECK(sockfd::Clear(-5) == 0);
}

TEST_CASE("socket direct calls: the entry bit follows the flags, a dup and the first cancel") {
  EnsureTable();
  REQUIRE(flightrec::ResolveRealSocketFns());
  CHECK_FALSE(flightrec::sockdirect::Init(false));
  // The real functions are libc's own in the plain build: direct calls on.
  // Under ASan they are the sanitizer's interceptors, and must stay off.
  const bool on = flightrec::sockdirect::Init(true);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  CHECK_FALSE(on);
  return;
#endif
  REQUIRE(on);
  const uint64_t conn = sockfd::NewConnId();
  REQUIRE(sockfd::Set(200, sockfd::MakeEntry(conn, SockRole::kOther, SockFamily::kUnix, SockType::kStream)));
  flightrec::sockdirect::SetDirect(200, conn, true);
  CHECK(sockfd::EntryDirect(sockfd::Lookup(200)));
  flightrec::sockdirect::SetDirect(200, conn, false);
  CHECK_FALSE(sockfd::EntryDirect(sockfd::Lookup(200)));
  // Another connection on the number now: left alone.
  flightrec::sockdirect::SetDirect(200, conn + 1, true);
  CHECK_FALSE(sockfd::EntryDirect(sockfd::Lookup(200)));

  // Shared (dup'd): never direct again.
  flightrec::sockdirect::SetDirect(200, conn, true);
  CHECK(sockfd::UpdateFlags(200, conn, sockfd::kEntryShared, 0) != 0);
  CHECK_FALSE(sockfd::EntryDirect(sockfd::Lookup(200)));
  flightrec::sockdirect::SetDirect(200, conn, true);
  CHECK_FALSE(sockfd::EntryDirect(sockfd::Lookup(200)));

  // The first pthread_cancel: every bit cleared, none set again.
  const uint64_t conn2 = sockfd::NewConnId();
  REQUIRE(sockfd::Set(201, sockfd::MakeEntry(conn2, SockRole::kOther, SockFamily::kUnix, SockType::kStream)));
  flightrec::sockdirect::SetDirect(201, conn2, true);
  REQUIRE(sockfd::EntryDirect(sockfd::Lookup(201)));
  flightrec::sockdirect::DisableForCancel();
  CHECK_FALSE(flightrec::sockdirect::Allowed());
  CHECK_FALSE(sockfd::EntryDirect(sockfd::Lookup(201)));
  CHECK(sockfd::EntryConn(sockfd::Lookup(201)) == conn2);
  flightrec::sockdirect::SetDirect(201, conn2, true);
  CHECK_FALSE(sockfd::EntryDirect(sockfd::Lookup(201)));
  flightrec::sockdirect::StoredDirect(201, sockfd::Lookup(201) | sockfd::kEntryDirect);
  CHECK_FALSE(sockfd::EntryDirect(sockfd::Lookup(201)));
  sockfd::Clear(200);
  sockfd::Clear(201);
}

TEST_CASE("socket fd table: fds beyond the table are counted, not stored") {
  EnsureTable();
  const uint64_t before = sockfd::BeyondTableCount();
  const int beyond = static_cast<int>(sockfd::g_table_size) + 3;
  CHECK_FALSE(sockfd::Set(
      beyond, sockfd::MakeEntry(sockfd::NewConnId(), SockRole::kOther, SockFamily::kInet, SockType::kStream)));
  CHECK(sockfd::Lookup(beyond) == 0);
  CHECK(sockfd::BeyondTableCount() == before + 1);
}

TEST_SUITE("concurrency") {
  TEST_CASE("socket fd table: concurrent connection ids are unique and entries independent") {
    EnsureTable();
    constexpr int kThreads = 4, kPer = 5000;
    std::vector<std::vector<uint64_t>> ids(kThreads);
    std::atomic<int> wrong{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([t, &ids, &wrong] {
        const int fd = 200 + t;  // each thread its own fd: set/clear never interfere
        for (int i = 0; i < kPer; ++i) {
          const uint64_t conn = sockfd::NewConnId();
          ids[t].push_back(conn);
          sockfd::Set(fd, sockfd::MakeEntry(conn, SockRole::kServer, SockFamily::kInet, SockType::kStream));
          if (sockfd::EntryConn(sockfd::Lookup(fd)) != conn) wrong++;
          if (sockfd::EntryConn(sockfd::Clear(fd)) != conn) wrong++;
        }
      });
    }
    for (auto& th : threads) th.join();
    std::set<uint64_t> all;
    for (auto& v : ids) all.insert(v.begin(), v.end());
    CHECK(all.size() == size_t(kThreads) * kPer);
    CHECK(all.count(0) == 0);
    CHECK(wrong.load() == 0);
  }

  TEST_CASE("socket fd guard: concurrent protect and unprotect keep their own bits") {
    constexpr int kThreads = 4;
    std::vector<std::thread> threads;
    std::atomic<int> wrong{0};
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([t, &wrong] {
        // Neighbouring fds share bitmap words: the updates must not lose each other.
        const int fd = 700 + t;
        for (int i = 0; i < 20000; ++i) {
          ProtectFd(fd);
          if (!IsProtectedFd(fd)) wrong++;
          UnprotectFd(fd);
          if (IsProtectedFd(fd)) wrong++;
        }
      });
    }
    for (auto& th : threads) th.join();
    CHECK(wrong.load() == 0);
  }
}

TEST_CASE("socket fd guard: protect, unprotect, lost") {
  CHECK_FALSE(IsProtectedFd(42));
  CHECK(ProtectFd(42));
  CHECK(IsProtectedFd(42));
  CHECK(AnyProtectedFd());
  CHECK(ProtectedFdHighWater() >= 43);
  CHECK_FALSE(IsProtectedFd(41));
  CHECK_FALSE(IsProtectedFd(43));
  // The application dup2'd onto it: no longer ours, and the owner learns it once.
  MarkProtectedFdLost(42);
  CHECK_FALSE(IsProtectedFd(42));
  CHECK(FdWasLost(42));
  CHECK_FALSE(FdWasLost(42));
  // Protecting again (a reopened fd got the number) clears any stale lost mark.
  MarkProtectedFdLost(42);
  CHECK(ProtectFd(42));
  CHECK_FALSE(FdWasLost(42));
  UnprotectFd(42);
  CHECK_FALSE(IsProtectedFd(42));
  CHECK_FALSE(ProtectFd(-1));
  CHECK_FALSE(ProtectFd(kMaxProtectedFd));
  CHECK_FALSE(IsProtectedFd(kMaxProtectedFd + 5));
}

TEST_CASE("socket fd guard: pipes a library opened since a snapshot are protected, nothing else") {
  int before_pipe[2];
  REQUIRE(pipe2(before_pipe, O_CLOEXEC) == 0);  // open before the snapshot: not the library's
  // Other tests in this binary protect fds and close them without our close
  // hook (which would unprotect): start these numbers clean.
  for (int fd : {before_pipe[0], before_pipe[1]}) UnprotectFd(fd);
  const OpenFdSnapshot snap = SnapshotOpenFds();
  int lib_pipe[2];
  REQUIRE(pipe2(lib_pipe, O_CLOEXEC) == 0);  // what libunwind does at its first use
  const int file = open("/dev/null", O_RDONLY | O_CLOEXEC);
  REQUIRE(file >= 0);
  for (int fd : {lib_pipe[0], lib_pipe[1], file}) UnprotectFd(fd);
  CHECK(ProtectPipesOpenedSince(snap) == 2);
  CHECK(IsProtectedFd(lib_pipe[0]));
  CHECK(IsProtectedFd(lib_pipe[1]));
  CHECK_FALSE(IsProtectedFd(before_pipe[0]));
  CHECK_FALSE(IsProtectedFd(before_pipe[1]));
  CHECK_FALSE(IsProtectedFd(file));
  for (int fd : {lib_pipe[0], lib_pipe[1]}) UnprotectFd(fd);
  for (int fd : {before_pipe[0], before_pipe[1], lib_pipe[0], lib_pipe[1], file}) close(fd);
}

TEST_CASE("socket address formatting: ipv4, ipv6, unix path, abstract, unnamed, malformed") {
  sockaddr_in in{};
  in.sin_family = AF_INET;
  in.sin_port = htons(6379);
  inet_pton(AF_INET, "127.0.0.1", &in.sin_addr);
  CHECK(Fmt(&in, sizeof(in)) == "127.0.0.1:6379");
  CHECK(Fmt(&in, 4) == "");  // too short for an IPv4 address

  sockaddr_in6 in6{};
  in6.sin6_family = AF_INET6;
  in6.sin6_port = htons(443);
  in6.sin6_addr = in6addr_loopback;
  CHECK(Fmt(&in6, sizeof(in6)) == "[::1]:443");

  sockaddr_un un{};
  un.sun_family = AF_UNIX;
  strcpy(un.sun_path, "/run/app.sock");
  CHECK(Fmt(&un, offsetof(sockaddr_un, sun_path) + strlen(un.sun_path) + 1) == "/run/app.sock");
  CHECK(Fmt(&un, sizeof(un)) == "/run/app.sock");
  // Abstract names start with a NUL and use exactly the given length.
  sockaddr_un ab{};
  ab.sun_family = AF_UNIX;
  memcpy(ab.sun_path, "\0svc", 4);
  CHECK(Fmt(&ab, offsetof(sockaddr_un, sun_path) + 4) == "@svc");
  CHECK(Fmt(&un, offsetof(sockaddr_un, sun_path)) == "");  // unnamed (socketpair)
  CHECK(Fmt(nullptr, 0) == "");
  sockaddr other{};
  other.sa_family = AF_APPLETALK;
  CHECK(Fmt(&other, sizeof(other)) == "family=5");
}

TEST_CASE("own fd range: a descriptor under the floor moves to it, one above stays, 0-2 always leave") {
  const int saved_floor = format::g_own_fd_floor.load();
  format::SetOwnFdFloor(300);
  const int low = open("/dev/null", O_RDONLY | O_CLOEXEC);
  REQUIRE(low >= 0);
  REQUIRE(low < 300);
  const int moved = format::MoveToOwnFdRange(low);
  CHECK(moved >= 300);
  CHECK(fcntl(low, F_GETFD) == -1);  // the low number is free again
  CHECK((fcntl(moved, F_GETFD) & FD_CLOEXEC) != 0);
  CHECK(format::MoveToOwnFdRange(moved) == moved);
  // A floor at or above the soft limit: F_DUPFD fails, the fd stays put.
  rlimit rl;
  REQUIRE(getrlimit(RLIMIT_NOFILE, &rl) == 0);
  format::SetOwnFdFloor(static_cast<int>(rl.rlim_cur < 100000 ? rl.rlim_cur : 100000));
  const int stays = open("/dev/null", O_RDONLY | O_CLOEXEC);
  REQUIRE(stays >= 0);
  if (rl.rlim_cur < 100000) CHECK(format::MoveToOwnFdRange(stays) == stays);
  close(stays);
  close(moved);
  format::SetOwnFdFloor(saved_floor);
}

TEST_SUITE("concurrency") {
  // The debug-file case of a TSan report from a CI run: a recorder thread
  // uses a low number (fstat) and moves the descriptor up; the program then
  // opens that number where TSan cannot see it (opendir's internal open)
  // and closes it (closedir). Under TSan the move's close must be visible,
  // or the program's close is reported as racing with our fstat. The two
  // threads share no synchronisation, as in the preload; the sleep only
  // makes the numbers line up, and a slow thread makes the check vacuous,
  // never wrong.
  TEST_CASE("own fd range: a moved descriptor's old number is free to the program, also to TSan") {
    const int saved_floor = format::g_own_fd_floor.load();
    format::SetOwnFdFloor(300);
    std::atomic<int> moved{-1};
    int low_seen = -1;
    std::thread recorder([&] {
      const int low = open("/dev/null", O_RDONLY | O_CLOEXEC);
      struct stat st;
      if (low >= 0 && fstat(low, &st) == 0) {
        low_seen = low;
        moved.store(format::MoveToOwnFdRange(low), std::memory_order_relaxed);
      }
    });
    usleep(200 * 1000);
    DIR* dir = opendir("/");
    REQUIRE(dir != nullptr);
    const int program_fd = dirfd(dir);
    closedir(dir);
    recorder.join();
    CHECK(moved.load() >= 300);
    if (program_fd != low_seen) MESSAGE("the numbers did not line up (a slow thread): nothing checked");
    close(moved.load());
    format::SetOwnFdFloor(saved_floor);
  }
}
