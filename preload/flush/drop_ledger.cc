// Drop ledger: see drop_ledger.h.
#include "preload/flush/drop_ledger.h"

#include "preload/threads/thread_registry.h"

namespace flightrec {
namespace {
constexpr const char kFooterPrefix[] = "dropped.";
constexpr size_t kPrefix = sizeof(kFooterPrefix) - 1;
}  // namespace

format::EventTypeSpec DropLedger::EventSpec() {
  const format::FieldType U = format::FieldType::kUInt, T = format::FieldType::kTime, S = format::FieldType::kString;
  return {"recorder.dropped", {{"time", T, "ns"}, {"tid", U, ""}, {"kind", S, ""}, {"count", U, "count"}}};
}

void DropLedger::Report(FlushContext& ctx, uint64_t tid, const char* kind, uint64_t n) {
  if (!n) return;
  format::Value v[] = {format::Value::U(ctx.now_ns), format::Value::U(tid), format::Value::Str(kind),
                       format::Value::U(n)};
  if (ctx.writer) ctx.writer->Append(type_, v, 4);
  Count(kind, n);
}

void DropLedger::Count(const char* kind, uint64_t n) { footer_[std::string(kFooterPrefix) + kind] += n; }

void DropLedger::ReportThreadDrops(FlushContext& ctx, uint64_t tid, const std::atomic<uint64_t>* dropped,
                                   uint64_t* reported, KindNameFn name_of) {
  for (int k = 0; k < kRecordKindCount; ++k) {
    const uint64_t now = dropped[k].load(std::memory_order_relaxed);
    if (now == reported[k]) continue;
    Report(ctx, tid, name_of(static_cast<uint16_t>(k)), Growth(now, &reported[k]));
  }
}

void DropLedger::ReportThreadDrops(FlushContext& ctx, ThreadState* ts) {
  ReportThreadDrops(ctx, static_cast<uint64_t>(ts->tid), ts->dropped, ts->dropped_reported);
}

void DropLedger::DiscardThreadDrops(const std::atomic<uint64_t>* dropped, uint64_t* reported) {
  for (int k = 0; k < kRecordKindCount; ++k)
    discarded_[k] += Growth(dropped[k].load(std::memory_order_relaxed), &reported[k]);
}

void DropLedger::ReportOutputLosses(FlushContext& ctx, KindNameFn name_of) {
  for (int k = 0; k < kRecordKindCount; ++k) {
    if (!discarded_[k]) continue;
    Report(ctx, 0, name_of(static_cast<uint16_t>(k)), discarded_[k]);
    discarded_[k] = 0;
  }
  if (ctx.writer)
    for (const auto& [type, n] : ctx.writer->TakeLostEvents())
      if (type != "recorder.dropped") Report(ctx, 0, type.c_str(), n);  // their counts are carried
  // Taken before reporting: a report adds to the footer, not to the carry.
  std::map<std::string, uint64_t> carried;
  carried.swap(carried_);
  for (const auto& [kind, n] : carried) Report(ctx, 0, kind.c_str(), n);
}

void DropLedger::Carry(const Totals& totals, bool file_gone, format::SegmentWriter& w) {
  for (const auto& [key, total] : totals) {
    const uint64_t durable = file_gone ? 0 : durable_[key];
    if (total > durable && key.size() > kPrefix) carried_[key.substr(kPrefix)] += total - durable;
  }
  durable_.clear();
  if (file_gone) w.LoseWrittenEvents();
}

void DropLedger::WriteFailed(format::SegmentWriter& w) {
  const Totals totals = Footer();
  footer_.clear();
  Carry(totals, w.file_vanished(), w);
}

void DropLedger::Sealed() {
  footer_.clear();
  durable_.clear();
}

void DropLedger::SealedFileLost(const Totals& sealed_totals, format::SegmentWriter& w) {
  Carry(sealed_totals, true, w);
}

void DropLedger::ResetInForkChild() {
  footer_.clear();
  durable_.clear();
  carried_.clear();
  for (uint64_t& d : discarded_) d = 0;
  unregistered_reported_ = 0;
}

DropLedger& TheDropLedger() {
  static DropLedger* ledger = new DropLedger();  // never destroyed: the flush thread may outlive exit's destructors
  return *ledger;
}

void EmitGlobalDrops(FlushContext& ctx, const char* kind, uint64_t count) {
  TheDropLedger().Report(ctx, 0, kind, count);
}

void AddFooterDrop(const char* kind, uint64_t count) { TheDropLedger().Count(kind, count); }

}  // namespace flightrec
