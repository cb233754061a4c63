// Allocation events: schema and flush-side decoders (see alloc_events.h).
// Runs on the flush thread; records come from our own hooks but are still
// bounds-checked, since a torn or foreign record must never crash the host.
#include "preload/alloc/alloc_events.h"

#include "preload/flush/flush_registry.h"
#include "preload/threads/record_kinds.h"
#include "preload/threads/thread_registry.h"

namespace flightrec::alloc {
namespace {

using format::FieldType;
using format::Value;

uint32_t t_sample = 0;
uint32_t t_free = 0;

void DecodeSample(FlushContext& ctx, const RecordHeader& h, const void* payload) {
  if (h.size < sizeof(RecordHeader) + AllocSampleRecordBytes(0)) return;
  const auto* r = static_cast<const AllocSampleRecord*>(payload);
  const uint32_t room = (h.size - sizeof(RecordHeader) - AllocSampleRecordBytes(0)) / sizeof(uint64_t);
  uint32_t npcs = r->npcs;
  if (npcs > room) npcs = room;
  if (npcs > kMaxAllocFrames) npcs = kMaxAllocFrames;
  const uint64_t tid = ctx.thread ? static_cast<uint64_t>(ctx.thread->tid) : 0;
  Value v[] = {Value::U(r->time_ns), Value::U(tid), Value::U(r->address), Value::U(r->size),
               Value::Stack(r->pcs, npcs), Value::U(r->sample_bytes)};
  ctx.writer->Append(t_sample, v, 6);
}

void DecodeFree(FlushContext& ctx, const RecordHeader& h, const void* payload) {
  if (h.size < sizeof(RecordHeader) + sizeof(AllocFreeRecord)) return;
  const auto* r = static_cast<const AllocFreeRecord*>(payload);
  const uint64_t tid = ctx.thread ? static_cast<uint64_t>(ctx.thread->tid) : 0;
  Value v[] = {Value::U(r->time_ns), Value::U(tid), Value::U(r->address)};
  ctx.writer->Append(t_free, v, 3);
}

}  // namespace

void RegisterAllocEvents() {
  const FieldType T = FieldType::kTime, U = FieldType::kUInt, K = FieldType::kStack;
  t_sample = DefineEventType({"alloc.sample",
                              {{"time", T, "ns"},
                               {"tid", U, ""},
                               {"address", U, ""},
                               {"size", U, "bytes"},
                               {"stack", K, ""},
                               {"sample_bytes", U, "bytes"}}});
  t_free = DefineEventType({"alloc.free", {{"time", T, "ns"}, {"tid", U, ""}, {"address", U, ""}}});
  RegisterRecordKind(kRecAllocSample, "alloc.sample", DecodeSample);
  RegisterRecordKind(kRecAllocFree, "alloc.free", DecodeFree);
}

}  // namespace flightrec::alloc
