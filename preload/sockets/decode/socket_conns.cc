// Connection table (see socket_conns.h).
#include "preload/sockets/decode/socket_conns.h"

#include <algorithm>

#include <cerrno>
#include <sys/socket.h>

#include "preload/sockets/decode/socket_addr_format.h"
#include "preload/sockets/decode/socket_events.h"
#include "preload/sockets/socket_exchange.h"
#include "preload/sockets/socket_fd_table.h"
#include "preload/runtime/config.h"
#include "preload/runtime/trigger.h"

namespace flightrec {
namespace {

using format::Value;
using sockfd::SockRole;

constexpr size_t kAddrText = 160;

bool IsError(int64_t result) { return IsSocketError(result); }

}  // namespace

const char* SockRoleName(uint8_t role) {
  switch (SockRole(role)) {
    case SockRole::kClient: return "client";
    case SockRole::kServer: return "server";
    case SockRole::kListener: return "listener";
    default: return "other";
  }
}
const char* SockFamilyName(uint8_t family) {
  switch (sockfd::SockFamily(family)) {
    case sockfd::SockFamily::kInet: return "ipv4";
    case sockfd::SockFamily::kInet6: return "ipv6";
    case sockfd::SockFamily::kUnix: return "unix";
    default: return "other";
  }
}
const char* SockTypeName(uint8_t type) {
  switch (sockfd::SockType(type)) {
    case sockfd::SockType::kStream: return "stream";
    case sockfd::SockType::kDgram: return "dgram";
    case sockfd::SockType::kSeqpacket: return "seqpacket";
    default: return "other";
  }
}

ConnTable::Conn* ConnTable::Find(uint64_t conn) {
  Recent& r = recent_[conn % kRecent];
  if (r.id == conn && r.conn) return r.conn;
  auto it = conns_.find(conn);
  if (it == conns_.end()) return nullptr;
  r = Recent{conn, &it->second};
  return r.conn;
}

void ConnTable::SetRole(Conn& c, uint8_t role) {
  if (role != 0) c.role = role;
}

ConnTable::Conn* ConnTable::Adopt(uint64_t conn, int fd, uint64_t time_ns, uint32_t tid) {
  if (!probe_.adopt) return nullptr;
  uint8_t role = 0, family = 0, type = 0;
  char local[kAddrText], peer[kAddrText];
  local[0] = peer[0] = '\0';
  if (!probe_.adopt(fd, conn, &role, &family, &type, local, peer, kAddrText)) return nullptr;
  Conn& c = conns_[conn];
  c.created_ns = c.last_ns = time_ns;
  c.fd = fd;
  c.tid = tid;
  c.family = family;
  c.type = type;
  c.local = local;
  c.peer = peer;
  SetRole(c, role);
  if (role == uint8_t(SockRole::kListener) && probe_.inode) c.inode = probe_.inode(fd, conn);
  return &c;
}

void ConnTable::AdoptLive(uint64_t conn, int fd, uint64_t time_ns) {
  if (!conn || Find(conn)) return;
  Conn* c = Adopt(conn, fd, time_ns, 0);
  if (c) c->announce = true;
}

void ConnTable::AnnounceAdopted(format::SegmentWriter* w) {
  for (auto& [id, c] : conns_) {
    if (!c.announce) continue;
    c.announce = false;
    if (!c.open_emitted) EmitOpen(w, id, c);
  }
}

void ConnTable::EmitOpen(format::SegmentWriter* w, uint64_t id, Conn& c) {
  c.open_emitted = true;
  Value v[] = {Value::U(c.created_ns),
               Value::U(c.tid),
               Value::U(static_cast<uint64_t>(c.fd < 0 ? 0 : c.fd)),
               Value::U(id),
               Value::Str(SockRoleName(c.role)),
               Value::Str(SockFamilyName(c.family)),
               Value::Str(SockTypeName(c.type)),
               Value::Str(c.local),
               Value::Str(c.peer),
               Value::U(c.parent)};
  w->Append(g_socket_types.open, v, 10);
}

void ConnTable::Close(format::SegmentWriter* w, uint64_t id, Conn& c, const SocketOpRecord& r, uint32_t tid) {
  if (!c.open_emitted) EmitOpen(w, id, c);
  Value v[] = {Value::U(r.start_ns), Value::U(tid),        Value::U(static_cast<uint64_t>(r.fd)),
               Value::U(id),         Value::U(c.bytes_in), Value::U(c.bytes_out),
               Value::U(c.ops),      Value::U(c.errors)};
  w->Append(g_socket_types.close, v, 8);
  Forget(id);
  conns_.erase(id);  // c is dangling from here on
}

void ConnTable::OnAddr(format::SegmentWriter* w, const SocketAddrRecord& r, uint32_t tid) {
  if (r.conn == 0) return;
  Conn* c = Find(r.conn);
  if (!c) {
    c = &conns_[r.conn];
    c->created_ns = r.time_ns;
    c->fd = r.fd;
    c->tid = tid;
  }
  c->last_ns = r.time_ns;
  if (r.parent_conn) c->parent = r.parent_conn;
  if (r.family) c->family = r.family;
  if (r.type) c->type = r.type;
  SetRole(*c, r.role);
  if (r.which != uint8_t(AddrWhich::kNone) && r.addr_len) {
    char text[kAddrText];
    const size_t n =
        FormatSockaddr(r.addr, r.addr_len < sizeof(r.addr) ? r.addr_len : sizeof(r.addr), text, sizeof(text));
    (r.which == uint8_t(AddrWhich::kLocal) ? c->local : c->peer).assign(text, n);
  }
  if (r.complete) {
    if (c->role == uint8_t(SockRole::kListener) && probe_.inode && !c->inode) c->inode = probe_.inode(r.fd, r.conn);
    // connect() again (UDP re-targeting, a retry) re-describes the connection.
    EmitOpen(w, r.conn, *c);
  }
}

void ConnTable::OnGap(format::SegmentWriter* w, const SocketGapRecord& g, uint32_t tid) {
  const Value v[] = {Value::U(g.time_ns),   Value::U(tid),   Value::U(g.conn),  Value::U(g.bytes_in),
                     Value::U(g.bytes_out), Value::U(g.ops), Value::U(g.errors)};
  w->Append(g_socket_types.gap, v, 7);
  Conn* c = Find(g.conn);
  if (!c) return;  // never known (its socket()/accept records were dropped too)
  c->bytes_in += g.bytes_in;
  c->bytes_out += g.bytes_out;
  c->ops += g.ops;
  c->errors += g.errors;
  if (g.time_ns > c->last_ns) c->last_ns = g.time_ns;
}

void ConnTable::Count(Conn& c, const SocketOpRecord& r) {
  c.ops++;
  // A max: records of different threads can arrive out of time order.
  c.last_ns = std::max(c.last_ns, r.start_ns + r.duration_ns);
  if (IsError(r.result)) c.errors++;
  if (IsDataOp(r.op) && r.result > 0 && !(r.flags & kOpFlagPeek)) {
    (IsSendOp(r.op) ? c.bytes_out : c.bytes_in) += static_cast<uint64_t>(r.result);
    if (c.role == uint8_t(sockfd::SockRole::kServer)) TrackExchange(c, r);
  }
}

void ConnTable::TrackExchange(Conn& c, const SocketOpRecord& r) {
  const uint64_t slow_ns = GetConfig().trigger_slow_ms * 1000000ull;
  if (!slow_ns) return;
  const uint64_t end = r.start_ns + r.duration_ns;
  if (IsRecvOp(r.op)) {
    if (c.exchange != 1) {  // the first bytes of a new request
      c.exchange = 1;
      c.exchange_fired = false;
      c.exchange_start_ns = end;
    }
    return;
  }
  if (c.exchange == 0) return;  // a greeting or a push: no request to time
  c.exchange = 2;
  if (!c.exchange_fired && end > c.exchange_start_ns && end - c.exchange_start_ns >= slow_ns) {
    c.exchange_fired = true;
    RequestTrigger(TriggerReason::kSlowRequest, end - c.exchange_start_ns);
  }
}

void ConnTable::TrackExchange(Conn& c, const ExchangeEvent& e) {
  if (!GetConfig().trigger_slow_ms) return;  // no rule at all
  const bool asked = (c.role == uint8_t(sockfd::SockRole::kServer) ? e.bytes_in : e.bytes_out) > 0;
  if (!(e.flags & kExCont)) {  // a new exchange
    c.exchange = asked ? 1 : 0;
    c.exchange_fired = false;
    c.exchange_start_ns = e.time;    // a server's: the end of the receive that brought the first bytes
    c.exchange_slow_ns = e.slow_ns;  // its endpoint's threshold (the first part names it)
  } else if (c.exchange == 0 && asked) {
    c.exchange = 1;
    c.exchange_start_ns = e.time;
  }
  if (c.exchange == 0 || c.role != uint8_t(sockfd::SockRole::kServer) || e.bytes_out == 0) return;
  c.exchange = 2;
  const uint64_t end = e.end();
  const uint64_t slow_ns = c.exchange_slow_ns;
  if (slow_ns && !c.exchange_fired && end > c.exchange_start_ns && end - c.exchange_start_ns >= slow_ns) {
    c.exchange_fired = true;
    RequestTrigger(TriggerReason::kSlowRequest, end - c.exchange_start_ns);
  }
}

void ConnTable::CountExchange(Conn& c, const ExchangeEvent& e) {
  c.ops += uint64_t(e.calls_in) + e.calls_out;
  c.errors += e.errors;
  c.bytes_in += e.bytes_in;
  c.bytes_out += e.bytes_out;
  c.last_ns = std::max(c.last_ns, e.end());
  TrackExchange(c, e);
}

bool ConnTable::CountExchangeNow(const ExchangeEvent& e) {
  if (e.conn == 0) return false;
  Conn* c = Find(e.conn);
  if (!c || !c->open_emitted) return false;
  CountExchange(*c, e);
  return true;
}

void ConnTable::OnExchange(format::SegmentWriter* w, const ExchangeEvent& e, uint32_t tid) {
  if (e.conn == 0) return;
  Conn* c = Find(e.conn);
  if (!c) {
    c = Adopt(e.conn, e.fd, e.time, tid);
    if (!c) return;  // gone: a close we saw already (kExStale), or one we never knew
  }
  CountExchange(*c, e);
  if (!c->open_emitted) EmitOpen(w, e.conn, *c);
}

bool ConnTable::CountDataOpNow(const SocketOpRecord& r) {
  if (r.conn == 0 || !IsDataOp(r.op)) return false;
  Conn* c = Find(r.conn);
  if (!c || !c->open_emitted) return false;
  Count(*c, r);
  return true;
}

void ConnTable::OnOp(format::SegmentWriter* w, const SocketOpRecord& r, uint32_t tid) {
  if (r.conn == 0) return;
  Conn* c = Find(r.conn);
  if (r.op == uint8_t(SockOp::kSocket)) {
    if (!c) {
      c = &conns_[r.conn];
      c->created_ns = r.start_ns;
      c->fd = r.fd;
      c->tid = tid;
      c->family = static_cast<uint8_t>(r.aux >> 8);
      c->type = static_cast<uint8_t>(r.aux & 0xff);
    }
  } else if (!c) {
    if (r.op == uint8_t(SockOp::kClose)) return;  // a connection we never knew, already gone
    c = Adopt(r.conn, r.fd, r.start_ns, tid);
    if (!c) return;
  }
  Count(*c, r);

  const uint8_t op = r.op;
  if (IsDataOp(op)) {
    // The reader infers requests from a connection's socket.op events and
    // needs its role from socket.open.
    if (!c->open_emitted) EmitOpen(w, r.conn, *c);
    return;
  }
  switch (SockOp(op)) {
    case SockOp::kClose:
      if (r.result < 0 && r.result != -EINTR) return;  // EBADF and the like: nothing was closed
      if (--c->fd_refs <= 0) Close(w, r.conn, *c, r, tid);
      break;
    case SockOp::kDup:
      if (r.result >= 0) c->fd_refs++;
      break;
    default: break;
  }
}

void ConnTable::NewSegment(format::SegmentWriter* w) {
  // A report on the new segment alone must still know every live connection
  // (a listener may never speak again), so describe them again now.
  for (auto& [id, c] : conns_)
    if (c.open_emitted) EmitOpen(w, id, c);
}

size_t ConnTable::EvictStale(uint64_t idle_before_ns) {
  if (!probe_.alive) return 0;
  size_t n = 0;
  for (auto it = conns_.begin(); it != conns_.end();) {
    if (it->second.last_ns < idle_before_ns && !probe_.alive(it->second.fd, it->first)) {
      Forget(it->first);
      it = conns_.erase(it);
      n++;
    } else {
      ++it;
    }
  }
  return n;
}

}  // namespace flightrec
