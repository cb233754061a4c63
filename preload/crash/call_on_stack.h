// CallOnStack: calls a function with the stack pointer moved to another
// stack, and comes back. The crash handler runs on an alternate signal stack
// (sigaltstack) so that it can record stack overflows; an application handler
// that did not ask for SA_ONSTACK expects the kernel's behaviour, the
// interrupted thread's own stack below the red zone, and may need far more
// than the alternate stack's 64 KiB (redis-server's crash report puts a 1 MiB
// buffer on the stack for its memory test). x86-64 only, as the recorder is.
#pragma once
#include <cstdint>

namespace flightrec {

// Runs fn(arg) with %rsp at `stack_top` (rounded down to 16 bytes), then
// restores the caller's stack. Unwinders can walk from fn back through this
// frame to the caller (CFI is emitted).
void CallOnStack(void (*fn)(void*), void* arg, uintptr_t stack_top);

// Where the kernel would put a handler's frame on the interrupted stack: below
// the 128-byte red zone of the interrupted code's sp (and a little more).
inline uintptr_t HandlerStackTopBelow(uintptr_t interrupted_sp) { return (interrupted_sp - 128 - 64) & ~uintptr_t{15}; }

}  // namespace flightrec
