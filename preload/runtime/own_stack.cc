// Own stack: see own_stack.h.
#include "preload/runtime/own_stack.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>

#include "preload/crash/call_on_stack.h"

namespace flightrec {
namespace {

constexpr size_t kOwnStackBytes = 8u << 20;
constexpr size_t kGuardBytes = 4096;

void Trampoline(void* arg) { reinterpret_cast<void (*)()>(arg)(); }

}  // namespace

void RunOnOwnStack(void (*fn)()) {
  const int saved = errno;
  void* base = mmap(nullptr, kOwnStackBytes, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  errno = saved;
  if (base == MAP_FAILED) {
    fn();
    return;
  }
  // A guard page at the bottom: an overflow faults rather than run into
  // whatever is mapped below.
  mprotect(base, kGuardBytes, PROT_NONE);
  CallOnStack(Trampoline, reinterpret_cast<void*>(fn), reinterpret_cast<uintptr_t>(base) + kOwnStackBytes);
  const int after = errno;
  munmap(base, kOwnStackBytes);
  errno = after;
}

}  // namespace flightrec
