// Socket flush-side unit tests (prefix "socket"): records in, events out
// through a real SegmentWriter read back with the C++ reader — connection
// identity, per-connection totals, cross-thread ordering,
// adoption of unknown connections — and the accept-queue source against a
// real listening socket.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "format/segment_reader.h"
#include "format/segment_writer.h"
#include "preload/sockets/decode/socket_acceptq.h"
#include "preload/sockets/decode/socket_events.h"
#include "preload/sockets/socket_fd_table.h"
#include "preload/sockets/decode/socket_flush.h"
#include "tests/unit/format_test_util.h"

using namespace flightrec;
using format::Event;
using format::Segment;
using sockfd::SockFamily;
using sockfd::SockRole;
using sockfd::SockType;

namespace {

// Test times are in units of the socket time grain, so rounding leaves them exact.
constexpr uint64_t G = kSocketTimeGrainNs;

SocketOpRecord Op(SockOp op, int fd, uint64_t conn, uint64_t start, uint64_t dur, int64_t result, uint16_t aux = 0,
                  uint8_t flags = 0) {
  SocketOpRecord r{};
  r.start_ns = start * G;
  r.duration_ns = dur * G;
  r.result = result;
  r.conn = conn;
  r.fd = fd;
  r.op = uint8_t(op);
  r.flags = flags;
  r.aux = aux;
  return r;
}

SocketAddrRecord Addr(uint64_t time, uint64_t conn, uint64_t parent, int fd, SockRole role, AddrWhich which,
                      const char* ip, uint16_t port, bool complete) {
  SocketAddrRecord r{};
  r.time_ns = time * G;
  r.conn = conn;
  r.parent_conn = parent;
  r.fd = fd;
  r.role = uint8_t(role);
  r.family = uint8_t(SockFamily::kInet);
  r.type = uint8_t(SockType::kStream);
  r.which = uint8_t(which);
  r.complete = complete;
  if (ip) {
    sockaddr_in in{};
    in.sin_family = AF_INET;
    in.sin_port = htons(port);
    inet_pton(AF_INET, ip, &in.sin_addr);
    memcpy(r.addr, &in, sizeof(in));
    r.addr_len = sizeof(in);
  }
  return r;
}

// A writer on a temp file with the socket event types; Read() seals and decodes it.
struct Harness {
  format_test::TempDir dir;
  format::SegmentWriter w;
  Harness() {
    DefineSocketEventTypesOn(&w);
    std::string err;
    REQUIRE_MESSAGE(w.Open(dir.File("s.active"), format_test::Header(1), &err), err);
  }
  Segment Read() {
    std::string err;
    REQUIRE_MESSAGE(w.Seal({}, &err), err);
    Segment s = format::ReadSegmentFile(dir.File("s.active"));
    REQUIRE(s.state == format::SegmentState::kSealed);
    CHECK(!s.FooterValue("writer.rejected").has_value());
    return s;
  }
};

// Field value by name; strings resolved.
struct Ev {
  const Segment& s;
  const Event& e;
  uint64_t U(const char* name) const {
    const auto& t = s.schema.at(e.type_id);
    const int i = Segment::FieldIndex(t, name);
    REQUIRE(i >= 0);
    return e.values[i].u;
  }
  int64_t S(const char* name) const { return static_cast<int64_t>(U(name)); }
  std::string Str(const char* name) const {
    const std::string* p = s.String(static_cast<uint32_t>(U(name)));
    return p ? *p : "";
  }
};

std::vector<Ev> All(const Segment& s, const char* type) {
  std::vector<Ev> out;
  for (const Event* e : s.EventsOf(type)) out.push_back(Ev{s, *e});
  return out;
}

ConnProbe NoProbe() { return ConnProbe{}; }

}  // namespace

