// Request inference state machine (see socket_requests.h).
#include "preload/socket_requests.h"

namespace flightrec {

bool RequestInference::OnData(bool is_send, uint64_t bytes, uint64_t start_ns, uint64_t end_ns,
                              uint32_t tid, InferredRequest* out) {
  if (bytes == 0) return false;
  // "Ask" is what the request side does: the server receives it, the client sends it.
  const bool ask = server_ ? !is_send : is_send;
  bool emitted = false;
  if (ask) {
    if (phase_ == Phase::kAnswer) {  // a new question: the previous exchange is complete
      *out = cur_;
      emitted = true;
      phase_ = Phase::kIdle;
    }
    if (phase_ == Phase::kIdle) {
      cur_ = InferredRequest{};
      // Server: the request exists once its first bytes have arrived.
      // Client: the latency the client sees starts when it begins sending.
      cur_.start_ns = server_ ? end_ns : start_ns;
      cur_.end_ns = end_ns;
      if (!server_) cur_.tid = tid;
      phase_ = Phase::kAsk;
    }
  } else {
    if (phase_ == Phase::kIdle) return false;  // unsolicited (greeting, push): no request
    phase_ = Phase::kAnswer;
    cur_.end_ns = end_ns;
    if (server_) cur_.tid = tid;
  }
  if (is_send) {
    cur_.bytes_out += bytes;
  } else {
    cur_.bytes_in += bytes;
  }
  if (cur_.end_ns < cur_.start_ns) cur_.end_ns = cur_.start_ns;
  return emitted;
}

bool RequestInference::Finish(InferredRequest* out) {
  const bool complete = phase_ == Phase::kAnswer;
  if (complete) *out = cur_;
  phase_ = Phase::kIdle;
  return complete;
}

}  // namespace flightrec
