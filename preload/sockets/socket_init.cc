// Sockets feature entry point: SocketsInit, called once by the runtime's
// constructor (preload/runtime/lifecycle.cc, weak symbol). Resolves the real
// functions, maps the fd table, registers the flush side, adopts sockets that
// already exist (inherited across exec, socket activation, created by
// another library's constructor before ours), and keeps the fork child's
// state its own.
#include <fcntl.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "preload/runtime/config.h"
#include "preload/fds/fd_guard.h"
#include "preload/runtime/log.h"
#include "preload/runtime/own_work.h"
#include "preload/runtime/seccomp_state.h"
#include "preload/runtime/tsc_clock.h"
#include "preload/sockets/socket_direct.h"
#include "preload/sockets/decode/endpoint_classify.h"
#include "preload/sockets/socket_exchange.h"
#include "preload/sockets/socket_prefix.h"
#include "preload/sockets/socket_fd_table.h"
#include "preload/sockets/decode/socket_flush.h"
#include "preload/sockets/socket_hot_path.h"
#include "preload/sockets/socket_real.h"

namespace flightrec {
namespace {

struct LinuxDirent64 {
  uint64_t d_ino;
  int64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[];
};

// Puts an already-open socket into the fd table (role listener when it
// listens, else other: whether an inherited connection was accepted or
// connected cannot be told).
void AdoptFd(int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return;
  int domain = 0, type = 0, listening = 0;
  socklen_t len = sizeof(int);
  if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0) return;
  len = sizeof(int);
  if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0) return;
  len = sizeof(int);
  if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0) listening = 0;
  const sockfd::SockFamily family = sockhot::FamilyOf(domain);
  if (family == sockfd::SockFamily::kOther) return;
  sockfd::Set(fd,
              sockfd::MakeEntry(sockfd::NewConnId(), listening ? sockfd::SockRole::kListener : sockfd::SockRole::kOther,
                                family, sockhot::TypeOf(type)));
}

// Up to this descriptor table size the numbers are probed one by one (an
// fstat each: ~15 us for a small process's 64) rather than /proc/self/fd
// listed (~30-45 us); a larger table is listed.
constexpr unsigned kProbeFdTableUpTo = 256;

// Every descriptor below the table's size as the start read it (an fd the
// program opens later goes through the hooks), or, without that size or
// past kProbeFdTableUpTo, /proc/self/fd walked with getdents64 into a stack
// buffer (no opendir: no host malloc).
void AdoptExistingSockets() {
  const unsigned table_size = FdTableSizeSeen();
  if (table_size > 0 && table_size <= kProbeFdTableUpTo) {
    for (unsigned fd = 0; fd < table_size; ++fd) AdoptFd(static_cast<int>(fd));
    return;
  }
  const int dir = OpenTransientFd("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return;
  alignas(8) char buf[4096];
  for (;;) {
    const long n = syscall(SYS_getdents64, dir, buf, sizeof(buf));
    if (n <= 0) break;
    for (long off = 0; off < n;) {
      const auto* d = reinterpret_cast<const LinuxDirent64*>(buf + off);
      off += d->d_reclen;
      if (d->d_name[0] < '0' || d->d_name[0] > '9') continue;
      const int fd = atoi(d->d_name);
      if (fd != dir) AdoptFd(fd);
    }
  }
  CloseTransientFd(dir);
}

void AtForkChild() {
  sockhot::SetOwnerPid(getpid());
  sockex::ForgetParentExchangesInChild();
  // Our work: what it allocates goes to this thread's recorder heap, the
  // one the parent's start-up filled, not to a segment of its own
  // (recorder_heap.cc).
  OwnWorkOnAppThread ours;
  ResetSocketFlushSideAfterFork();
}

}  // namespace

void SocketsInit(const Config& cfg) {
  ResolveRealSocketFns();
  sockhot::SetOwnerPid(getpid());
  if (!cfg.sockets) return;  // hooks only forward (the fd guard still works)
  sockhot::InitTlsStateOffset();
  if (!sockfd::Init()) {
    Log(LogLevel::kWarn, "cannot map the socket fd table; socket recording disabled");
    return;
  }
  tscclock::SetBlockMinNs(cfg.offcpu_min_us * 1000);
  const bool tsc = tscclock::Init(cfg.socket_tsc);
  Log(LogLevel::kInfo, "socket calls timed with %s", tsc ? "the TSC" : "clock_gettime");
  const bool direct = sockdirect::Init(cfg.socket_direct);
  Log(LogLevel::kInfo, "data calls on non-blocking sockets %s", direct ? "skip libc's wrapper" : "go through libc");
  if (!cfg.socket_calls) {
    // Records are written at most this long after an exchange began
    // (socket_exchange.h); a slow-request trigger needs its exchanges sooner.
    uint64_t bound_ns = 1000ull * 1000 * 1000;
    if (cfg.trigger_slow_ms && cfg.trigger_slow_ms * 1000000ull < bound_ns) bound_ns = cfg.trigger_slow_ms * 1000000ull;
    if (!sockex::Init(sockfd::g_table_size, bound_ns))
      Log(LogLevel::kWarn, "cannot map the socket exchange slots; recording one record per socket call");
    // Endpoint names (issue 41): the first bytes of each question, per descriptor.
    unsigned mask = 0;
    if (sockex::On() && ParseEndpointClassifiers(cfg.endpoints, &mask) && mask) {
      const size_t cap = cfg.trace_context ? sockpfx::kCapTraceContext : sockpfx::kCapDefault;
      if (!sockpfx::Init(sockfd::g_table_size, cap))
        Log(LogLevel::kWarn, "cannot map the request prefix buffers; requests are recorded without endpoint names");
    }
  }
  Log(LogLevel::kInfo, "socket data calls recorded %s", sockex::On() ? "per exchange" : "one by one");
  RegisterSocketFlushSide(cfg);
  AdoptExistingSockets();
  AdoptLiveSockets();
  pthread_atfork(nullptr, nullptr, AtForkChild);
}

}  // namespace flightrec