TEST_CASE("socket flush: a served connection gives open, its ops, and a close with exact totals") {
  Harness h;
  SocketFlushSide side(NoProbe());
  const int L = 3, C = 9;
  const uint64_t lc = 1, cc = 2;
  // listener: socket, bind, listen
  side.OnOp(&h.w, Op(SockOp::kSocket, L, lc, 100, 5, L, uint16_t((1 << 8) | 1)), 10);
  side.OnAddr(Addr(200, lc, 0, L, SockRole::kListener, AddrWhich::kLocal, "127.0.0.1", 8080, true), 10);
  side.OnOp(&h.w, Op(SockOp::kListen, L, lc, 195, 5, 0), 10);
  // accept: the new connection's identity first, then the listener's op
  side.OnAddr(Addr(1000, cc, lc, C, SockRole::kServer, AddrWhich::kPeer, "127.0.0.1", 5555, false), 11);
  side.OnAddr(Addr(1000, cc, lc, C, SockRole::kServer, AddrWhich::kLocal, "127.0.0.1", 8080, true), 11);
  side.OnOp(&h.w, Op(SockOp::kAccept, L, lc, 900, 100, C), 11);
  // two exchanges: 10+5 in, 30 out; then 7 in, 8+9 out; a peek that moves nothing; EOF; close
  side.OnOp(&h.w, Op(SockOp::kRecv, C, cc, 1100, 10, 10), 11);
  side.OnOp(&h.w, Op(SockOp::kRecv, C, cc, 1120, 10, -EAGAIN), 11);
  side.OnOp(&h.w, Op(SockOp::kRead, C, cc, 1140, 10, 5), 11);
  side.OnOp(&h.w, Op(SockOp::kSend, C, cc, 1200, 50, 30), 11);
  side.OnOp(&h.w, Op(SockOp::kRecvmsg, C, cc, 1300, 10, 7), 11);
  side.OnOp(&h.w, Op(SockOp::kRecv, C, cc, 1315, 1, 99, 0, kOpFlagPeek), 11);
  side.OnOp(&h.w, Op(SockOp::kWritev, C, cc, 1400, 10, 8), 11);
  side.OnOp(&h.w, Op(SockOp::kWrite, C, cc, 1420, 10, 9), 11);
  side.OnOp(&h.w, Op(SockOp::kRecv, C, cc, 1500, 10, 0), 11);
  side.OnOp(&h.w, Op(SockOp::kClose, C, cc, 1600, 10, 0), 11);
  side.Process(&h.w, 1500 * G, false);  // the watermark holds back what completed later (EOF, close)
  CHECK(side.queued() == 2);
  side.Process(&h.w, 10000 * G, false);
  CHECK(side.queued() == 0);
  Segment s = h.Read();

  auto ops = All(s, "socket.op");
  CHECK(ops.size() == 13);
  CHECK(ops[3].Str("op") == "recv");
  CHECK(ops[4].S("bytes") == -EAGAIN);
  CHECK(ops[8].Str("op") == "recv.peek");

  auto opens = All(s, "socket.open");
  REQUIRE(opens.size() == 2);
  std::map<uint64_t, Ev*> by_conn;
  for (auto& o : opens) by_conn[o.U("conn")] = &o;
  REQUIRE(by_conn.count(lc));
  REQUIRE(by_conn.count(cc));
  CHECK(by_conn[lc]->Str("role") == "listener");
  CHECK(by_conn[lc]->Str("local") == "127.0.0.1:8080");
  CHECK(by_conn[lc]->U("time") == 100 * G);  // when the socket was created
  CHECK(by_conn[cc]->Str("role") == "server");
  CHECK(by_conn[cc]->Str("peer") == "127.0.0.1:5555");
  CHECK(by_conn[cc]->Str("local") == "127.0.0.1:8080");
  CHECK(by_conn[cc]->Str("family") == "ipv4");
  CHECK(by_conn[cc]->Str("sock_type") == "stream");
  CHECK(by_conn[cc]->U("listener") == lc);
  CHECK(by_conn[cc]->U("fd") == uint64_t(C));

  CHECK(s.EventsOf("request").empty());  // flightrec-dump derives requests from the ops

  auto closes = All(s, "socket.close");
  REQUIRE(closes.size() == 1);
  CHECK(closes[0].U("conn") == cc);
  CHECK(closes[0].U("bytes_in") == 22);
  CHECK(closes[0].U("bytes_out") == 47);
  CHECK(closes[0].U("ops") == 10);
  CHECK(closes[0].U("errors") == 0);  // EAGAIN is not an error
  CHECK(side.conns().size() == 1);    // the listener lives on
}

