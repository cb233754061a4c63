// Off-CPU from interposed blocking calls (see offcpu_blocking.h): the ring
// record, its capture on the app thread and its decoding on the flush thread.
#include "sampler/offcpu_blocking.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>

#include "preload/threads/record_kinds.h"
#include "preload/threads/thread_registry.h"
#include "preload/stacks/local_stack.h"
#include "sampler/sample_events.h"

namespace flightrec::sampler {

uint64_t g_offcpu_min_ns = 1000000;

namespace {

struct OffCpuBlockRecord {
  uint64_t start_ns;
  uint64_t duration_ns;
  const char* reason;  // static storage, same process
  int32_t tid;
  uint32_t npcs;
  uint64_t pcs[];
};

void DecodeOffCpuBlock(FlushContext& ctx, const RecordHeader& h, const void* payload) {
  const size_t body = h.size - sizeof(RecordHeader);
  if (body < sizeof(OffCpuBlockRecord)) return;
  const auto* r = static_cast<const OffCpuBlockRecord*>(payload);
  const uint32_t max = static_cast<uint32_t>((body - sizeof(OffCpuBlockRecord)) / sizeof(uint64_t));
  const uint32_t n = r->npcs < max ? r->npcs : max;
  EmitOffCpuSample(ctx, r->start_ns, static_cast<uint32_t>(r->tid), r->pcs, static_cast<int>(n), r->duration_ns,
                   r->reason);
}

}  // namespace

__attribute__((noinline)) void OffCpuNoteBlock(uint64_t start_ns, uint64_t end_ns, const char* reason, int extra_skip) {
  if (end_ns < start_ns || end_ns - start_ns < g_offcpu_min_ns) return;
  ThreadState* ts = CurrentThreadState(IfUnregistered::kSkip);
  if (!ts) return;
  uint64_t pcs[kMaxFrames];
  // skip=1: drop this function; frame 0 is the hook (named like the call).
  const int n = stacks::CaptureCurrentStack(pcs, kMaxFrames, 1 + extra_skip, stacks::MarkTruncated::kYes);
  RecordWriter w(kRecOffCpuBlock, static_cast<uint32_t>(sizeof(OffCpuBlockRecord) + n * sizeof(uint64_t)),
                 IfUnregistered::kSkip);
  if (!w.ok()) {  // counted by the writer; its time survives (offcpu.unattributed)
    ts->offcpu_dropped.Add(end_ns - start_ns);
    return;
  }
  auto* r = static_cast<OffCpuBlockRecord*>(w.data());
  r->start_ns = start_ns;
  r->duration_ns = end_ns - start_ns;
  r->reason = reason;
  r->tid = ts->tid;
  r->npcs = static_cast<uint32_t>(n);
  std::memcpy(r->pcs, pcs, static_cast<size_t>(n) * sizeof(uint64_t));
}

void SetThreadOffCpuHooks(bool on) { t_block_notes = on; }

void RegisterOffCpuDecoding() {
  RegisterRecordKind(kRecOffCpuBlock, "offcpu.sample", DecodeOffCpuBlock);
  RegisterBlockNote(OffCpuNoteBlock);
}

}  // namespace flightrec::sampler
