// Core events: see core_events.h.
#include "preload/runtime/core_events.h"

#include <errno.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "preload/runtime/clock.h"
#include "preload/runtime/config.h"
#include "preload/runtime/features.h"
#include "preload/fds/fd_guard.h"
#include "preload/threads/record_kinds.h"
#include "preload/runtime/redaction.h"
#include "preload/threads/thread_records.h"
#include "preload/threads/thread_registry.h"
#include "preload/stacks/demangle.h"

namespace flightrec {

namespace {

using format::FieldType;
using format::Value;

uint32_t type_process_start, type_process_env, type_rusage, type_thread_start, type_thread_name, type_thread_end;

std::string ReadSmallFile(const char* path, size_t max) {
  std::string out;
  int fd = OpenTransientFd(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[4096];
  while (out.size() < max) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  CloseTransientFd(fd);
  if (out.size() > max) out.resize(max);
  return out;
}

std::string Bounded(const char* s, size_t n) { return std::string(s, strnlen(s, n)); }

// A thread's start routine by name: the dynamic symbol table, else the full
// symbolizer (a program's own static functions, such as cgo's threadentry,
// are only in .symtab or DWARF), else the address.
std::string SymbolFor(uint64_t addr) {
  if (!addr) return "";
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(addr), &info) != 0 && info.dli_sname) return stacks::Demangle(info.dli_sname);
  if (SamplerPcDescriber) {
    format::MappingInfo mapping;
    std::vector<format::FrameLine> lines;
    if (format::PcDescriber* d = SamplerPcDescriber();
        d && d->Describe(addr, &mapping, &lines) && !lines.empty() && !lines.back().function.empty())
      return lines.back().function;  // the outermost frame: the function itself, not one inlined into it
  }
  char hex[32];
  snprintf(hex, sizeof(hex), "0x%llx", static_cast<unsigned long long>(addr));
  return hex;
}

void EmitThreadStart(FlushContext& ctx, const RecordHeader&, const void* payload) {
  const auto* r = static_cast<const ThreadStartRecord*>(payload);
  const std::string name = Bounded(r->name, sizeof(r->name));
  const std::string routine = SymbolFor(r->start_routine);
  Value v[] = {Value::U(r->time_ns), Value::U(static_cast<uint64_t>(r->tid)),
               Value::U(static_cast<uint64_t>(r->parent_tid)), Value::Str(name), Value::Str(routine)};
  ctx.writer->Append(type_thread_start, v, 5);
}

void EmitThreadEnd(FlushContext& ctx, const RecordHeader&, const void* payload) {
  const auto* r = static_cast<const ThreadEndRecord*>(payload);
  const std::string name = Bounded(r->name, sizeof(r->name));
  Value v[] = {Value::U(r->time_ns), Value::U(static_cast<uint64_t>(r->tid)), Value::Str(name)};
  ctx.writer->Append(type_thread_end, v, 3);
}

void EmitThreadName(FlushContext& ctx, const RecordHeader&, const void* payload) {
  const auto* r = static_cast<const ThreadNameRecord*>(payload);
  const std::string name = Bounded(r->name, sizeof(r->name));
  if (ctx.thread) memcpy(ctx.thread->name, r->name, sizeof(ctx.thread->name));
  Value v[] = {Value::U(r->time_ns), Value::U(static_cast<uint64_t>(r->tid)), Value::Str(name)};
  ctx.writer->Append(type_thread_name, v, 3);
}

uint64_t TvNs(const timeval& tv) {
  return static_cast<uint64_t>(tv.tv_sec) * 1000000000ull + static_cast<uint64_t>(tv.tv_usec) * 1000ull;
}

// The service name, computed once when the image starts and kept for its
// forked children: by the time a child starts, the program may have
// rewritten argv[0] to a process title ("nginx: worker process"). An exec'd
// image loads the preload afresh and computes its own.
const std::string& StartupServiceName(const std::string& exe) {
  static const std::string* name = nullptr;
  if (name) return *name;
  std::string s = GetConfig().service;
  if (s.empty()) {
    // The name it was started by (argv[0]), not the resolved executable:
    // /usr/bin/redis-server is a symlink to redis-check-rdb.
    s = program_invocation_short_name ? program_invocation_short_name : "";
    if (s.empty()) {
      const size_t slash = exe.rfind('/');
      s = slash == std::string::npos ? exe : exe.substr(slash + 1);
    }
    if (s.empty()) s = "unknown";
  }
  name = new std::string(std::move(s));
  return *name;
}

}  // namespace

ProcessInfo ForkedChildProcessInfo() {
  ProcessInfo p;
  p.pid = static_cast<uint32_t>(getpid());
  p.ppid = static_cast<uint32_t>(getppid());
  p.realtime_ns = RealtimeNs();
  p.monotonic_ns = MonotonicNs();
  p.details_pending = true;
  return p;
}

void CollectProcessDetails(ProcessInfo* p) {
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) p->exe.assign(exe, static_cast<size_t>(n));
  if (GetConfig().record_cmdline) p->cmdline = CmdlineForTrace(ReadSmallFile("/proc/self/cmdline", 8192));
  if (GetConfig().record_env) p->env = EnvironmentForTrace(ReadSmallFile("/proc/self/environ", 65536));
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) == 0) p->hostname = host;
  p->service = StartupServiceName(p->exe);
  p->details_pending = false;
}