TEST_CASE("socket flush: records drained thread by thread are processed in completion order") {
  Harness h;
  SocketFlushSide side(NoProbe());
  const uint64_t cc = 7;
  side.OnAddr(Addr(10, cc, 1, 5, SockRole::kServer, AddrWhich::kLocal, "127.0.0.1", 80, true), 1);
  // Thread 2 (the writer, which also closes) is drained before thread 1 (the
  // reader): arrival order is send, send, close, recv, recv; completion order
  // is recv, send, recv, send, close. Taken in arrival order, the close would
  // end the connection before the receives were counted.
  side.OnOp(&h.w, Op(SockOp::kSend, 5, cc, 200, 10, 40), 2);
  side.OnOp(&h.w, Op(SockOp::kSend, 5, cc, 400, 10, 41), 2);
  side.OnOp(&h.w, Op(SockOp::kClose, 5, cc, 500, 1, 0), 2);
  side.OnOp(&h.w, Op(SockOp::kRecv, 5, cc, 100, 10, 4), 1);
  side.OnOp(&h.w, Op(SockOp::kRecv, 5, cc, 300, 10, 5), 1);
  side.Process(&h.w, 1000 * G, false);
  Segment s = h.Read();
  auto closes = All(s, "socket.close");
  REQUIRE(closes.size() == 1);
  CHECK(closes[0].U("bytes_in") == 9);
  CHECK(closes[0].U("bytes_out") == 81);
  CHECK(closes[0].U("ops") == 5);
  CHECK(closes[0].U("tid") == 2);
  CHECK(side.conns().size() == 0);
}

TEST_CASE("socket flush: data calls on a described connection skip the queue; totals stay exact") {
  Harness h;
  SocketFlushSide side(NoProbe());
  // Two connections whose ids share a slot of the connection table's cache
  // of recent lookups (64 slots): b is looked up after a is gone.
  const uint64_t a = 5, b = 5 + 64;
  side.OnAddr(Addr(10, a, 1, 7, SockRole::kServer, AddrWhich::kLocal, "127.0.0.1", 80, true), 1);
  side.OnOp(&h.w, Op(SockOp::kRecv, 7, a, 100, 10, 4), 1);
  CHECK(side.queued() == 2);  // a's socket.open is not written yet: in order
  side.Process(&h.w, 1000 * G, false);
  CHECK(side.queued() == 0);
  side.OnOp(&h.w, Op(SockOp::kSend, 7, a, 1100, 10, 40), 1);
  side.OnOp(&h.w, Op(SockOp::kRecv, 7, a, 1200, 10, -ECONNRESET), 1);
  CHECK(side.queued() == 0);  // counted on arrival
  side.OnOp(&h.w, Op(SockOp::kClose, 7, a, 1300, 1, 0), 1);
  CHECK(side.queued() == 1);  // a close waits its turn
  side.Process(&h.w, 2000 * G, false);
  // A late call of a's (another thread's ring, drained after a's close) finds
  // no connection: it is queued, not counted into a's erased entry.
  side.OnOp(&h.w, Op(SockOp::kRecv, 7, a, 1250, 10, 100), 2);
  CHECK(side.queued() == 1);
  // b takes a's fd and cache slot; another late call of a's must not count for b.
  side.OnAddr(Addr(2100, b, 1, 7, SockRole::kServer, AddrWhich::kLocal, "127.0.0.1", 80, true), 1);
  side.OnOp(&h.w, Op(SockOp::kRecv, 7, b, 2200, 10, 6), 1);
  side.Process(&h.w, 3000 * G, false);
  side.OnOp(&h.w, Op(SockOp::kRecv, 7, a, 1250, 10, 100), 2);
  side.OnOp(&h.w, Op(SockOp::kWrite, 7, b, 3100, 10, 9), 1);
  side.OnOp(&h.w, Op(SockOp::kClose, 7, b, 3200, 1, 0), 1);
  side.Process(&h.w, 4000 * G, true);
  Segment s = h.Read();
  auto closes = All(s, "socket.close");
  REQUIRE(closes.size() == 2);
  CHECK(closes[0].U("conn") == a);
  CHECK(closes[0].U("bytes_in") == 4);
  CHECK(closes[0].U("bytes_out") == 40);
  CHECK(closes[0].U("ops") == 4);
  CHECK(closes[0].U("errors") == 1);
  CHECK(closes[1].U("conn") == b);
  CHECK(closes[1].U("bytes_in") == 6);
  CHECK(closes[1].U("bytes_out") == 9);
  CHECK(closes[1].U("ops") == 3);
  CHECK(side.conns().size() == 0);
}

