// Accept-queue source via netlink sock_diag (see socket_acceptq.h).
#include "preload/sockets/decode/socket_acceptq.h"

#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstring>

#include "preload/fds/fd_guard.h"

namespace flightrec {
namespace {
constexpr int kTcpListen = 10;  // TCP_LISTEN in the kernel's state numbering
}

ListenQueueProbe::~ListenQueueProbe() { CloseOwnFd(fd_); }

bool ListenQueueProbe::Open(std::string* error) {
  if (fd_ >= 0 && (FdWasLost(fd_) || !IsProtectedFd(fd_))) fd_ = -1;  // the application took the number
  if (fd_ >= 0) return true;
  fd_ = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (fd_ < 0) {
    *error = std::string("netlink sock_diag socket: ") + strerror(errno);
    return false;
  }
  timeval tv{0, 100000};
  setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  fd_ = TakeOwnFd(fd_);
  return true;
}

bool ListenQueueProbe::DumpFamily(int family, format::MiVector<ListenQueue>* out, std::string* error) {
  struct {
    nlmsghdr nlh;
    union {
      inet_diag_req_v2 inet;
      unix_diag_req ux;
    } req;
  } msg;
  memset(&msg, 0, sizeof(msg));
  const uint32_t seq = ++seq_;
  msg.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  msg.nlh.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  msg.nlh.nlmsg_seq = seq;
  if (family == AF_UNIX) {
    msg.nlh.nlmsg_len = NLMSG_LENGTH(sizeof(unix_diag_req));
    msg.req.ux.sdiag_family = AF_UNIX;
    msg.req.ux.udiag_states = 1u << kTcpListen;
    msg.req.ux.udiag_show = UDIAG_SHOW_RQLEN;
  } else {
    msg.nlh.nlmsg_len = NLMSG_LENGTH(sizeof(inet_diag_req_v2));
    msg.req.inet.sdiag_family = static_cast<uint8_t>(family);
    msg.req.inet.sdiag_protocol = IPPROTO_TCP;
    msg.req.inet.idiag_states = 1u << kTcpListen;
  }
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (sendto(fd_, &msg, msg.nlh.nlmsg_len, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof(kernel)) < 0) {
    *error = std::string("netlink sock_diag send: ") + strerror(errno);
    return false;
  }
  alignas(nlmsghdr) static char buf[32768];  // flush thread only
  for (int rounds = 0; rounds < 4096; ++rounds) {
    const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      *error = std::string("netlink sock_diag receive: ") + strerror(errno);
      return false;
    }
    int len = static_cast<int>(n);
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
      if (h->nlmsg_seq != seq) continue;  // a late answer to an earlier, timed-out dump
      if (h->nlmsg_type == NLMSG_DONE) return true;
      if (h->nlmsg_type == NLMSG_ERROR) {
        const auto* err = static_cast<const nlmsgerr*>(NLMSG_DATA(h));
        *error = std::string("netlink sock_diag: ") + strerror(-err->error);
        return false;
      }
      if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY) continue;
      if (family == AF_UNIX) {
        if (h->nlmsg_len < NLMSG_LENGTH(sizeof(unix_diag_msg))) continue;
        const auto* m = static_cast<const unix_diag_msg*>(NLMSG_DATA(h));
        ListenQueue q{m->udiag_ino, 0, 0};
        int alen = static_cast<int>(h->nlmsg_len - NLMSG_LENGTH(sizeof(*m)));
        for (auto* a = reinterpret_cast<const rtattr*>(m + 1); RTA_OK(a, alen); a = RTA_NEXT(a, alen)) {
          if (a->rta_type == UNIX_DIAG_RQLEN && RTA_PAYLOAD(a) >= sizeof(unix_diag_rqlen)) {
            unix_diag_rqlen rq;
            memcpy(&rq, RTA_DATA(a), sizeof(rq));
            q.queued = rq.udiag_rqueue;
            q.backlog = rq.udiag_wqueue;
          }
        }
        out->push_back(q);
      } else {
        if (h->nlmsg_len < NLMSG_LENGTH(sizeof(inet_diag_msg))) continue;
        const auto* m = static_cast<const inet_diag_msg*>(NLMSG_DATA(h));
        // For listeners: rqueue = accept queue length, wqueue = backlog limit.
        out->push_back(ListenQueue{m->idiag_inode, m->idiag_rqueue, m->idiag_wqueue});
      }
    }
  }
  *error = "netlink sock_diag: dump did not finish";
  return false;
}

bool ListenQueueProbe::Dump(format::MiVector<ListenQueue>* out, std::string* error) {
  if (!Open(error)) return false;
  for (int family : {AF_INET, AF_INET6, AF_UNIX}) {
    if (!DumpFamily(family, out, error)) {
      // A broken exchange leaves unread answers behind: start afresh next time.
      CloseOwnFd(fd_);
      fd_ = -1;
      return false;
    }
  }
  return true;
}

}  // namespace flightrec
