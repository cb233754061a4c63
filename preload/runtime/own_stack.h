// Own stack: runs a piece of the recorder's work that must happen on a
// program thread (the seal before exec) on a stack of the recorder's, not
// the thread's. A program thread may have as little as PTHREAD_STACK_MIN
// (16 KiB) of stack, less than the final drain and seal need (symbolizing a
// new pc reads /proc/self/maps through libdw; a thread with a 16 KiB stack
// that called execl died of SIGSEGV there). The stack is mapped for the call
// (MAP_NORESERVE: only the pages used are backed) and unmapped after it.
#pragma once

namespace flightrec {

// Calls fn() on a fresh 8 MiB stack (the size of an ordinary thread's); on
// the thread's own stack if that cannot be mapped. errno is kept.
void RunOnOwnStack(void (*fn)());

}  // namespace flightrec