TEST_CASE("socket flush: a burst of queued exchanges is written whole, then its queue memory goes back") {
  Harness h;
  SocketFlushSide side(NoProbe());
  // A new connection's first exchanges wait for its socket.open (in
  // completion order): a client that opens many connections at once queues
  // thousands of them, as redis-benchmark's 20 connections did.
  const uint64_t c = 9;
  side.OnAddr(Addr(10, c, 1, 7, SockRole::kServer, AddrWhich::kLocal, "127.0.0.1", 80, true), 1);
  constexpr int kBurst = 5000;
  for (int i = 0; i < kBurst; i++) {
    ExchangeEvent e;
    e.conn = c;
    e.fd = 7;
    e.tid = 1;
    e.time = (100 + 10 * uint64_t(i)) * G;
    e.end_ns = e.time + 5 * G;
    e.bytes_in = 3;
    e.bytes_out = 4;
    e.calls_in = e.calls_out = 1;
    side.OnExchange(&h.w, e, 1);
  }
  CHECK(side.queued() == kBurst + 1);
  CHECK(side.queue_capacity_bytes() > (256u << 10));
  side.Process(&h.w, 1000000 * G, false);
  CHECK(side.queued() == 0);
  CHECK(side.queue_capacity_bytes() <= (64u << 10));
  // A small queue keeps its capacity for the next burst.
  side.OnOp(&h.w, Op(SockOp::kClose, 7, c, 1000010, 1, 0), 1);
  side.OnAddr(Addr(1000020, c + 1, 1, 8, SockRole::kServer, AddrWhich::kLocal, "127.0.0.1", 80, true), 1);
  const size_t small = side.queue_capacity_bytes();
  CHECK(small > 0);
  side.Process(&h.w, 2000000 * G, true);
  CHECK(side.queue_capacity_bytes() == small);
  Segment s = h.Read();
  CHECK(All(s, "socket.exchange").size() == size_t(kBurst));
  auto closes = All(s, "socket.close");
  REQUIRE(closes.size() >= 1);
  CHECK(closes[0].U("conn") == c);
  CHECK(closes[0].U("bytes_in") == 3u * kBurst);
  CHECK(closes[0].U("bytes_out") == 4u * kBurst);
}

TEST_CASE("socket flush: client view, dup'd fds, failed connect, new segment") {
  Harness h;
  SocketFlushSide side(NoProbe());
  // A failed connect: open (client, peer known) and an error.
  side.OnOp(&h.w, Op(SockOp::kSocket, 4, 20, 10, 1, 4, uint16_t((1 << 8) | 1)), 1);
  side.OnAddr(Addr(30, 20, 0, 4, SockRole::kClient, AddrWhich::kPeer, "127.0.0.1", 1, false), 1);
  side.OnAddr(Addr(30, 20, 0, 4, SockRole::kClient, AddrWhich::kLocal, nullptr, 0, true), 1);
  side.OnOp(&h.w, Op(SockOp::kConnect, 4, 20, 20, 10, -ECONNREFUSED), 1);
  side.OnOp(&h.w, Op(SockOp::kClose, 4, 20, 40, 1, 0), 1);
  // A client that dup()s its socket: closing one fd does not close the connection.
  side.OnOp(&h.w, Op(SockOp::kSocket, 5, 21, 100, 1, 5, uint16_t((1 << 8) | 1)), 1);
  side.OnAddr(Addr(110, 21, 0, 5, SockRole::kClient, AddrWhich::kPeer, "127.0.0.1", 6379, false), 1);
  side.OnAddr(Addr(110, 21, 0, 5, SockRole::kClient, AddrWhich::kLocal, "127.0.0.1", 40000, true), 1);
  side.OnOp(&h.w, Op(SockOp::kConnect, 5, 21, 105, 5, 0), 1);
  side.OnOp(&h.w, Op(SockOp::kDup, 6, 21, 115, 1, 6, 5), 1);
  side.OnOp(&h.w, Op(SockOp::kClose, 5, 21, 120, 1, 0), 1);
  side.OnOp(&h.w, Op(SockOp::kSend, 6, 21, 200, 10, 14), 1);
  side.OnOp(&h.w, Op(SockOp::kRecv, 6, 21, 210, 90, 5), 1);
  side.OnOp(&h.w, Op(SockOp::kSend, 6, 21, 400, 10, 14), 1);
  side.OnOp(&h.w, Op(SockOp::kRecv, 6, 21, 410, 40, 5), 1);
  side.Process(&h.w, 1000 * G, false);
  CHECK(side.conns().size() == 1);  // the failed one closed; the dup'd one lives
  side.conns().NewSegment(&h.w);    // describes the live connection again
  side.Process(&h.w, 1000 * G, /*final=*/true);
  Segment s = h.Read();

  auto opens = All(s, "socket.open");
  REQUIRE(opens.size() == 3);
  CHECK(opens[0].U("conn") == 20);
  CHECK(opens[0].Str("role") == "client");
  CHECK(opens[0].Str("peer") == "127.0.0.1:1");
  CHECK(opens[0].Str("local") == "");
  CHECK(opens[1].U("conn") == 21);
  CHECK(opens[2].U("conn") == 21);
  CHECK(opens[2].Str("local") == "127.0.0.1:40000");
  auto closes = All(s, "socket.close");
  REQUIRE(closes.size() == 1);
  CHECK(closes[0].U("conn") == 20);
  CHECK(closes[0].U("errors") == 1);
  CHECK(All(s, "socket.op").size() == 11);
}

