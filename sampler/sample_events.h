// Sample events: the event types the sampler writes (cpu.sample,
// offcpu.sample, sampler.lost, offcpu.unattributed), their emitters, and the queue that carries
// unwound samples from the sampler thread to the flush thread.
//
// Why a queue: the flush thread also symbolizes (the segment writer calls the
// PcDescriber on a pc's first use), and libdw's first touch of a big module
// can take 100+ ms. The sampler thread keeps draining the kernel and signal
// rings meanwhile, so a slow symbolization delays samples instead of losing
// them. Names and fields of the events are fixed project-wide.
#pragma once
#include <cstdint>

#include "preload/flush/flush_registry.h"
#include "preload/threads/dropped_weight.h"
#include "preload/stacks/stack_limits.h"

namespace flightrec::sampler {

using stacks::kMaxFrames;
using stacks::kTruncatedStackPc;

// Defines the four event types, registers the queue's flush source and the
// harvest of each drained thread's dropped blocks.
// Once, at init, before the flush thread starts.
void RegisterSampleEvents();

// Flush thread: append directly.
void EmitCpuSample(FlushContext& ctx, uint64_t time_ns, uint32_t tid, const uint64_t* pcs, int npcs,
                   uint64_t period_ns);
// time_ns is when the block began; reason is "switch" or the blocking call
// (a string with static storage); weight is how many blocks the sample
// stands for (1, or the switch sampling period when switch-outs are
// thinned: see perf_switch_thinning.cc). A profile counts duration_ns * weight.
void EmitOffCpuSample(FlushContext& ctx, uint64_t time_ns, uint32_t tid, const uint64_t* pcs, int npcs,
                      uint64_t duration_ns, const char* reason, uint32_t weight = 1);
void EmitSamplerLost(FlushContext& ctx, uint64_t time_ns, uint32_t tid, uint64_t count);
// Off-CPU samples whose records were dropped (a thread's ring, the queue
// below): one offcpu.unattributed (time, tid, samples, duration_ns) with what
// `d` gained since its last harvest, if anything. Returns the samples.
uint64_t EmitOffCpuUnattributed(FlushContext& ctx, uint32_t tid, DroppedTime& d);

// Sampler thread: queue for the flush thread. Bounded: beyond the bound a
// CPU sample is counted and reported as sampler.lost (tid 0), an off-CPU
// one as offcpu.unattributed (tid 0) with its time.
void QueueCpuSample(uint64_t time_ns, uint32_t tid, const uint64_t* pcs, int npcs, uint64_t period_ns);
void QueueOffCpuSample(uint64_t time_ns, uint32_t tid, const uint64_t* pcs, int npcs, uint64_t duration_ns,
                       const char* reason, uint32_t weight);
void QueueSamplerLost(uint64_t time_ns, uint32_t tid, uint64_t count);

// In a forked child: the queue's lock may have been held by a thread that
// does not exist there; start empty.
void ResetSampleQueueAfterFork();

// Samples (and loss reports) offered to the queue so far, kept or refused:
// the sampler thread tells a collection that found nothing by it.
uint64_t SamplesOffered();

}  // namespace flightrec::sampler
