// Sample events (see sample_events.h).
#include "sampler/sample_events.h"

#include "format/segment_writer.h"

namespace flightrec::sampler {
namespace {

using format::FieldType;
using format::Value;

uint32_t g_cpu_sample = 0, g_offcpu_sample = 0, g_lost = 0;

}  // namespace

void RegisterSampleEvents() {
  if (g_cpu_sample) return;
  const FieldType T = FieldType::kTime, U = FieldType::kUInt, S = FieldType::kString,
                  K = FieldType::kStack;
  g_cpu_sample = DefineEventType(
      {"cpu.sample", {{"time", T, "ns"}, {"tid", U, ""}, {"stack", K, ""}, {"period_ns", U, "ns"}}});
  g_offcpu_sample = DefineEventType({"offcpu.sample",
                                     {{"time", T, "ns"},
                                      {"tid", U, ""},
                                      {"stack", K, ""},
                                      {"duration_ns", U, "ns"},
                                      {"reason", S, ""}}});
  g_lost = DefineEventType({"sampler.lost", {{"time", T, "ns"}, {"tid", U, ""}, {"count", U, "count"}}});
}

void EmitCpuSample(FlushContext& ctx, uint64_t time_ns, uint32_t tid, const uint64_t* pcs, int npcs,
                   uint64_t period_ns) {
  if (!g_cpu_sample || !ctx.writer) return;
  const Value v[] = {Value::U(time_ns), Value::U(tid), Value::Stack(pcs, static_cast<uint32_t>(npcs)),
                     Value::U(period_ns)};
  ctx.writer->Append(g_cpu_sample, v, 4);
}

void EmitOffCpuSample(FlushContext& ctx, uint64_t time_ns, uint32_t tid, const uint64_t* pcs, int npcs,
                      uint64_t duration_ns, const char* reason) {
  if (!g_offcpu_sample || !ctx.writer) return;
  const Value v[] = {Value::U(time_ns), Value::U(tid), Value::Stack(pcs, static_cast<uint32_t>(npcs)),
                     Value::U(duration_ns), Value::Str(reason ? reason : "")};
  ctx.writer->Append(g_offcpu_sample, v, 5);
}

void EmitSamplerLost(FlushContext& ctx, uint64_t time_ns, uint32_t tid, uint64_t count) {
  if (!g_lost || !ctx.writer || count == 0) return;
  const Value v[] = {Value::U(time_ns), Value::U(tid), Value::U(count)};
  ctx.writer->Append(g_lost, v, 3);
}

}  // namespace flightrec::sampler
