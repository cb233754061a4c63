// The program's capabilities, mirrored onto the recorder's threads.
//
// Capabilities belong to a thread: capset(2) changes only the caller's. But
// glibc applies setgid, setresgid, setgroups and the other id changes to
// every thread of the process (its SIGSETXID broadcast) and aborts the
// process when one thread's call fails where the caller's succeeded. A
// program that keeps its capabilities across a uid switch
// (PR_SET_KEEPCAPS), raises them again with capset on its own thread, then
// changes its groups (setpriv --reuid --regid --clear-groups, in that
// order) would die because of our threads: the switch cleared their
// effective sets and nothing raised them.
//
// So a capset the program makes is made on our threads too: the hook (on
// the program's thread, after its call succeeded) publishes the sets and
// wakes our threads; each applies them between two pieces of work
// (RecorderCapsApply, in its loop) and says so; the hook waits for that,
// bounded. A lowering is mirrored as well: our threads never keep a
// capability the program gave up.
//
// A recorder thread that leaves unregisters and no longer follows, but
// glibc lists it until it is gone and still runs the program's id changes
// on it: a stop that the program's own id change follows (the uid switch,
// preload/runtime/lifecycle.cc) waits until the stopped thread is gone
// (WaitForStoppedFlushThreadGone, preload/flush/flush_thread.h).
//
// Invariant: a registered recorder thread's `applied` equals the
// generation it last applied; the hook returns once every registered
// thread's equals the new one, or after kMirrorWaitNs.
#pragma once

#include <stdint.h>

namespace flightrec {

// CreateRecorderThread, around the thread's creation: the generation the
// new thread inherits (its creator's), which its trampoline passes to
// RecorderCapsRegisterSelf; a creation that failed is taken back. Until it
// registers, the hook waits for it too.
uint32_t RecorderCapsCreating();
void RecorderCapsCreateFailed();

// The calling recorder thread takes part (from its trampoline's first
// steps); RecorderCapsSetWaker: what gets it out of its wait soon (none:
// it only looks at its own pace). Unregister when it leaves.
void RecorderCapsRegisterSelf(uint32_t created_at);
void RecorderCapsSetWaker(void (*wake)());
void RecorderCapsUnregisterSelf();

// In each recorder thread's loop: makes the program's last published
// capset on this thread, if it has not yet. One atomic load otherwise.
void RecorderCapsApply();

// The capset hooks, after the program's call succeeded on its thread:
// `header` and `data` as it passed them (struct __user_cap_header_struct,
// struct __user_cap_data_struct[1 or 2]).
void RecorderCapsAfterCapset(const void* header, const void* data);

// The capset system call as the hooks make it (hook_capset.cc; the
// syscall() hook for SYS_capset): 0 or -errno; mirrored when it succeeded.
long CapsetThroughHook(const void* header, const void* data);

// The prctl hooks, after the program's PR_SET_KEEPCAPS succeeded: our
// threads keep their permitted capabilities across a uid switch exactly
// when the program's thread does.
void RecorderCapsAfterKeepCaps(unsigned long keep);

// A forked child: the parent's threads are not there.
void RecorderCapsResetAfterFork();

}  // namespace flightrec
