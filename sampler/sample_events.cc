// Sample events and the sampler -> flush queue (see sample_events.h).
//
// Queue invariants: producers (the sampler thread) append under `mu`; the
// flush thread swaps the whole batch out under `mu` and appends to the
// writer outside it, so the lock is never held across symbolization.
#include "sampler/sample_events.h"

#include <pthread.h>

#include <atomic>
#include <new>

#include "format/mi_containers.h"
#include "format/segment_writer.h"
#include "preload/flush/drop_ledger.h"
#include "preload/runtime/core_events.h"
#include "preload/threads/thread_registry.h"

namespace flightrec::sampler {
namespace {

using format::FieldType;
using format::MiVector;
using format::Value;

uint32_t g_cpu_sample = 0, g_offcpu_sample = 0, g_lost = 0, g_offcpu_unattributed = 0;

enum class Kind : uint8_t { kCpu, kOffCpu, kLost };

struct Item {
  Kind kind;
  uint32_t tid;
  uint32_t npcs;
  uint32_t weight;  // off-CPU: blocks the sample stands for (1 unless switch sampling is thinned)
  uint64_t time_ns;
  uint64_t value;  // period_ns, duration_ns or count
  const char* reason;
  size_t first_pc;  // index into the batch's pcs
};

struct Batch {
  MiVector<Item> items;
  MiVector<uint64_t> pcs;
};

// Bounds on what may wait for the flush thread (~40 MB of pcs at most).
constexpr size_t kMaxQueuedItems = 1 << 18;
constexpr size_t kMaxQueuedPcs = 5u << 20;

struct Queue {
  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  Batch pending;                      // guarded by mu
  Batch draining;                     // flush thread only
  std::atomic<uint64_t> overflow{0};  // CPU samples (and lost counts) refused because the queue was full
  // Off-CPU samples refused: their blocks and time (duration x weight) survive.
  DroppedTime offcpu_overflow;
  std::atomic<uint64_t> offered{0};  // every Push, queued or refused (SamplesOffered)
  uint64_t overflow_reported = 0;    // flush thread only
};

Queue* g_queue = nullptr;

void Push(Kind kind, uint64_t time_ns, uint32_t tid, const uint64_t* pcs, int npcs, uint64_t value, const char* reason,
          uint32_t weight = 1) {
  Queue* q = g_queue;
  if (!q) return;
  if (npcs < 0) npcs = 0;
  if (npcs > kMaxFrames) npcs = kMaxFrames;
  q->offered.fetch_add(1, std::memory_order_relaxed);
  pthread_mutex_lock(&q->mu);
  Batch& b = q->pending;
  if (b.items.size() >= kMaxQueuedItems || b.pcs.size() + static_cast<size_t>(npcs) > kMaxQueuedPcs) {
    pthread_mutex_unlock(&q->mu);
    if (kind == Kind::kOffCpu) q->offcpu_overflow.Add(value * (weight ? weight : 1));
    else q->overflow.fetch_add(kind == Kind::kLost ? value : 1, std::memory_order_relaxed);
    return;
  }
  b.items.push_back(Item{kind, tid, static_cast<uint32_t>(npcs), weight, time_ns, value, reason, b.pcs.size()});
  b.pcs.insert(b.pcs.end(), pcs, pcs + npcs);
  pthread_mutex_unlock(&q->mu);
}

void QueueFlushSource(FlushContext& ctx) {
  Queue* q = g_queue;
  if (!q) return;
  pthread_mutex_lock(&q->mu);
  std::swap(q->pending, q->draining);
  pthread_mutex_unlock(&q->mu);
  Batch& b = q->draining;
  ctx.work += b.items.size();
  for (const Item& it : b.items) {
    const uint64_t* pcs = b.pcs.data() + it.first_pc;
    switch (it.kind) {
      case Kind::kCpu: EmitCpuSample(ctx, it.time_ns, it.tid, pcs, static_cast<int>(it.npcs), it.value); break;
      case Kind::kOffCpu:
        EmitOffCpuSample(ctx, it.time_ns, it.tid, pcs, static_cast<int>(it.npcs), it.value, it.reason, it.weight);
        break;
      case Kind::kLost: EmitSamplerLost(ctx, it.time_ns, it.tid, it.value); break;
    }
  }
  b.items.clear();
  b.pcs.clear();
  // Reported as sampler.lost (EmitSamplerLost writes nothing for zero).
  EmitSamplerLost(ctx, ctx.now_ns, 0,
                  DropLedger::Growth(q->overflow.load(std::memory_order_relaxed), &q->overflow_reported));
  // Counted as drops too (info), as a ring's refusal is by the RecordWriter.
  EmitGlobalDrops(ctx, "offcpu.sample", EmitOffCpuUnattributed(ctx, 0, q->offcpu_overflow));
}

// After each drain of a thread's ring: the blocks it dropped meanwhile.
void HarvestThreadOffCpuDrops(FlushContext& ctx) {
  if (ctx.thread) EmitOffCpuUnattributed(ctx, static_cast<uint32_t>(ctx.thread->tid), ctx.thread->offcpu_dropped);
}

}  // namespace

uint64_t SamplesOffered() {
  const Queue* q = g_queue;
  return q ? q->offered.load(std::memory_order_relaxed) : 0;
}

void RegisterSampleEvents() {
  if (g_cpu_sample) return;
  const FieldType T = FieldType::kTime, U = FieldType::kUInt, S = FieldType::kString, K = FieldType::kStack;
  g_cpu_sample =
      DefineEventType({"cpu.sample", {{"time", T, "ns"}, {"tid", U, ""}, {"stack", K, ""}, {"period_ns", U, "ns"}}});
  g_offcpu_sample = DefineEventType({"offcpu.sample",
                                     {{"time", T, "ns"},
                                      {"tid", U, ""},
                                      {"stack", K, ""},
                                      {"duration_ns", U, "ns"},
                                      {"reason", S, ""},
                                      {"weight", U, "count"}}});
  g_lost = DefineEventType({"sampler.lost", {{"time", T, "ns"}, {"tid", U, ""}, {"count", U, "count"}}});
  g_offcpu_unattributed = DefineEventType(
      {"offcpu.unattributed", {{"time", T, "ns"}, {"tid", U, ""}, {"samples", U, "count"}, {"duration_ns", U, "ns"}}});
  RegisterThreadDrainedHook(HarvestThreadOffCpuDrops);
  void* mem = mi_malloc(sizeof(Queue));
  if (mem) {
    g_queue = new (mem) Queue();
    RegisterFlushSource(QueueFlushSource);
  }
}

void EmitCpuSample(FlushContext& ctx, uint64_t time_ns, uint32_t tid, const uint64_t* pcs, int npcs,
                   uint64_t period_ns) {
  if (!g_cpu_sample || !ctx.writer) return;
  const Value v[] = {Value::U(time_ns), Value::U(tid), Value::Stack(pcs, static_cast<uint32_t>(npcs)),
                     Value::U(period_ns)};
  ctx.writer->Append(g_cpu_sample, v, 4);
}

void EmitOffCpuSample(FlushContext& ctx, uint64_t time_ns, uint32_t tid, const uint64_t* pcs, int npcs,
                      uint64_t duration_ns, const char* reason, uint32_t weight) {
  if (!g_offcpu_sample || !ctx.writer) return;
  const Value v[] = {Value::U(time_ns),
                     Value::U(tid),
                     Value::Stack(pcs, static_cast<uint32_t>(npcs)),
                     Value::U(duration_ns),
                     Value::Str(reason ? reason : ""),
                     Value::U(weight ? weight : 1)};
  ctx.writer->Append(g_offcpu_sample, v, 6);
}

void EmitSamplerLost(FlushContext& ctx, uint64_t time_ns, uint32_t tid, uint64_t count) {
  if (!g_lost || !ctx.writer || count == 0) return;
  const Value v[] = {Value::U(time_ns), Value::U(tid), Value::U(count)};
  ctx.writer->Append(g_lost, v, 3);
}

uint64_t EmitOffCpuUnattributed(FlushContext& ctx, uint32_t tid, DroppedTime& d) {
  // Two loads when nothing was dropped: this runs for every drained thread.
  if (d.samples.load(std::memory_order_relaxed) == d.samples_reported &&
      d.ns.load(std::memory_order_relaxed) == d.ns_reported)
    return 0;
  const DroppedTime::Delta delta = d.Harvest();
  if (!g_offcpu_unattributed || !ctx.writer) return delta.samples;
  const Value v[] = {Value::U(ctx.now_ns), Value::U(tid), Value::U(delta.samples), Value::U(delta.ns)};
  ctx.writer->Append(g_offcpu_unattributed, v, 4);
  return delta.samples;
}

void QueueCpuSample(uint64_t time_ns, uint32_t tid, const uint64_t* pcs, int npcs, uint64_t period_ns) {
  Push(Kind::kCpu, time_ns, tid, pcs, npcs, period_ns, nullptr);
}

void QueueOffCpuSample(uint64_t time_ns, uint32_t tid, const uint64_t* pcs, int npcs, uint64_t duration_ns,
                       const char* reason, uint32_t weight) {
  Push(Kind::kOffCpu, time_ns, tid, pcs, npcs, duration_ns, reason, weight);
}

void QueueSamplerLost(uint64_t time_ns, uint32_t tid, uint64_t count) {
  if (count) Push(Kind::kLost, time_ns, tid, nullptr, 0, count, nullptr);
}

void ResetSampleQueueAfterFork() {
  if (!g_queue) return;
  // The old queue (and its lock) is abandoned; its memory is leaked.
  void* mem = mi_malloc(sizeof(Queue));
  g_queue = mem ? new (mem) Queue() : nullptr;
}

}  // namespace flightrec::sampler
