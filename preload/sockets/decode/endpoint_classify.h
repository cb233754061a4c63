// Endpoint classification (issue 41): the name of a request from the first
// bytes of its question (socket_prefix.h), on the flush thread.
//
//   HTTP/1.x          "GET /users/:id": the method and the path; the query
//                     and fragment dropped; segments that look like ids
//                     (numbers, UUIDs, hex, base64-ish tokens, e-mail
//                     addresses, dates, anything with bytes outside printable
//                     ASCII) collapse to ":id"; at most kMaxSegments
//                     segments (then "/*"), at most kMaxName bytes.
//   Redis RESP        "GET", "HSET", "CONFIG GET": the command (and the
//                     subcommand of the container commands), never arguments;
//                     multibulk and inline.
//   PostgreSQL        "Query SELECT", "Parse INSERT", "Bind", "Startup": the
//                     frontend message's kind and, for a simple query or a
//                     Parse, the statement's first keyword, never its text.
//   else              "h2" (the HTTP/2 preface), "tls" (a TLS record),
//                     "other".
// With trace context on, an HTTP/1.x request's W3C traceparent header (trace
// id, parent span id, flags) and x-request-id are read from the same bytes;
// nothing else of the headers.
//
// Pure functions over untrusted bytes: bounded work (one pass over at most
// the prefix), no allocation, output in fixed-size fields. Any input (binary,
// truncated, NUL bytes, invalid UTF-8, a request line longer than the prefix)
// gives a name made of printable ASCII, or "other".
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace flightrec {

// Classifier bits (FLIGHTREC_ENDPOINTS lists them by name).
inline constexpr unsigned kClassifyHttp = 1;
inline constexpr unsigned kClassifyRedis = 2;
inline constexpr unsigned kClassifyPostgres = 4;
inline constexpr unsigned kClassifyAll = kClassifyHttp | kClassifyRedis | kClassifyPostgres;

struct EndpointInfo {
  static constexpr size_t kMaxName = 96;
  static constexpr size_t kMaxRequestId = 64;
  // Read through Name() and RequestId() only: the arrays are not cleared
  // (one classification per exchange on the flush thread; zeroing 160 bytes
  // was a tenth of it), only their lengths are.
  char name[kMaxName + 1];
  size_t name_len = 0;
  // traceparent (FLIGHTREC_TRACE_CONTEXT=1): has_trace when one was valid.
  bool has_trace = false;
  uint64_t trace_hi = 0, trace_lo = 0, parent_span = 0;
  uint8_t trace_flags = 0;
  char request_id[kMaxRequestId + 1];
  size_t request_id_len = 0;
  std::string_view Name() const { return {name, name_len}; }
  std::string_view RequestId() const { return {request_id, request_id_len}; }
};

inline constexpr size_t kMaxPathSegments = 8;

// Names the question in p[0..n) with the classifiers of `mask`.
void ClassifyQuestion(const uint8_t* p, size_t n, unsigned mask, bool trace_context, EndpointInfo* out);

// Parses FLIGHTREC_ENDPOINTS ("1"/"on", "0"/"off", or a comma list of
// http, redis, postgres): the mask, or false for a bad value.
bool ParseEndpointClassifiers(std::string_view text, unsigned* mask);

}  // namespace flightrec
