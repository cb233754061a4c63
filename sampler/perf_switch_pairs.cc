// perf_event sampler, switch-pair matching (off-CPU): pairs each sampled
// switch-out with the thread's next switch-in into one block, and queues a
// block long enough (FLIGHTREC_OFFCPU_MIN_US) as offcpu.sample with the
// weight the thinning gave it (perf_switch_thinning.cc). Sampler thread only
// (an exiting thread's block is finished from its orphan: perf_ring.cc).
//
// The context-switch event samples at every switch-out (user regs and
// stack at the syscall that blocked), then PERF_RECORD_SWITCH records (from
// attr.context_switch) mark switch-out (with PREEMPT when involuntary) and
// switch-in. A block is switch-out sample -> switch-in; its duration is the
// difference of their timestamps. Preemptions are run-queue waits, not
// blocking, and are left out.
#include <linux/perf_event.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "sampler/perf_slots.h"
#include "sampler/sample_events.h"

namespace flightrec::sampler::perf {

void UnwindPending(Slot& slot, const Batch& b) {
  slot.pending_n = 0;
  perf_event_header h;
  if (slot.pending_pos + sizeof(h) <= b.len) {
    std::memcpy(&h, b.data + slot.pending_pos, sizeof(h));
    Sample smp;
    if (h.size >= sizeof(h) && slot.pending_pos + h.size <= b.len &&
        ParseSample(b.data + slot.pending_pos, h.size, &smp))
      slot.pending_n = UnwindSample(smp, true, slot.pending_pcs);
  }
  slot.pending_unwound = true;
}

// `b` is the batch holding the switch sample, or null once it was unwound.
void EndBlock(Slot& slot, const Batch* b, uint64_t end_time) {
  Counters& c = g_perf->counters;
  if (slot.pending_preempted) {
    c.preempted++;
  } else if (end_time < slot.pending_time || end_time - slot.pending_time < g_perf->opts.offcpu_min_ns) {
    c.short_blocks++;  // never unwound: most switches are short
  } else {
    if (!slot.pending_unwound && b) UnwindPending(slot, *b);
    if (slot.pending_n > 0) {
      QueueOffCpuSample(slot.pending_time, static_cast<uint32_t>(slot.tid), slot.pending_pcs, slot.pending_n,
                        end_time - slot.pending_time, "switch",
                        static_cast<uint32_t>(std::min<uint64_t>(slot.pending_weight, UINT32_MAX)));
      c.offcpu_emitted++;
    }
  }
  slot.pending = false;
}

void OnSwitchSample(Slot& slot, uint64_t pos, const Sample& s) {
  g_perf->counters.switch_samples++;
  slot.pending = true;
  slot.pending_preempted = false;
  slot.pending_unwound = false;
  slot.pending_pos = pos;
  slot.pending_time = s.time;
  slot.pending_weight = SwitchSampleWeight(slot, s.period);
}

void OnSwitchRecord(Slot& slot, const Batch& b, const perf_event_header& h, const uint8_t* rec) {
  uint64_t time = 0;
  uint32_t tid = 0;
  if (h.misc & PERF_RECORD_MISC_SWITCH_OUT) {
    slot.tune_outs++;  // the thinning's rate measure
    g_perf->counters.switch_outs++;
  }
  if (!ParseTrailer(rec, h.size, &time, &tid) || !slot.pending) return;
  if (h.misc & PERF_RECORD_MISC_SWITCH_OUT) {
    if (h.misc & PERF_RECORD_MISC_SWITCH_OUT_PREEMPT) slot.pending_preempted = true;
  } else {
    EndBlock(slot, &b, time);
  }
}

}  // namespace flightrec::sampler::perf
