// Accept-queue source: reads the accept queue of listening sockets from the
// kernel with netlink sock_diag (INET_DIAG for TCP over IPv4/IPv6, UNIX_DIAG
// for unix stream listeners), one dump per family, matched to our listeners
// by socket inode. For a listener the kernel reports the queue length
// (connections completed but not yet accept()ed) and the backlog limit.
//
// Flush thread only. The netlink socket is opened lazily, kept open,
// protected by the fd guard, and reopened if the application took its number;
// receives time out after 100 ms so the flush thread never stalls.
#pragma once
#include <cstdint>
#include <string>

#include "format/mi_containers.h"

namespace flightrec {

struct ListenQueue {
  uint64_t inode;
  uint32_t queued;   // completed connections waiting for accept()
  uint32_t backlog;  // the listen() backlog in force (after somaxconn)
};

class ListenQueueProbe {
 public:
  ListenQueueProbe() = default;
  ~ListenQueueProbe();
  ListenQueueProbe(const ListenQueueProbe&) = delete;
  ListenQueueProbe& operator=(const ListenQueueProbe&) = delete;

  // Appends every listening TCP (v4, v6) and unix socket of the host's network
  // namespace. False with *error set when netlink is unavailable.
  bool Dump(format::MiVector<ListenQueue>* out, std::string* error);

 private:
  bool Open(std::string* error);
  bool DumpFamily(int family, format::MiVector<ListenQueue>* out, std::string* error);
  int fd_ = -1;
  uint32_t seq_ = 0;
};

}  // namespace flightrec
