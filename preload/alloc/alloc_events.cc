// Allocation events: schema and flush-side decoders (see alloc_events.h).
// Runs on the flush thread; records come from our own hooks but are still
// bounds-checked, since a torn or foreign record must never crash the host.
#include "preload/alloc/alloc_events.h"
#include "preload/alloc/stack_refs.h"

#include "preload/flush/drop_ledger.h"
#include "preload/flush/flush_registry.h"
#include "preload/runtime/core_events.h"
#include "preload/threads/record_kinds.h"
#include "preload/threads/thread_registry.h"

namespace flightrec::alloc {
namespace {

using format::FieldType;
using format::Value;

uint32_t type_sample = 0;
uint32_t type_free = 0;
uint32_t type_unattributed = 0;

// References whose stack the thread's table did not hold (flush thread only):
// written with no stack, their weight kept; reported as alloc.stack_unknown.
uint64_t g_refs_unknown = 0, g_refs_unknown_reported = 0;

// The drained thread's table of pushed stacks (stack_refs.h), made on first
// use and forgotten when the slot has a new owner. Null without a thread or memory.
StackRefTable* StacksOf(FlushContext& ctx) {
  ThreadState* ts = ctx.thread;
  if (!ts) return nullptr;
  StackRefTable*& table = StackTableOf(ts);
  if (!table) table = StackRefTable::Create(kMaxAllocFrames);
  if (table) table->SyncGeneration(ts->generation);
  return table;
}

// A full sample record, bounds-checked: its frames (clamped to what the
// record holds), remembered for later references. False: not a sample.
bool LearnSample(FlushContext& ctx, const RecordHeader& h, const void* payload, uint32_t* npcs_out) {
  if (h.size < sizeof(RecordHeader) + AllocSampleRecordBytes(0)) return false;
  const auto* r = static_cast<const AllocSampleRecord*>(payload);
  const uint32_t room = (h.size - sizeof(RecordHeader) - AllocSampleRecordBytes(0)) / sizeof(uint64_t);
  uint32_t npcs = r->npcs;
  if (npcs > room) npcs = room;
  if (npcs > kMaxAllocFrames) npcs = kMaxAllocFrames;
  if (r->stack_hash)
    if (StackRefTable* t = StacksOf(ctx)) t->Learn(r->stack_hash, r->pcs, npcs, r->sample_bytes);
  *npcs_out = npcs;
  return true;
}

void DecodeSample(FlushContext& ctx, const RecordHeader& h, const void* payload) {
  uint32_t npcs = 0;
  if (!LearnSample(ctx, h, payload, &npcs)) return;
  const auto* r = static_cast<const AllocSampleRecord*>(payload);
  const uint64_t tid = ctx.thread ? static_cast<uint64_t>(ctx.thread->tid) : 0;
  Value v[] = {Value::U(r->time_ns),       Value::U(tid),
               Value::U(r->address),       Value::U(r->size),
               Value::Stack(r->pcs, npcs), Value::U(r->sample_bytes)};
  ctx.writer->Append(type_sample, v, 6);
}

// No segment open: the sample is lost, but later references may need its stack.
void DiscardSample(FlushContext& ctx, const RecordHeader& h, const void* payload) {
  uint32_t npcs = 0;
  LearnSample(ctx, h, payload, &npcs);
}

void DecodeSampleRef(FlushContext& ctx, const RecordHeader& h, const void* payload) {
  if (h.size < sizeof(RecordHeader) + sizeof(AllocSampleRefRecord)) return;
  const auto* r = static_cast<const AllocSampleRefRecord*>(payload);
  const StackRefTable* t = StacksOf(ctx);
  const StackRefTable::Entry* e = t ? t->Find(r->stack_hash) : nullptr;
  if (!e) g_refs_unknown++;
  const uint64_t tid = ctx.thread ? static_cast<uint64_t>(ctx.thread->tid) : 0;
  Value v[] = {Value::U(r->time_ns),
               Value::U(tid),
               Value::U(r->address),
               Value::U(r->size),
               e ? Value::Stack(e->pcs, e->npcs) : Value::Stack(nullptr, 0),
               Value::U(e ? e->extra : 0)};
  ctx.writer->Append(type_sample, v, 6);
}

void DecodeFree(FlushContext& ctx, const RecordHeader& h, const void* payload) {
  if (h.size < sizeof(RecordHeader) + sizeof(AllocFreeRecord)) return;
  const auto* r = static_cast<const AllocFreeRecord*>(payload);
  const uint64_t tid = ctx.thread ? static_cast<uint64_t>(ctx.thread->tid) : 0;
  Value v[] = {Value::U(r->time_ns), Value::U(tid), Value::U(r->address)};
  ctx.writer->Append(type_free, v, 3);
}

// After each drain of a thread's ring (and before a retired slot is freed):
// the weight of the samples it dropped meanwhile.
void HarvestThreadDroppedWeight(FlushContext& ctx) {
  if (ctx.thread) EmitDroppedWeight(ctx, ctx.thread->alloc_dropped, static_cast<uint64_t>(ctx.thread->tid));
  TheDropLedger().ReportGrowth(ctx, "alloc.stack_unknown", g_refs_unknown, &g_refs_unknown_reported);
}

}  // namespace

void EmitDroppedWeight(FlushContext& ctx, DroppedWeight& d, uint64_t tid) {
  // One load when nothing was dropped: this runs for every drained thread.
  if (d.samples.load(std::memory_order_relaxed) == d.samples_reported &&
      d.bytes.load(std::memory_order_relaxed) == d.bytes_reported)
    return;
  const DroppedWeight::Delta delta = d.Harvest();
  if (!ctx.writer || !type_unattributed) return;
  Value v[] = {Value::U(ctx.now_ns), Value::U(tid), Value::U(delta.samples), Value::F(delta.bytes),
               Value::F(delta.objects)};
  ctx.writer->Append(type_unattributed, v, 5);
}

void RegisterAllocEvents() {
  const FieldType T = FieldType::kTime, U = FieldType::kUInt, K = FieldType::kStack;
  type_sample = DefineEventType({"alloc.sample",
                                 {{"time", T, "ns"},
                                  {"tid", U, ""},
                                  {"address", U, ""},
                                  {"size", U, "bytes"},
                                  {"stack", K, ""},
                                  {"sample_bytes", U, "bytes"}}});
  type_free = DefineEventType({"alloc.free", {{"time", T, "ns"}, {"tid", U, ""}, {"address", U, ""}}});
  const FieldType F = FieldType::kF64;
  type_unattributed = DefineEventType(
      {"alloc.unattributed",
       {{"time", T, "ns"}, {"tid", U, ""}, {"samples", U, "count"}, {"bytes", F, "bytes"}, {"count", F, "count"}}});
  RegisterThreadDrainedHook(HarvestThreadDroppedWeight);
  RegisterRecordKind(kRecAllocSample, "alloc.sample", DecodeSample, DiscardSample);
  RegisterRecordKind(kRecAllocSampleRef, "alloc.sample", DecodeSampleRef);
  RegisterRecordKind(kRecAllocFree, "alloc.free", DecodeFree);
}

}  // namespace flightrec::alloc
