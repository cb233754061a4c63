// Socket event types: the schema of everything the sockets feature writes.
// Names and fields are what scripts/flightrec_lib/commands/cmd_sockets.py and
// cmd_requests.py read (and docs/REQUESTS.md describes):
//
//  socket.op      time, tid, fd, conn, op STR, bytes S, duration_ns
//                   one per hooked call; bytes = bytes moved (data ops) or the
//                   call's result, -errno on failure (EAGAIN is -11); op is
//                   the call's name, "<op>.peek" for MSG_PEEK receives (their
//                   bytes were not consumed and are not counted)
//  socket.open    time, tid, fd, conn, role STR, family STR, sock_type STR,
//                   local STR, peer STR, listener
//                   role: server (accepted), client (connected), listener,
//                   other; time = when the socket was created; re-emitted at
//                   the start of every segment for connections still open
//  socket.close   time, tid, fd, conn, bytes_in, bytes_out, ops, errors
//                   when the connection's last fd is closed
//  socket.acceptq time, conn, fd, local STR, queued, backlog
//                   a listener's accept queue, every FLIGHTREC_ACCEPTQ_MS
//  socket.gap     time (of the last call), tid, conn, bytes_in, bytes_out, ops, errors
//                   data calls whose socket.op records were dropped (full
//                   ring), summed per connection (socket_gaps.h); already
//                   in socket.close's totals
//  socket.exchange time, tid, fd, conn, flags, bytes_in, bytes_out, calls_in,
//                   calls_out, errors, would_block, ask_ns, answer_ns, end
//                   one request/response exchange of a descriptor, or a part
//                   of one (socket_exchange.h has the rules and the flags):
//                   time = begin of its ask run (its answer run when it has
//                   none), ask_ns = the ask run's span, answer_ns = the
//                   answer run's span (0 for an absent run), end = the end
//                   of the last data call (the answer's first bytes at
//                   end - answer_ns). The ask run is a server's receives, a
//                   client's sends.
//                 + endpoint STR, trace_hi, trace_lo, parent_span, trace_flags,
//                   request_id STR (issue 41): the question's name
//                   (endpoint_classify.h; "" when none: endpoints off, a
//                   continuation part), and with FLIGHTREC_TRACE_CONTEXT=1 its
//                   W3C traceparent (trace id = trace_hi:trace_lo, both 0
//                   when absent) and x-request-id.
#pragma once
#include <cstdint>
#include <vector>

#include "format/segment_writer.h"

namespace flightrec {

struct SocketEventTypes {
  uint32_t op = 0, open = 0, close = 0, acceptq = 0, gap = 0, exchange = 0;
};

// Ids returned by DefineEventType; valid after DefineSocketEventTypes.
extern SocketEventTypes g_socket_types;

// The specs, in the order of SocketEventTypes' members.
std::vector<format::EventTypeSpec> SocketEventSpecs();

// Registers the types with the flush registry and sets g_socket_types (init only).
void DefineSocketEventTypes();

// Defines the types on a writer directly and sets g_socket_types (unit tests).
void DefineSocketEventTypesOn(format::SegmentWriter* writer);

}  // namespace flightrec
