// The recorder's private heap (see recorder_heap.h): loads libmimalloc.so.2
// with dlopen(RTLD_LOCAL) and defines the four mimalloc functions the rest of
// the recorder calls, hidden, as calls through pointers into it.
//
// Why not link -lmimalloc: a DT_NEEDED of the preload joins the host's global
// scope, and libmimalloc.so.2 exports operator new/delete, malloc,
// __libc_malloc, malloc_usable_size... A C program that later dlopens C++
// code then got mimalloc's operator new but glibc's malloc_usable_size and
// crashed (issue #34). Debian ships no static libmimalloc, so the shared
// object is loaded privately instead.
//
// The TSan build serves the same four functions from TSan's allocator
// (tsan_recorder_heap.cc); only the policy functions at the top are
// built there.
#include "preload/heap/recorder_heap.h"
#include "preload/heap/recorder_thread_malloc.h"
#include "preload/threads/thread_registry.h"

#include <strings.h>

namespace flightrec {

bool HeapAllowed(unsigned long at_secure) { return at_secure == 0; }

bool IsMimallocVariable(const char* entry) { return entry && strncasecmp(entry, "MIMALLOC_", 9) == 0; }

const char* HeapStateName(HeapState state) {
  switch (state) {
    case HeapState::kClosed: return "closed";
    case HeapState::kPrivate: return "private";
    case HeapState::kShared: return "shared with the program";
    case HeapState::kRefused: return "refused (secure execution)";
    case HeapState::kMissing: return "libmimalloc.so.2 not loadable";
  }
  return "?";
}

}  // namespace flightrec

#if !defined(__SANITIZE_THREAD__)

#include <dlfcn.h>
#include <sys/auxv.h>
#include <sys/mman.h>

#include <atomic>
#include <cstring>
#include <new>

extern char** environ;

namespace flightrec {
namespace {

// mimalloc's own signatures (mimalloc.h is not included here: its
// declarations carry default visibility, and ours must stay hidden).
using MallocFn = void* (*)(size_t);
using ReallocFn = void* (*)(void*, size_t);
using FreeFn = void (*)(void*);
using CollectFn = void (*)(bool force);
using OptionSetFn = void (*)(int option, long value);
using OutputFun = void(const char* msg, void* arg);
using RegisterOutputFn = void (*)(OutputFun*, void*);
using ErrorFun = void(int err, void* arg);
using RegisterErrorFn = void (*)(ErrorFun*, void*);

// mi_option_t values (mimalloc.h, 2.x; stable options).
constexpr int kOptionShowErrors = 0;
constexpr int kOptionShowStats = 1;
constexpr int kOptionVerbose = 2;
// Options whose numbers moved between releases: set only for the release
// they were read from (mi_version(): 209 for 2.0.9, Debian 12's).
//   2.0.x: page_reset 11, abandoned_page_decommit 12, decommit_delay 15,
//          segment_decommit_delay 23
//   2.1.x and later: abandoned_page_purge 12, purge_delay 15 (11 and 23
//          mean other things there: never set)
constexpr int kOptionPageReset20 = 11;
constexpr int kOptionAbandonedPageDecommit = 12;
constexpr int kOptionDecommitDelay = 15;  // purge_delay in 2.1
constexpr int kOptionSegmentDecommitDelay20 = 23;
using VersionFn = int (*)();

// Memory the recorder's heap no longer uses goes back to the kernel at once
// (issue #44). mimalloc's defaults keep freed spans committed for 25 ms and
// only decommit them on a later allocation in the same segment; the flush
// thread works in bursts, one per tick, then sleeps, so the end of a burst
// (a symbol table's sorting buffer, a segment's batches, /proc/self/maps
// text) stayed resident until the next tick, and in a forking server every
// process carried it. Decommitting at once costs an madvise per freed span
// (large and medium blocks only; small pages are reused in place).
void ReturnFreedMemory(OptionSetFn option_set, VersionFn version) {
  const int v = version ? version() : 0;
  if (v >= 200 && v < 210) {
    option_set(kOptionPageReset20, 1);
    option_set(kOptionAbandonedPageDecommit, 1);
    option_set(kOptionDecommitDelay, 0);
    option_set(kOptionSegmentDecommitDelay20, 0);
  } else if (v >= 210 && v < 300) {
    option_set(kOptionAbandonedPageDecommit, 1);
    option_set(kOptionDecommitDelay, 0);
  }
}

std::atomic<MallocFn> g_malloc{nullptr};
std::atomic<ReallocFn> g_realloc{nullptr};
std::atomic<FreeFn> g_free{nullptr};
std::atomic<CollectFn> g_collect{nullptr};  // set only for our own copy (kPrivate)
std::atomic<int> g_state{static_cast<int>(HeapState::kClosed)};
// One opener at a time; a thread that finds another opening gets no memory
// this once (callers handle null) rather than waiting inside a hook.
std::atomic<bool> g_opening{false};

// mimalloc prints nothing into the host's stderr and never aborts on an
// error: these replace its stderr output and its default error action
// (which aborts on some errors in some builds).
void SwallowOutput(const char*, void*) {}
void SwallowError(int, void*) {}

// While mimalloc's constructor reads its options from `environ`, it sees the
// program's environment minus every MIMALLOC_* entry: the options are ours.
// Only when such an entry exists is `environ` swapped at all; the filtered
// copy lives in an anonymous mapping (no host malloc) and is dropped after.
class EnvironWithoutMimalloc {
 public:
  EnvironWithoutMimalloc() {
    char** env = environ;
    if (!env) return;
    size_t count = 0;
    bool any = false;
    for (; env[count]; ++count) any = any || IsMimallocVariable(env[count]);
    if (!any) return;
    bytes_ = (count + 1) * sizeof(char*);
    void* mem = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) {
      // No room for a copy: mimalloc sees no environment at all meanwhile.
      static char* empty[1] = {nullptr};
      saved_ = env;
      environ = empty;
      bytes_ = 0;
      return;
    }
    copy_ = static_cast<char**>(mem);
    size_t n = 0;
    for (size_t i = 0; i < count; ++i)
      if (!IsMimallocVariable(env[i])) copy_[n++] = env[i];
    copy_[n] = nullptr;
    saved_ = env;
    environ = copy_;
  }
  ~EnvironWithoutMimalloc() {
    if (saved_) environ = saved_;
    if (copy_) munmap(copy_, bytes_);
  }
  EnvironWithoutMimalloc(const EnvironWithoutMimalloc&) = delete;
  EnvironWithoutMimalloc& operator=(const EnvironWithoutMimalloc&) = delete;

