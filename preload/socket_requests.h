// Request inference: turns the data operations of one connection, in
// completion order, into request/response exchanges. Runs on the flush
// thread (one RequestInference per live connection, owned by the connection
// table in socket_conns.cc); nothing here is on the hot path.
//
// Heuristic (docs/REQUESTS.md explains it and its limits):
//  * Server side (accepted connections): a request starts when a receive
//    returns data after the previous response (or after accept) — at the end
//    of that receive, since a blocking receive's wait is idle time — and ends
//    at the end of the last send before the next receive, EOF or close.
//  * Client side (connected sockets), the mirror: a request starts at the
//    start of the first send after the previous response and ends at the end
//    of the last receive before the next send, EOF or close.
//  * Only exchanges with bytes in both directions are requests. Data in the
//    "wrong" direction before any request (a server greeting, a client that
//    only listens) and a request that never got an answer are not reported.
//  * tid is the thread that sent the response (server) or the request
//    (client): where the work for it most likely ran.
#pragma once
#include <cstdint>

namespace flightrec {

struct InferredRequest {
  uint64_t start_ns = 0, end_ns = 0;
  uint64_t bytes_in = 0, bytes_out = 0;
  uint32_t tid = 0;
};

class RequestInference {
 public:
  // server: true for accepted connections, false for connected ones.
  explicit RequestInference(bool server = true) : server_(server) {}

  // One data operation that moved `bytes` > 0 bytes (zero and failures are not
  // data). Returns true when it closed the previous request, written to *out.
  bool OnData(bool is_send, uint64_t bytes, uint64_t start_ns, uint64_t end_ns, uint32_t tid,
              InferredRequest* out);

  // EOF, close or the end of the trace: returns true with the pending request
  // if it is complete (has its response).
  bool Finish(InferredRequest* out);

  // True while a request is open (some bytes of it seen).
  bool InProgress() const { return phase_ != Phase::kIdle; }
  // True once the answer has started: Finish() would write a request.
  bool Answering() const { return phase_ == Phase::kAnswer; }

 private:
  // kAsk: the asking side is talking (server: receiving; client: sending).
  // kAnswer: the answer is flowing (server: sending; client: receiving).
  enum class Phase : uint8_t { kIdle, kAsk, kAnswer };
  bool server_;
  Phase phase_ = Phase::kIdle;
  InferredRequest cur_;
};

}  // namespace flightrec
