// Socket event types (see socket_events.h for the field lists).
#include "preload/sockets/decode/socket_events.h"

#include "preload/flush/flush_registry.h"

namespace flightrec {

SocketEventTypes g_socket_types;

std::vector<format::EventTypeSpec> SocketEventSpecs() {
  using format::FieldType;
  const FieldType T = FieldType::kTime, U = FieldType::kUInt, S = FieldType::kSInt, STR = FieldType::kString;
  return {
      // Packed columns (SPEC.md 5.4): its times and durations are on a 128 ns
      // grid (socket_flush.h) and byte planes suit zstd.
      // conn follows fd (field 2): a connection keeps its fd, so the column of
      // their differences is nearly constant where the ids themselves are not.
      {"socket.op",
       {{"time", T, "ns"},
        {"tid", U, ""},
        {"fd", U, ""},
        {"conn", U, "", 2},
        {"op", STR, ""},
        {"bytes", S, "bytes"},
        {"duration_ns", U, "ns"}},
       true},
      {"socket.open",
       {{"time", T, "ns"},
        {"tid", U, ""},
        {"fd", U, ""},
        {"conn", U, ""},
        {"role", STR, ""},
        {"family", STR, ""},
        {"sock_type", STR, ""},
        {"local", STR, ""},
        {"peer", STR, ""},
        {"listener", U, ""}}},
      {"socket.close",
       {{"time", T, "ns"},
        {"tid", U, ""},
        {"fd", U, ""},
        {"conn", U, ""},
        {"bytes_in", U, "bytes"},
        {"bytes_out", U, "bytes"},
        {"ops", U, "count"},
        {"errors", U, "count"}}},
      {"socket.acceptq",
       {{"time", T, "ns"},
        {"conn", U, ""},
        {"fd", U, ""},
        {"local", STR, ""},
        {"queued", U, "count"},
        {"backlog", U, "count"}}},
      {"socket.gap",
       {{"time", T, "ns"},
        {"tid", U, ""},
        {"conn", U, ""},
        {"bytes_in", U, "bytes"},
        {"bytes_out", U, "bytes"},
        {"ops", U, "count"},
        {"errors", U, "count"}}},
      // Packed like socket.op; its times are on a 512 ns grid
      // (kExchangeTimeGrainNs). `end` is a time (delta-coded) rather than a
      // duration: a server answers the requests of one loop in a row, so
      // successive ends are close where the time from question to answer is
      // not (redis-benchmark: 2.32 -> 2.05 bytes per exchange at 128 ns).
      {"socket.exchange",
       {{"time", T, "ns"},
        {"tid", U, ""},
        {"fd", U, ""},
        {"conn", U, "", 2},
        {"flags", U, ""},
        {"bytes_in", U, "bytes"},
        {"bytes_out", U, "bytes"},
        {"calls_in", U, "count"},
        {"calls_out", U, "count"},
        {"errors", U, "count"},
        {"would_block", U, "count"},
        {"ask_ns", U, "ns"},
        {"answer_ns", U, "ns"},
        {"end", T, "ns"},
        {"endpoint", STR, ""},
        {"trace_hi", U, ""},
        {"trace_lo", U, ""},
        {"parent_span", U, ""},
        {"trace_flags", U, ""},
        {"request_id", STR, ""}},
       true},
  };
}

namespace {
template <typename DefineFn>
void DefineAll(DefineFn define) {
  const auto specs = SocketEventSpecs();
  g_socket_types.op = define(specs[0]);
  g_socket_types.open = define(specs[1]);
  g_socket_types.close = define(specs[2]);
  g_socket_types.acceptq = define(specs[3]);
  g_socket_types.gap = define(specs[4]);
  g_socket_types.exchange = define(specs[5]);
}
}  // namespace

void DefineSocketEventTypes() {
  DefineAll([](const format::EventTypeSpec& s) { return DefineEventType(s); });
}

void DefineSocketEventTypesOn(format::SegmentWriter* writer) {
  DefineAll([writer](const format::EventTypeSpec& s) { return writer->DefineEventType(s); });
}

}  // namespace flightrec
