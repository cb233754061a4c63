// Sample events: the event types the sampler writes (cpu.sample,
// offcpu.sample, sampler.lost) and their emitters. Names and fields are fixed
// project-wide; the Python reports rely on them. Emitters run on the flush
// thread only.
#pragma once
#include <cstdint>

#include "preload/flush_registry.h"

namespace flightrec::sampler {

// Deepest stack any sampler records (frames beyond are cut, leaf kept).
inline constexpr int kMaxFrames = 128;

// Defines the three event types. Call once at init, before the flush thread.
void RegisterSampleEvents();

void EmitCpuSample(FlushContext& ctx, uint64_t time_ns, uint32_t tid, const uint64_t* pcs, int npcs,
                   uint64_t period_ns);
// time_ns is when the block began; reason is "switch" or the blocking call.
void EmitOffCpuSample(FlushContext& ctx, uint64_t time_ns, uint32_t tid, const uint64_t* pcs, int npcs,
                      uint64_t duration_ns, const char* reason);
void EmitSamplerLost(FlushContext& ctx, uint64_t time_ns, uint32_t tid, uint64_t count);

}  // namespace flightrec::sampler
