// RawSyscall6: a system call made with the syscall instruction itself.
//
// hook_signal.cc interposes syscall() (to see rt_sigaction of the signals we
// keep tables of), so the recorder's own calls that must reach the kernel
// as they are, such as the sampler's query of SIGPROF's real handler, use
// this. Returns the kernel's result (-errno on failure); errno is untouched.
// Async-signal-safe. x86-64, like the rest of the signal code.
#pragma once

namespace flightrec {

inline long RawSyscall6(long nr, long a1, long a2, long a3, long a4, long a5, long a6) {
  register long r10 __asm__("r10") = a4;
  register long r8 __asm__("r8") = a5;
  register long r9 __asm__("r9") = a6;
  long ret;
  __asm__ volatile("syscall"
                   : "=a"(ret)
                   : "a"(nr), "D"(a1), "S"(a2), "d"(a3), "r"(r10), "r"(r8), "r"(r9)
                   : "rcx", "r11", "memory");
  return ret;
}

}  // namespace flightrec