 private:
  char** saved_ = nullptr;
  char** copy_ = nullptr;
  size_t bytes_ = 0;
};

constexpr const char* kLibrary = "libmimalloc.so.2";

HeapState Load() {
  if (!HeapAllowed(getauxval(AT_SECURE))) return HeapState::kRefused;
  // Already in the process (the program uses mimalloc itself): share it,
  // and leave its options and handlers alone, they are the program's.
  void* handle = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  HeapState state = HeapState::kShared;
  if (!handle) {
    RecorderArenaPrepare();  // its key before mimalloc's (recorder_thread_malloc.cc)
    EnvironWithoutMimalloc filtered;
    handle = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    state = HeapState::kPrivate;
  }
  if (!handle) return HeapState::kMissing;
  auto m = reinterpret_cast<MallocFn>(dlsym(handle, "mi_malloc"));
  auto r = reinterpret_cast<ReallocFn>(dlsym(handle, "mi_realloc"));
  auto f = reinterpret_cast<FreeFn>(dlsym(handle, "mi_free"));
  if (!m || !r || !f) return HeapState::kMissing;
  if (state == HeapState::kPrivate) {
    auto option_set = reinterpret_cast<OptionSetFn>(dlsym(handle, "mi_option_set"));
    auto reg_output = reinterpret_cast<RegisterOutputFn>(dlsym(handle, "mi_register_output"));
    auto reg_error = reinterpret_cast<RegisterErrorFn>(dlsym(handle, "mi_register_error"));
    if (reg_output) reg_output(SwallowOutput, nullptr);
    if (reg_error) reg_error(SwallowError, nullptr);
    if (option_set) {
      option_set(kOptionShowErrors, 0);
      option_set(kOptionShowStats, 0);
      option_set(kOptionVerbose, 0);
      ReturnFreedMemory(option_set, reinterpret_cast<VersionFn>(dlsym(handle, "mi_version")));
    }
    g_collect.store(reinterpret_cast<CollectFn>(dlsym(handle, "mi_collect")), std::memory_order_release);
    RecorderArenaResolve(handle);  // our threads' malloc goes there (recorder_thread_malloc.h)
  }
  g_realloc.store(r, std::memory_order_relaxed);
  g_free.store(f, std::memory_order_relaxed);
  g_malloc.store(m, std::memory_order_release);
  return state;
}

// The slow path of every call before the heap is open.
bool EnsureOpen() {
  if (g_malloc.load(std::memory_order_acquire)) return true;
  RecorderHeapOpen();
  return g_malloc.load(std::memory_order_acquire) != nullptr;
}

}  // namespace