TEST_CASE("socket flush: a connection first seen mid-life is adopted through the probe") {
  Harness h;
  ConnProbe probe;
  probe.adopt = [](int fd, uint64_t conn, uint8_t* role, uint8_t* family, uint8_t* type, char* local, char* peer,
                   size_t cap) {
    if (fd != 8 || conn != 33) return false;
    *role = uint8_t(SockRole::kServer);
    *family = uint8_t(SockFamily::kInet6);
    *type = uint8_t(SockType::kStream);
    snprintf(local, cap, "[::1]:80");
    snprintf(peer, cap, "[::1]:9999");
    return true;
  };
  SocketFlushSide side(probe);
  side.OnOp(&h.w, Op(SockOp::kRecv, 8, 33, 100, 1, 3), 4);
  side.OnOp(&h.w, Op(SockOp::kSend, 8, 33, 200, 1, 4), 4);
  side.OnOp(&h.w, Op(SockOp::kClose, 8, 33, 300, 1, 0), 4);
  side.OnOp(&h.w, Op(SockOp::kRecv, 9, 34, 100, 1, 3), 4);  // the probe does not know it: no state
  side.Process(&h.w, 1000 * G, false);
  Segment s = h.Read();
  auto opens = All(s, "socket.open");
  REQUIRE(opens.size() == 1);
  CHECK(opens[0].Str("role") == "server");
  CHECK(opens[0].Str("family") == "ipv6");
  CHECK(opens[0].Str("peer") == "[::1]:9999");
  auto closes = All(s, "socket.close");
  REQUIRE(closes.size() == 1);
  CHECK(closes[0].U("bytes_in") == 3);
  CHECK(closes[0].U("bytes_out") == 4);
  CHECK(All(s, "socket.op").size() == 4);
  CHECK(side.conns().size() == 0);
}

