// libunwind's address-validation pipe, answered without descriptors.
//
// libunwind 1.6 checks an address it doubts (local unwinding: unw_step's
// conservative checks, frames it has to guess) by write(2)-ing one byte of it
// into a pipe it keeps in its statics (the kernel answers EFAULT for an
// unreadable address instead of faulting) and draining the pipe with read(2).
// Each of its two libraries (libunwind.so.8 for in-place captures,
// libunwind-x86_64.so.8 for copied stacks) opens such a pipe at its first
// use. Those four descriptors were visible to the program (/proc/self/fd),
// and a program that dup2'd its own file onto one of the numbers had memory
// bytes written into it: libunwind keeps the numbers for good.
//
// Instead, the pipe2 hook (preload/fds/hook_fd.cc) hands libunwind two
// numbers that are no descriptors at all (negative, never -1, which libunwind
// reads as "no pipe"), and the hooks answer its calls on them:
//   read(kValidationReadFd, ...)                  -1, EAGAIN (an empty pipe)
//   syscall(SYS_write, kValidationWriteFd, a, n)  n if [a, a+n) is readable
//                                                 by us, else -1, EFAULT
// So a pipe is faked when libunwind asks for it: inside a LibunwindInitScope
// (the recorder's own start-up of both libraries, whoever interposes pipe2
// ahead of us) or when pipe2's caller is libunwind's code (its lazy start-up,
// or its re-open after a failed read). Any other pipe is made for real.
//
// Async-signal-safe, no allocation, no locks; works before init.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

namespace flightrec {

// INT_MIN-based so that no fd arithmetic anywhere can land on a real number.
inline constexpr int kValidationReadFd = -0x46520000;
inline constexpr int kValidationWriteFd = kValidationReadFd - 1;

inline bool IsValidationFd(long fd) { return fd == kValidationReadFd || fd == kValidationWriteFd; }

// Records where libunwind's two libraries lie in memory (dladdr and
// dl_iterate_phdr: the constructor's context only), so pipe2 can tell their
// calls from the program's.
void NoteLibunwindCode();
bool CalledFromLibunwind(const void* return_address);

// While alive on a thread, every pipe it makes is a faked validation pipe.
// Only around code that starts libunwind (lifecycle.cc).
class LibunwindInitScope {
 public:
  LibunwindInitScope();
  ~LibunwindInitScope();
  LibunwindInitScope(const LibunwindInitScope&) = delete;
  LibunwindInitScope& operator=(const LibunwindInitScope&) = delete;
};
bool InLibunwindInitScope();

// The pipe2 hook's answer: fds get the two fake numbers; returns 0.
int MakeValidationPipe(int fds[2]);

// read(2) on the fake read end: nothing to drain.
ssize_t ValidationPipeRead();
// write(2) of n bytes at addr into the fake write end: n if our own memory
// there is readable, -1 with errno EFAULT otherwise. Never faults.
ssize_t ValidationPipeWrite(const void* addr, size_t n);

// How many bytes from addr (up to len) are readable by us, a page at a
// time, by the same check (never process_vm_readv under a seccomp filter).
// For copies that must not fault where process_vm_readv is not allowed.
size_t ReadablePrefix(uintptr_t addr, size_t len);

}  // namespace flightrec