HeapState RecorderHeapOpen() {
  const auto now = static_cast<HeapState>(g_state.load(std::memory_order_acquire));
  if (now != HeapState::kClosed) return now;
  if (g_opening.exchange(true, std::memory_order_acq_rel)) return HeapState::kClosed;
  HeapState state = static_cast<HeapState>(g_state.load(std::memory_order_acquire));
  if (state == HeapState::kClosed) {
    state = Load();
    g_state.store(static_cast<int>(state), std::memory_order_release);
  }
  g_opening.store(false, std::memory_order_release);
  return state;
}

// When this thread last collected (RecorderHeapCollect).
__thread uint64_t t_last_collect_ns __attribute__((tls_model("initial-exec"))) = 0;

void RecorderHeapCollect(uint64_t now_ns) {
  const CollectFn collect = g_collect.load(std::memory_order_acquire);
  if (!collect || now_ns - t_last_collect_ns < kCollectEveryNs) return;
  t_last_collect_ns = now_ns;
  collect(true);
  RecorderArenaCollect();
}

HeapState RecorderHeapStateNow() { return static_cast<HeapState>(g_state.load(std::memory_order_acquire)); }

}  // namespace flightrec

// The functions the recorder's code calls (declared in mimalloc.h; used by
// mi_stl_allocator and directly). Hidden: the library must not export them,
// and mimalloc's own calls to mi_free & co. (through its PLT, resolved in the
// global scope first) must never reach these.
extern "C" {

// On a recorder thread (or in our own work on a program's thread) both go
// to the thread's heap in the recorder arena, the one its libraries'
// malloc already uses (recorder_thread_malloc.h), so the thread has one
// mimalloc heap, not two: each heap keeps its own partly used page for
// every size class it allocates, and its own segments (issue #44). A
// program's thread that has such a heap (the main thread, from start-up)
// uses it too; one that has none (a thread creating threads, for the
// pthread_create hook's few bytes) keeps its default heap rather than make
// a second one. Elsewhere, or when the arena cannot serve, the default heap.
__attribute__((visibility("hidden"))) void* mi_malloc(size_t size) noexcept {
  if (!flightrec::EnsureOpen()) return nullptr;
  if (flightrec::IsRecorderThread() || flightrec::RecorderThreadHasHeap()) {
    if (void* p = flightrec::RecorderThreadMalloc(size)) return p;
  }
  return flightrec::g_malloc.load(std::memory_order_relaxed)(size);
}

__attribute__((visibility("hidden"))) void* mi_realloc(void* p, size_t size) noexcept {
  if (!flightrec::EnsureOpen()) return nullptr;
  if (flightrec::IsRecorderThread() || flightrec::RecorderThreadHasHeap()) {
    if (void* q = flightrec::RecorderThreadRealloc(p, size)) return q;
  }
  return flightrec::g_realloc.load(std::memory_order_relaxed)(p, size);
}

__attribute__((visibility("hidden"))) void mi_free(void* p) noexcept {
  if (!p) return;
  // A non-null pointer came from the heap, so it is open.
  flightrec::FreeFn f = flightrec::g_free.load(std::memory_order_acquire);
  if (!f) return;
  if (flightrec::IsRecorderThread()) flightrec::ReleaseFreedBlockPages(p);
  f(p);
}

// mi_stl_allocator::allocate. mimalloc's own mi_new_n aborts the process
// when memory runs out in a program without libstdc++ (it cannot throw from
// C): ours throws std::bad_alloc, which recording's entry points catch.
__attribute__((visibility("hidden"))) void* mi_new_n(size_t count, size_t size) {
  size_t bytes;
  if (__builtin_mul_overflow(count, size, &bytes)) throw std::bad_alloc();
  void* p = mi_malloc(bytes);
  if (!p) throw std::bad_alloc();
  return p;
}

}  // extern "C"
#endif  // !__SANITIZE_THREAD__
