// Socket hot path (see socket_hot_path.h).
#include "preload/sockets/socket_hot_path.h"

#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <new>

namespace flightrec::sockhot {
namespace {
std::atomic<pid_t> g_owner_pid{0};
}

void SetOwnerPid(pid_t pid) { g_owner_pid.store(pid, std::memory_order_relaxed); }

void InitTlsStateOffset() {
  g_tls_state_offset = reinterpret_cast<intptr_t>(&t_state) - reinterpret_cast<intptr_t>(__builtin_thread_pointer());
}

bool InOwnerProcess() { return static_cast<pid_t>(syscall(SYS_getpid)) == g_owner_pid.load(std::memory_order_relaxed); }

void PushAddr(uint64_t time_ns, uint64_t conn, uint64_t parent_conn, int fd, uint64_t entry, AddrWhich which,
              const void* addr, size_t len, bool complete) {
  constexpr size_t kAddrBytes = sizeof(SocketAddrRecord::addr);
  if (!addr) len = 0;
  if (len > kAddrBytes) len = kAddrBytes;
  // Only the address's own bytes go into the ring (ReadAddrRecord).
  RecordWriter w(kRecSocketAddr, static_cast<uint32_t>(kAddrRecordFixedBytes + len));
  if (!w.ok()) return;
  auto* r = static_cast<SocketAddrRecord*>(w.data());
  r->time_ns = time_ns;
  r->conn = conn;
  r->parent_conn = parent_conn;
  r->fd = fd;
  r->role = static_cast<uint8_t>(sockfd::EntryRole(entry));
  r->family = static_cast<uint8_t>(sockfd::EntryFamily(entry));
  r->type = static_cast<uint8_t>(sockfd::EntryType(entry));
  r->which = static_cast<uint8_t>(which);
  r->addr_len = static_cast<uint16_t>(len);
  r->complete = complete ? 1 : 0;
  if (len) memcpy(r->addr, addr, len);
}

sockfd::SockFamily FamilyOf(int domain) {
  switch (domain) {
    case AF_INET: return sockfd::SockFamily::kInet;
    case AF_INET6: return sockfd::SockFamily::kInet6;
    case AF_UNIX: return sockfd::SockFamily::kUnix;
    default: return sockfd::SockFamily::kOther;
  }
}

sockfd::SockType TypeOf(int type) {
  switch (type & 0xf) {  // strip SOCK_NONBLOCK / SOCK_CLOEXEC
    case SOCK_STREAM: return sockfd::SockType::kStream;
    case SOCK_DGRAM: return sockfd::SockType::kDgram;
    case SOCK_SEQPACKET: return sockfd::SockType::kSeqpacket;
    default: return sockfd::SockType::kOther;
  }
}

}  // namespace flightrec::sockhot
