// Local stack capture: a backtrace of the calling thread, taken in place from
// its DWARF CFI (so -fomit-frame-pointer code unwinds fully).
//
// Two unwinders, because the fast one costs memory per thread
// (bench/micro/unwind_paths_bench.cc, make -C bench unwind-memory):
//  * libunwind's unw_backtrace: ~0.2 us for 20 frames, through a 256 KiB
//    frame cache per thread, written in full on the thread's first unwind
//    and kept until it exits;
//  * libgcc's _Unwind_Backtrace: ~3 us for 20 frames, nothing per thread
//    (each frame's FDE is found through _dl_find_object, lock-free).
// A thread starts on libgcc's and moves to libunwind's for good once it
// captures more than 32 stacks within a second: a pool of threads that
// allocate now and then costs no memory, and a hot thread gets the fast path
// after its first second. The main thread is no exception.
//
// Used by the allocation hooks on application threads. Not for signal
// handlers: unwinding may take the dynamic loader's lock (dl_iterate_phdr) the
// first time it meets a pc; signal handlers copy the stack instead
// (sigprof_sampler.h) and the flush thread unwinds the copy (stack_unwinder.h).
#pragma once
#include <cstdint>

namespace flightrec::stacks {

// Fills pcs[0..n) leaf first and returns n (0..max). Frame 0 is the caller of
// CaptureCurrentStack after `skip` more frames are dropped (skip=0: the
// function that called us). Every pc is a return address minus 1, i.e. it
// points inside the call instruction, so symbolization yields the call line.
//
// No host malloc, no locks of ours. Safe to call before
// InitLocalStackCapture() (it then initialises libunwind lazily).
// With MarkTruncated::kYes, a stack that goes on past `max` frames ends with
// kTruncatedStackPc (stack_limits.h) in its last slot.
enum class MarkTruncated : bool { kNo = false, kYes = true };
int CaptureCurrentStack(uint64_t* pcs, int max, int skip, MarkTruncated mark = MarkTruncated::kNo);

// True while the calling thread is inside CaptureCurrentStack. libunwind may
// take its own pthread mutex there, which reaches our pthread_mutex_lock
// interposer; the blocking-call hooks stand aside while this is set, so they
// never capture a stack from inside a capture (that would self-deadlock).
extern __thread bool t_in_local_capture __attribute__((tls_model("initial-exec")));

// The [start, end) of the function that holds pc in this process, as its
// unwind table entry (FDE in .eh_frame) says, which stripped binaries keep.
// False when no entry covers pc. For naming code that has no symbol
// (symbolizer.cc); may take the dynamic loader's lock: not for signal handlers.
bool LocalFunctionRange(uint64_t pc, uint64_t* start, uint64_t* end);

// Finds libgcc's unwinder, sets libunwind's per-thread caching for the local
// address space and warms both up. Called at init from a normal (non-hook)
// context; idempotent. Without it (a capture first), only libunwind is used.
void InitLocalStackCapture();

// A JIT registered unwind tables with libgcc (hook_register_frame.cc): from
// now on libgcc's unwinder takes a global lock that the code we interrupt
// may hold (libgcc mallocs under it), so every capture uses libunwind's,
// which never touches it. Once set, for the life of the process.
void NoteLibgccFramesRegistered();
bool LibgccFramesRegistered();

// For tests: the unwinder CaptureCurrentStack uses on this thread.
enum class LocalUnwinder { kByRate, kLibunwind, kLibgcc };
void SetLocalUnwinderForThisThread(LocalUnwinder u);
bool LibgccUnwinderAvailable();
bool LibunwindChosenForThisThread();

}  // namespace flightrec::stacks
