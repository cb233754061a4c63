// Request prefixes (issue 41): the first bytes of each exchange's question,
// kept per descriptor so the flush thread can name the request (HTTP method
// and path, Redis command, PostgreSQL message kind: decode/endpoint_classify.h)
// without the hot path parsing anything.
//
// A server's question is what it receives, a client's what it sends. The
// bytes are copied into the descriptor's prefix buffer (an mmap'd array
// indexed like the fd table, one stride per descriptor) by the data call that
// moves them, while it holds the descriptor's exchange slot
// (socket_exchange.h): the first call of the question copies up to the cap;
// a question split over several calls tops the buffer up until it is full
// (each byte is copied at most once, at most `cap` bytes per exchange, never
// more); once full, a bit in the slot (kSPfxDone) makes every further call of
// the exchange skip it with one test. The exchange's record carries the bytes
// (SocketExchangeRecord.prefix_len, the bytes following the record) and the
// buffer is then free for the next exchange. Only the flush thread's
// classification of them reaches the segment; the bytes never do.
//
// Hot-path rules: no allocation, no locks, no syscalls; the copy is bounded
// by the cap (FLIGHTREC_TRACE_CONTEXT=1 raises it so the headers that carry
// traceparent fit).
#pragma once
#include <sys/socket.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "preload/runtime/hot_data.h"

namespace flightrec::sockpfx {

// Where a data call's bytes are: one buffer, or an iovec array (readv,
// writev, sendmsg, recvmsg, the first message of sendmmsg/recvmmsg). Neither
// for sendfile and splice (the bytes never pass through the program).
struct Src {
  const void* buf = nullptr;
  const iovec* iov = nullptr;
  size_t iovcnt = 0;
  size_t limit = ~size_t{0};  // bytes of this source at most (mmsg: the first message's msg_len)
};

// One descriptor's buffer: the bytes held and the bytes themselves.
struct Buf {
  uint16_t len;
  uint16_t pad[3];
  uint8_t bytes[1];  // [cap]
};
inline constexpr size_t kHeader = 8;

// Caps: the bytes kept per exchange, without and with trace context.
inline constexpr size_t kCapDefault = 248;
inline constexpr size_t kCapTraceContext = 504;

// The buffers (null when endpoints are off: the switch the hooks test) and
// their stride (header + cap).
extern uint8_t* g_bufs;
extern size_t g_stride;

// Maps the buffers for `fds` descriptors with `cap` bytes each. Init only.
bool Init(size_t fds, size_t cap);
inline bool On() { return g_bufs != nullptr; }
inline Buf& Of(int fd) { return *reinterpret_cast<Buf*>(g_bufs + static_cast<size_t>(fd) * g_stride); }
inline size_t Cap() { return g_stride - kHeader; }

// Appends up to `moved` bytes of src to fd's buffer (starting afresh when
// `fresh`). Returns true when the buffer is full (no more calls needed).
inline bool Capture(int fd, const Src& src, size_t moved, bool fresh) {
  Buf& b = Of(fd);
  size_t len = fresh ? 0 : b.len;
  const size_t cap = Cap();
  if (len >= cap) return true;
  size_t want = cap - len;
  if (want > moved) want = moved;
  if (want > src.limit) want = src.limit;
  if (src.buf) {
    memcpy(b.bytes + len, src.buf, want);
    len += want;
  } else {
    for (size_t i = 0; i < src.iovcnt && want; ++i) {
      size_t n = src.iov[i].iov_len < want ? src.iov[i].iov_len : want;
      if (!src.iov[i].iov_base) break;
      memcpy(b.bytes + len, src.iov[i].iov_base, n);
      len += n;
      want -= n;
    }
  }
  b.len = static_cast<uint16_t>(len);
  return len >= cap;
}

inline Src FromBuf(const void* p) { return Src{p, nullptr, 0}; }
inline Src FromIov(const iovec* iov, int n) { return Src{nullptr, iov, n > 0 ? static_cast<size_t>(n) : 0}; }
inline Src FromMsg(const msghdr* m) { return m ? Src{nullptr, m->msg_iov, m->msg_iovlen} : Src{}; }
inline Src FromMmsg(const mmsghdr* v, unsigned n) {
  if (!v || !n) return Src{};
  Src s = FromMsg(&v[0].msg_hdr);
  s.limit = v[0].msg_len;  // read after the call: the kernel filled it
  return s;
}

}  // namespace flightrec::sockpfx
