// Socket direct calls (see socket_direct.h): the switch, and keeping the fd
// table's kEntryDirect bits true to it.
#include "preload/sockets/socket_direct.h"

#include <dlfcn.h>

#include <atomic>

namespace flightrec::sockdirect {
namespace {

// Off until Init finds every data function libc's own; off for good after
// the first pthread_cancel.
std::atomic<bool> g_on{false};

}  // namespace

bool Init(bool allowed) {
  if (!allowed) return false;
  void* libc = dlopen("libc.so.6", RTLD_NOLOAD | RTLD_LAZY);
  if (!libc) return false;
  const RealSocketFns& r = g_real_sock;
  const struct {
    const void* next;  // what the hook forwards to: the next definition after ours
    const char* name;
  } fns[] = {
      {reinterpret_cast<const void*>(r.read), "read"},         {reinterpret_cast<const void*>(r.write), "write"},
      {reinterpret_cast<const void*>(r.readv), "readv"},       {reinterpret_cast<const void*>(r.writev), "writev"},
      {reinterpret_cast<const void*>(r.recv), "recv"},         {reinterpret_cast<const void*>(r.send), "send"},
      {reinterpret_cast<const void*>(r.recvfrom), "recvfrom"}, {reinterpret_cast<const void*>(r.sendto), "sendto"},
      {reinterpret_cast<const void*>(r.recvmsg), "recvmsg"},   {reinterpret_cast<const void*>(r.sendmsg), "sendmsg"},
  };
  bool all_libc = true;
  for (const auto& f : fns) all_libc = all_libc && dlsym(libc, f.name) == f.next;
  dlclose(libc);
  if (all_libc) g_on.store(true, std::memory_order_seq_cst);
  return all_libc;
}

bool Allowed() { return g_on.load(std::memory_order_seq_cst); }

void DisableForCancel() {
  if (!g_on.exchange(false, std::memory_order_seq_cst)) return;
  // Every bit set before the switch went off is cleared here; a hook that
  // sets one concurrently re-reads the switch afterwards and clears its own
  // (StoredDirect). Both sides are seq_cst operations (no fences: TSan
  // builds cannot check those), so one of the two sees the other.
  const int high = sockfd::HighWater();
  for (int fd = 0; fd < high; ++fd) {
    const uint64_t e = sockfd::g_table[fd].load(std::memory_order_seq_cst);
    if (sockfd::EntryDirect(e)) sockfd::UpdateFlags(fd, sockfd::EntryConn(e), 0, sockfd::kEntryDirect);
  }
}

namespace {

// Sets fd's bit (if it still names conn), then re-reads the switch. Pairs
// with DisableForCancel (switch off, then read the bits): the bit is set by a
// seq_cst read-modify-write before the switch is read, so either its sweep
// sees the bit or we see the switch off and clear it again.
void SetConfirmed(int fd, uint64_t conn) {
  if (!sockfd::UpdateFlags(fd, conn, sockfd::kEntryDirect, 0)) return;
  if (!Allowed()) sockfd::UpdateFlags(fd, conn, 0, sockfd::kEntryDirect);
}

}  // namespace

void StoredDirect(int fd, uint64_t entry) {
  if (sockfd::EntryDirect(entry)) SetConfirmed(fd, sockfd::EntryConn(entry));
}

void SetDirect(int fd, uint64_t conn, bool nonblocking) {
  if (nonblocking && Allowed()) {
    SetConfirmed(fd, conn);
  } else {
    sockfd::UpdateFlags(fd, conn, 0, sockfd::kEntryDirect);
  }
}

}  // namespace flightrec::sockdirect
