// Registers unwind tables with libgcc the way a JIT does, then throws.
//
//   jit_frames once      register this executable's .eh_frame 2000 times,
//                        then throw and catch one exception
//   jit_frames threads   the same registrations, then 8 threads each throw
//                        and catch 300 exceptions at once
//   jit_frames term      the same registrations, then a thread throws and
//                        catches without end until main sends it SIGTERM
//                        (no handler: the process must die of it, even when
//                        the signal lands inside libgcc holding its lock)
//
// After the first __register_frame, libgcc takes its global object_mutex for
// every frame lookup and calls malloc while holding it (it sorts the newly
// registered objects' FDEs on first use). A profiler that unwinds with libgcc
// from inside malloc, or from a pthread_mutex_lock hook timing that mutex,
// takes the lock again and hangs. Prints what it caught; exits 0.
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

extern "C" void __register_frame(void* begin);
extern "C" void __deregister_frame(void* begin);

namespace {

// The executable's .eh_frame, found through its PT_GNU_EH_FRAME header
// (version 1, eh_frame_ptr encoded pcrel|sdata4 as every x86-64 linker does).
void* OwnEhFrame() {
  void* found = nullptr;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* arg) -> int {
        if (info->dlpi_name && info->dlpi_name[0]) return 0;  // the executable comes first, unnamed
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          if (info->dlpi_phdr[i].p_type != PT_GNU_EH_FRAME) continue;
          auto* hdr = reinterpret_cast<const uint8_t*>(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
          if (hdr[0] != 1 || hdr[1] != 0x1b) return 1;
          int32_t rel;
          std::memcpy(&rel, hdr + 4, sizeof(rel));
          *static_cast<void**>(arg) = const_cast<uint8_t*>(hdr + 4 + rel);
          return 1;
        }
        return 1;
      },
      &found);
  return found;
}

__attribute__((noinline)) void Thrower(int i) {
  if (i >= 0) throw std::runtime_error("jit_frames");
}

int ThrowAndCatch(int times) {
  int caught = 0;
  for (int i = 0; i < times; ++i) {
    try {
      Thrower(i);
    } catch (const std::runtime_error&) {
      ++caught;
    }
  }
  return caught;
}

}  // namespace

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "once";
  void* eh = OwnEhFrame();
  if (!eh) {
    std::puts("no eh_frame");
    return 1;
  }
  // Each registration copies nothing: libgcc keeps a pointer; several
  // registrations of the same table are several objects to classify.
  for (int i = 0; i < 2000; ++i) __register_frame(eh);
  if (std::strcmp(mode, "term") == 0) {
    std::thread worker([] {
      for (;;) ThrowAndCatch(1000);
    });
    usleep(200 * 1000);
    pthread_kill(worker.native_handle(), SIGTERM);
    worker.join();  // never returns: SIGTERM ends the process
    std::puts("survived SIGTERM");
    return 1;
  }
  if (std::strcmp(mode, "threads") == 0) {
    std::vector<int> caught(8, 0);
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) threads.emplace_back([&caught, t] { caught[t] = ThrowAndCatch(300); });
    for (auto& th : threads) th.join();
    int total = 0;
    for (int c : caught) total += c;
    std::printf("caught %d\n", total);
  } else {
    std::printf("caught %d\n", ThrowAndCatch(1));
  }
  return 0;
}