ProcessInfo CollectProcessInfo() {
  ProcessInfo p;
  p.pid = static_cast<uint32_t>(getpid());
  p.ppid = static_cast<uint32_t>(getppid());
  CollectProcessDetails(&p);
  p.realtime_ns = RealtimeNs();
  p.monotonic_ns = MonotonicNs();
  return p;
}

void RegisterCoreEvents() {
  const FieldType U = FieldType::kUInt, T = FieldType::kTime, S = FieldType::kString;
  type_process_start = DefineEventType({"process.start",
                                        {{"time", T, "ns"},
                                         {"pid", U, ""},
                                         {"ppid", U, ""},
                                         {"exe", S, ""},
                                         {"cmdline", S, ""},
                                         {"hostname", S, ""},
                                         {"service", S, ""},
                                         {"realtime_ns", U, "ns"},
                                         {"monotonic_ns", U, "ns"},
                                         {"alloc_sample_bytes", U, "bytes"},
                                         {"cpu_hz", U, "Hz"},
                                         {"sampler", S, ""}}});
  type_process_env = DefineEventType({"process.env", {{"time", T, "ns"}, {"name", S, ""}, {"value", S, ""}}});
  type_rusage = DefineEventType({"process.rusage",
                                 {{"time", T, "ns"},
                                  {"utime_ns", U, "ns"},
                                  {"stime_ns", U, "ns"},
                                  {"maxrss_kb", U, "KiB"},
                                  {"minflt", U, "count"},
                                  {"majflt", U, "count"},
                                  {"nvcsw", U, "count"},
                                  {"nivcsw", U, "count"}}});
  type_thread_start = DefineEventType(
      {"thread.start",
       {{"time", T, "ns"}, {"tid", U, ""}, {"parent_tid", U, ""}, {"name", S, ""}, {"start_routine", S, ""}}});
  type_thread_name = DefineEventType({"thread.name", {{"time", T, "ns"}, {"tid", U, ""}, {"name", S, ""}}});
  type_thread_end = DefineEventType({"thread.end", {{"time", T, "ns"}, {"tid", U, ""}, {"name", S, ""}}});
  TheDropLedger().SetEventType(DefineEventType(DropLedger::EventSpec()));  // recorder.dropped
  RegisterRecordKind(kRecThreadStart, "thread.start", EmitThreadStart);
  RegisterRecordKind(kRecThreadEnd, "thread.end", EmitThreadEnd);
  RegisterRecordKind(kRecThreadName, "thread.name", EmitThreadName);
}

void EmitProcessStart(format::SegmentWriter* writer, const ProcessInfo& p, uint64_t now_ns) {
  const Config& cfg = GetConfig();
  Value v[] = {Value::U(now_ns),         Value::U(p.pid),
               Value::U(p.ppid),         Value::Str(p.exe),
               Value::Str(p.cmdline),    Value::Str(p.hostname),
               Value::Str(p.service),    Value::U(p.realtime_ns),
               Value::U(p.monotonic_ns), Value::U(cfg.alloc_sample_bytes),
               Value::U(cfg.cpu_hz),     Value::Str(p.sampler)};
  writer->Append(type_process_start, v, 12);
  for (const auto& [name, value] : p.env) {
    Value e[] = {Value::U(now_ns), Value::Str(name), Value::Str(value)};
    writer->Append(type_process_env, e, 3);
  }
}

void EmitRusage(FlushContext& ctx) {
  rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0) return;
  Value v[] = {Value::U(ctx.now_ns),
               Value::U(TvNs(ru.ru_utime)),
               Value::U(TvNs(ru.ru_stime)),
               Value::U(static_cast<uint64_t>(ru.ru_maxrss)),
               Value::U(static_cast<uint64_t>(ru.ru_minflt)),
               Value::U(static_cast<uint64_t>(ru.ru_majflt)),
               Value::U(static_cast<uint64_t>(ru.ru_nvcsw)),
               Value::U(static_cast<uint64_t>(ru.ru_nivcsw))};
  ctx.writer->Append(type_rusage, v, 8);
}

void EmitThreadEndIfDropped(FlushContext& ctx, ThreadState* ts) {
  if (!ts->end_dropped) return;
  ts->end_dropped = false;
  const std::string name = Bounded(ts->name, sizeof(ts->name));
  Value v[] = {Value::U(ctx.now_ns), Value::U(static_cast<uint64_t>(ts->tid)), Value::Str(name)};
  ctx.writer->Append(type_thread_end, v, 3);
}

void RefreshThreadName(FlushContext& ctx, ThreadState* ts, uint64_t now) {
  if (ts->state.load(std::memory_order_acquire) != static_cast<int>(ThreadSlotState::kActive)) return;
  char path[64];
  snprintf(path, sizeof(path), "/proc/self/task/%d/comm", ts->tid);
  std::string comm = ReadSmallFile(path, 16);
  while (!comm.empty() && comm.back() == '\n') comm.pop_back();
  if (comm.empty() || comm == Bounded(ts->name, sizeof(ts->name))) return;
  memset(ts->name, 0, sizeof(ts->name));
  memcpy(ts->name, comm.data(), comm.size() < 15 ? comm.size() : 15);
  Value v[] = {Value::U(now), Value::U(static_cast<uint64_t>(ts->tid)), Value::Str(comm)};
  ctx.writer->Append(type_thread_name, v, 3);
}

}  // namespace flightrec
