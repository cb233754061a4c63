// Flush registry: the tables features fill at init (event types, record
// decoders, periodic sources, seal and shutdown hooks) and the flush thread
// reads. Written only during init (single-threaded, before the flush thread
// starts), read only by the flush thread afterwards: no locks needed.
#include "preload/flush/flush_registry.h"

#include <atomic>
#include <cstdint>
#include <vector>

#include "preload/flush/flush_registry_internal.h"
#include "preload/threads/record_kinds.h"

namespace flightrec {
namespace {

struct KindEntry {
  const char* name = nullptr;
  RecordDecodeFn decode = nullptr;
  RecordDecodeFn discard = nullptr;
};

struct Registry {
  std::vector<format::EventTypeSpec> event_types;  // index = id - 1
  KindEntry kinds[kRecordKindCount];
  std::vector<FlushSourceFn> sources;
  std::vector<SealHookFn> seal_hooks;
  std::vector<SealHookFn> ship_hooks;
  std::vector<ShutdownHookFn> shutdown_hooks;
  std::vector<LiveHookFn> live_thread_hooks;
  std::vector<LiveHookFn> live_hooks;
  std::vector<LiveHookFn> final_hooks;
  std::vector<ThreadDrainedFn> drained_hooks;
};

Registry& TheRegistry() {
  static Registry* r = new Registry();  // never destroyed: used during exit
  return *r;
}

}  // namespace

uint32_t DefineEventType(const format::EventTypeSpec& spec) {
  TheRegistry().event_types.push_back(spec);
  return static_cast<uint32_t>(TheRegistry().event_types.size());
}

void RegisterRecordKind(uint16_t kind, const char* name, RecordDecodeFn decode, RecordDecodeFn discard) {
  if (kind >= kRecordKindCount) return;
  TheRegistry().kinds[kind].name = name;
  TheRegistry().kinds[kind].decode = decode;
  TheRegistry().kinds[kind].discard = discard;
}

const char* RecordKindName(uint16_t kind) {
  if (kind < kRecordKindCount && TheRegistry().kinds[kind].name) return TheRegistry().kinds[kind].name;
  return "unknown";
}

void RegisterFlushSource(FlushSourceFn fn) { TheRegistry().sources.push_back(fn); }
void RegisterSealHook(SealHookFn fn) { TheRegistry().seal_hooks.push_back(fn); }
void RegisterShipHook(SealHookFn fn) { TheRegistry().ship_hooks.push_back(fn); }
void RegisterShutdownHook(ShutdownHookFn fn) { TheRegistry().shutdown_hooks.push_back(fn); }
void RegisterLiveHook(LiveHookFn fn) { TheRegistry().live_hooks.push_back(fn); }
void RegisterLiveThreadHook(LiveHookFn fn) { TheRegistry().live_thread_hooks.push_back(fn); }
void RegisterFinalHook(LiveHookFn fn) { TheRegistry().final_hooks.push_back(fn); }
void RegisterThreadDrainedHook(ThreadDrainedFn fn) { TheRegistry().drained_hooks.push_back(fn); }

void DefineAllEventTypes(format::SegmentWriter* writer) {
  for (const auto& spec : TheRegistry().event_types) writer->DefineEventType(spec);
}

RecordDecodeFn DecoderFor(uint16_t kind) {
  return kind < kRecordKindCount ? TheRegistry().kinds[kind].decode : nullptr;
}

RecordDecodeFn DiscarderFor(uint16_t kind) {
  return kind < kRecordKindCount ? TheRegistry().kinds[kind].discard : nullptr;
}

void RunFlushSources(FlushContext& ctx) {
  for (FlushSourceFn fn : TheRegistry().sources) fn(ctx);
}

void RunSealHooks(const std::string& path) {
  for (SealHookFn fn : TheRegistry().seal_hooks) fn(path);
}

void RunShipHooks(const std::string& path) {
  for (SealHookFn fn : TheRegistry().ship_hooks) fn(path);
}

void RunThreadDrainedHooks(FlushContext& ctx) {
  for (ThreadDrainedFn fn : TheRegistry().drained_hooks) fn(ctx);
}

namespace {
std::atomic<uint64_t> g_go_live_within_ns{UINT64_MAX};
}  // namespace

void GoLiveWithin(uint64_t ns) {
  uint64_t cur = g_go_live_within_ns.load(std::memory_order_relaxed);
  while (ns < cur && !g_go_live_within_ns.compare_exchange_weak(cur, ns, std::memory_order_relaxed)) {}
}

uint64_t GoLiveWithinNs() { return g_go_live_within_ns.load(std::memory_order_relaxed); }

void RunLiveThreadHooks() {
  for (LiveHookFn fn : TheRegistry().live_thread_hooks) fn();
}

void RunLiveHooks() {
  for (LiveHookFn fn : TheRegistry().live_hooks) fn();
}

void RunFinalHooks() {
  for (LiveHookFn fn : TheRegistry().final_hooks) fn();
}

void RunShutdownHooks(uint64_t deadline_ns) {
  for (ShutdownHookFn fn : TheRegistry().shutdown_hooks) fn(deadline_ns);
}

}  // namespace flightrec
