// Local stack capture: a backtrace of the calling thread, taken in place with
// libunwind (DWARF CFI, so -fomit-frame-pointer code unwinds fully).
//
// Used by the allocation hooks on application threads. Not for signal
// handlers: unwinding may take the dynamic loader's lock (dl_iterate_phdr) the
// first time it meets a pc; signal handlers copy the stack instead
// (sigprof_sampler.h) and the flush thread unwinds the copy (stack_unwinder.h).
#pragma once
#include <cstdint>

namespace flightrec::sampler {

// Fills pcs[0..n) leaf first and returns n (0..max). Frame 0 is the caller of
// CaptureCurrentStack after `skip` more frames are dropped (skip=0: the
// function that called us). Every pc is a return address minus 1, i.e. it
// points inside the call instruction, so symbolization yields the call line.
//
// No host malloc, no locks of ours; libunwind's per-thread cache keeps the
// steady state at a few hundred ns for typical depths. Safe to call before
// InitLocalStackCapture() (it then initialises lazily).
// With mark_truncated, a stack that goes on past `max` frames ends with
// kTruncatedStackPc (sample_events.h) in its last slot.
int CaptureCurrentStack(uint64_t* pcs, int max, int skip, bool mark_truncated = false);

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

// Sets libunwind's per-thread caching for the local address space and warms
// it up. Called once at init from a normal (non-hook) context; idempotent.
void InitLocalStackCapture();

}  // namespace flightrec::sampler
