// Request prefixes, the out-of-line side (see socket_prefix.h): mapping the buffers.
#include "preload/sockets/socket_prefix.h"

#include <sys/mman.h>

namespace flightrec::sockpfx {

FR_HOT_DATA uint8_t* g_bufs = nullptr;
FR_HOT_DATA size_t g_stride = 0;

bool Init(size_t fds, size_t cap) {
  if (g_bufs) return true;
  if (!fds || !cap || cap > 0xfff0) return false;
  const size_t stride = (kHeader + cap + 63) & ~size_t{63};
  void* mem = mmap(nullptr, fds * stride, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mem == MAP_FAILED) return false;
  g_stride = stride;
  __atomic_store_n(&g_bufs, static_cast<uint8_t*>(mem), __ATOMIC_RELEASE);
  return true;
}

}  // namespace flightrec::sockpfx