TEST_CASE("socket acceptq: netlink reports a real listener's queue and backlog") {
  const int l = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(l >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(l, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  REQUIRE(listen(l, 7) == 0);
  socklen_t len = sizeof(a);
  getsockname(l, reinterpret_cast<sockaddr*>(&a), &len);
  // Three connections complete the handshake and wait in the accept queue.
  std::vector<int> clients;
  for (int i = 0; i < 3; ++i) {
    const int c = socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(connect(c, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
    clients.push_back(c);
  }
  struct stat st;
  REQUIRE(fstat(l, &st) == 0);
  ListenQueueProbe probe;
  format::MiVector<ListenQueue> queues;
  std::string err;
  REQUIRE_MESSAGE(probe.Dump(&queues, &err), err);
  const auto it =
      std::find_if(queues.begin(), queues.end(), [&](const ListenQueue& q) { return q.inode == st.st_ino; });
  REQUIRE(it != queues.end());
  CHECK(it->queued == 3);
  CHECK(it->backlog == 7);
  // A second dump on the same (kept) netlink socket works as well.
  queues.clear();
  REQUIRE_MESSAGE(probe.Dump(&queues, &err), err);
  CHECK(std::any_of(queues.begin(), queues.end(), [&](const ListenQueue& q) { return q.inode == st.st_ino; }));
  for (int c : clients) close(c);
  close(l);
}

TEST_CASE("socket flush: op start and end are rounded down to the 128 ns grain") {
  Harness h;
  SocketFlushSide side(NoProbe());
  SocketOpRecord r = Op(SockOp::kSend, 3, 0, 0, 0, 10);
  r.start_ns = 1000;    // -> 896
  r.duration_ns = 100;  // ends at 1100 -> 1024: duration 128
  side.OnOp(&h.w, r, 1);
  Segment s = h.Read();
  auto ops = All(s, "socket.op");
  REQUIRE(ops.size() == 1);
  CHECK(ops[0].U("time") == 896);
  CHECK(ops[0].U("duration_ns") == 128);
  CHECK(ops[0].S("bytes") == 10);
}

TEST_CASE("socket flush: stale fd-table entries (fd no longer a socket) are repaired") {
  REQUIRE(sockfd::Init(4096));
  int p[2];
  REQUIRE(pipe(p) == 0);
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(s >= 0);
  const uint64_t stale =
      sockfd::MakeEntry(sockfd::NewConnId(), SockRole::kClient, SockFamily::kInet, SockType::kStream);
  const uint64_t live = sockfd::MakeEntry(sockfd::NewConnId(), SockRole::kClient, SockFamily::kInet, SockType::kStream);
  sockfd::Set(p[0], stale);  // as if a socket on this number had been closed behind our back
  sockfd::Set(s, live);
  CHECK(HealStaleSocketEntries() >= 1);
  CHECK(sockfd::Lookup(p[0]) == 0);
  CHECK(sockfd::Lookup(s) == live);
  sockfd::Clear(s);
  close(s);
  close(p[0]);
  close(p[1]);
}

// SocketFlushSide::Classify remembers recent questions byte for byte: a
// repeated question must get exactly what classifying it afresh gives, a
// capped name must still be counted each time, and new classifiers must not
// see the old answers.
TEST_CASE("socket flush: remembered questions answer exactly as classifying them again") {
  SocketFlushSide side{ConnProbe{}};
  side.ConfigureEndpoints(kClassifyAll, false, 3, nullptr);  // none, other, and one name
  auto classify = [&side](const char* q, std::string* name) {
    ExchangeEvent e;
    EndpointInfo info;
    side.Classify(reinterpret_cast<const uint8_t*>(q), strlen(q), &e, &info);
    *name = std::string(info.Name());
    return e.endpoint;
  };
  const char* get = "*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n";
  const char* set = "*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$1\r\nx\r\n";
  std::string name;
  const uint32_t get_id = classify(get, &name);
  CHECK(name == "GET");
  CHECK(get_id >= 2);
  for (int i = 0; i < 3; i++) {  // repeats: the same index and name
    CHECK(classify(get, &name) == get_id);
    CHECK(name == "GET");
  }
  // SET is past the cap: "other", counted at every exchange, remembered or not.
  for (int i = 1; i <= 3; i++) {
    CHECK(classify(set, &name) == 1u);
    CHECK(name == "SET");
    CHECK(side.names().capped() == uint64_t(i));
  }
  // A question that differs in its last byte is classified on its own.
  CHECK(classify("*2\r\n$3\r\nGET\r\n$3\r\nkez\r\n", &name) == get_id);
  // New classifiers: RESP off, so the same bytes are no longer GET.
  side.ConfigureEndpoints(kClassifyHttp, false, 10, nullptr);
  CHECK(classify(get, &name) == 1u);
  CHECK(name == "other");
  // A question with trace context is never remembered, and keeps it every time.
  side.ConfigureEndpoints(kClassifyAll, true, 10, nullptr);
  const char* traced =
      "GET /a HTTP/1.1\r\ntraceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\n\r\n";
  for (int i = 0; i < 2; i++) {
    ExchangeEvent e;
    EndpointInfo info;
    side.Classify(reinterpret_cast<const uint8_t*>(traced), strlen(traced), &e, &info);
    CHECK(info.Name() == "GET /a");
    CHECK(info.has_trace);
    CHECK(info.parent_span == 0xb7ad6b7169203331ull);
  }
}
