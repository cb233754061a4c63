// Socket fd table: see socket_fd_table.h.
#include "preload/sockets/socket_fd_table.h"

#include <sys/mman.h>
#include <sys/resource.h>

#include "preload/runtime/hot_data.h"

namespace flightrec::sockfd {

FR_HOT_DATA std::atomic<uint64_t>* g_table = nullptr;
FR_HOT_DATA size_t g_table_size = 0;

namespace {
std::atomic<int> g_high_water{0};
std::atomic<uint64_t> g_beyond{0};
std::atomic<uint64_t> g_next_conn{1};
std::atomic<bool> g_init_started{false};

size_t TableSizeFromLimit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 65536;
  // The hard limit: a service may raise its soft limit later (redis does).
  rlim_t n = rl.rlim_max;
  if (n == RLIM_INFINITY || n > kMaxTableFds) n = kMaxTableFds;
  if (n < rl.rlim_cur && rl.rlim_cur != RLIM_INFINITY) n = rl.rlim_cur;
  if (n > kMaxTableFds) n = kMaxTableFds;
  if (n < 1024) n = 1024;
  return static_cast<size_t>(n);
}
}  // namespace

bool Init(size_t max_fds) {
  if (g_init_started.exchange(true)) return g_table_size != 0;
  const size_t n = max_fds ? max_fds : TableSizeFromLimit();
  void* mem =
      mmap(nullptr, n * sizeof(uint64_t), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mem == MAP_FAILED) return false;
  g_table = static_cast<std::atomic<uint64_t>*>(mem);  // zero pages == all entries 0
  // Publish the size last: a hook that sees a size sees the table.
  __atomic_store_n(&g_table_size, n, __ATOMIC_RELEASE);
  return true;
}

bool Ready() { return __atomic_load_n(&g_table_size, __ATOMIC_ACQUIRE) != 0; }

bool Set(int fd, uint64_t entry) {
  if (fd < 0) return false;
  if (static_cast<size_t>(fd) >= g_table_size) {
    if (g_table_size) g_beyond.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  g_table[fd].store(entry, std::memory_order_relaxed);
  // seq_cst: socket_direct.cc's sweep reads the mark after its switch goes
  // off and must not miss an fd whose bit was set before.
  int hw = g_high_water.load(std::memory_order_seq_cst);
  while (fd + 1 > hw && !g_high_water.compare_exchange_weak(hw, fd + 1, std::memory_order_seq_cst)) {}
  return true;
}

uint64_t Clear(int fd) {
  if (static_cast<size_t>(fd) >= g_table_size) return 0;
  // Most closes are of non-sockets: read first so they do not dirty the page.
  if (g_table[fd].load(std::memory_order_relaxed) == 0) return 0;
  return g_table[fd].exchange(0, std::memory_order_relaxed);
}

bool ClearIf(int fd, uint64_t expected) {
  if (static_cast<size_t>(fd) >= g_table_size || expected == 0) return false;
  return g_table[fd].compare_exchange_strong(expected, 0, std::memory_order_relaxed);
}

uint64_t SetRole(int fd, uint64_t conn, SockRole role) {
  return UpdateFlags(fd, conn, uint64_t(role) << 48, uint64_t{0xf} << 48);
}

uint64_t UpdateFlags(int fd, uint64_t conn, uint64_t set, uint64_t clear) {
  if (static_cast<size_t>(fd) >= g_table_size) return 0;
  uint64_t e = g_table[fd].load(std::memory_order_relaxed);
  while (e != 0 && EntryConn(e) == conn) {
    uint64_t next = (e & ~clear) | set;
    if (next & kEntryShared) next &= ~kEntryDirect;
    // seq_cst: socket_direct.cc's switch relies on it.
    if (g_table[fd].compare_exchange_weak(e, next, std::memory_order_seq_cst)) return next;
  }
  return 0;
}

int HighWater() { return g_high_water.load(std::memory_order_seq_cst); }
uint64_t BeyondTableCount() { return g_beyond.load(std::memory_order_relaxed); }
uint64_t NewConnId() { return g_next_conn.fetch_add(1, std::memory_order_relaxed) & kConnMask; }

}  // namespace flightrec::sockfd
