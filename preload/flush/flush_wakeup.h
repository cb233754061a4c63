// Waking the flush thread early. It sleeps FLIGHTREC_FLUSH_MS between
// drains; a producer whose ring passes a quarter full (Ring::TakeNudge) calls
// NudgeFlushThread so a burst after a quiet spell is drained before the ring
// overflows, and a quiet process is woken rarely.
// Stop, crash and resume requests wake it the same way.
//
// The protocol (flush_thread.cc): the flush thread reads the futex word at
// the start of a tick and sleeps on that value after it, so a nudge that
// arrives during the tick makes the sleep return at once; the futex wake
// itself is made only while a flush thread is counted as sleeping.
#pragma once

namespace flightrec {

// Any thread, signal handlers included (async-signal-safe); keeps errno; no
// locks, no allocation. Costs one atomic add, plus one futex wake when the
// flush thread sleeps.
void NudgeFlushThread();

// The same, for the collection the flush thread hosts (sampler_thread.h): a
// sampling ring wants draining. Wakes the thread without making it scan
// every slot, and wakes it in the sampler's epoll set too when it sleeps
// there. Async-signal-safe, keeps errno.
void WakeFlushThreadForSampler();

}  // namespace flightrec
