// perf_event sampler, ring reading (see perf_sampler.h): the sampler thread
// takes each thread's records out of its mmap ring (in chunks, into one
// batch), parses them, unwinds and queues the CPU samples (sample_events.h),
// hands switch samples and SWITCH records to perf_switch_pairs.cc, counts
// what the kernel lost, and collects the rings exiting threads left behind
// (orphans). Also the exit's last look at rings nobody reads
// (PerfDiscardUnread). Setup and arming are perf_sampler.cc's.
//
// Record layout we ask for (sample_type IDENTIFIER|IP|TID|TIME|PERIOD|
// REGS_USER|STACK_USER, sample_id_all=1), per perf_event_open(2):
//   SAMPLE:  id, ip, pid/tid, time, period, abi, regs[popcount(mask)] (abi != 0),
//            size, data[size], dyn_size (size != 0)
//   others:  ...body..., then the sample_id trailer: pid/tid, time, id
//
// CPU samples weigh their period (cpu-clock nanoseconds), scaled down per
// drained batch where the thread's own CPU time says it had less (steal on a
// VM: cpu_credit.h).
#include <linux/perf_event.h>
#include <mimalloc.h>
#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <ctime>

#include "preload/fds/fd_guard.h"
#include "preload/stacks/stack_unwinder.h"
#include "sampler/perf_sampler.h"
#include "sampler/perf_slots.h"
#include "sampler/sample_events.h"
#include "sampler/sampler_thread.h"

namespace flightrec::sampler {
namespace perf {

constexpr uint64_t kHupCheckNs = 250'000'000;
// The most of a ring the sampler thread takes out at once (DrainSlot).
constexpr size_t kDrainChunkBytes = 256u << 10;

// Copies [pos, pos + len) of a ring (size a power of two) into out.
void CopyOut(const uint8_t* ring, uint64_t size, uint64_t pos, uint8_t* out, size_t len) {
  const uint64_t off = pos & (size - 1);
  const size_t first = static_cast<size_t>(std::min<uint64_t>(len, size - off));
  std::memcpy(out, ring + off, first);
  if (first < len) std::memcpy(out + first, ring, len - first);
}

// Bounds-checked: a malformed record returns false, never reads past `len`.
// `period` is the sampling period of a CPU sample and the count of switches
// so far of a switch sample (see Attr, perf_sampler.cc).
bool ParseSample(const uint8_t* rec, size_t len, Sample* s) {
  size_t off = sizeof(perf_event_header);
  auto u64 = [&](uint64_t* v) {
    if (off + 8 > len) return false;
    std::memcpy(v, rec + off, 8);
    off += 8;
    return true;
  };
  uint64_t pidtid = 0;
  if (!u64(&s->id) || !u64(&s->ip) || !u64(&pidtid) || !u64(&s->time) || !u64(&s->period) || !u64(&s->abi))
    return false;
  s->pid = static_cast<uint32_t>(pidtid);
  s->tid = static_cast<uint32_t>(pidtid >> 32);
  if (s->abi != PERF_SAMPLE_REGS_ABI_NONE) {
    s->nregs = static_cast<size_t>(__builtin_popcountll(stacks::PerfRegsUserMask()));
    if (off + s->nregs * 8 > len) return false;
    s->regs = reinterpret_cast<const uint64_t*>(rec + off);  // perf records are 8-aligned
    off += s->nregs * 8;
  }
  uint64_t size = 0;
  if (!u64(&size)) return false;
  if (size) {
    if (size > len || off + size + 8 > len) return false;  // no wrap-around on garbage
    s->stack = rec + off;
    off += size;
    uint64_t dyn = 0;
    u64(&dyn);
    s->stack_len = dyn < size ? dyn : size;
  }
  return true;
}

// sample_id trailer of a non-sample record: pid/tid, time, id.
bool ParseTrailer(const uint8_t* rec, size_t len, uint64_t* time, uint32_t* tid) {
  if (len < sizeof(perf_event_header) + 24) return false;
  uint64_t pidtid;
  std::memcpy(&pidtid, rec + len - 24, 8);
  std::memcpy(time, rec + len - 16, 8);
  *tid = static_cast<uint32_t>(pidtid >> 32);
  return true;
}

int UnwindSample(const Sample& s, bool at_switch, uint64_t* pcs) {
  if (!s.regs) {
    if (at_switch) return 0;  // ip is a kernel address: nothing of the user stack
    pcs[0] = s.ip;
    return s.ip ? 1 : 0;
  }
  stacks::RegisterSet rs;
  if (!stacks::RegisterSetFromPerf(stacks::PerfRegsUserMask(), s.regs, s.nregs, &rs)) return 0;
  const int n =
      stacks::UnwindCopiedStack(stacks::UnwindRole::kSampler, rs, rs.sp(), s.stack, s.stack_len, pcs, kMaxFrames);
  // At a switch the user ip is the instruction after the syscall: like a
  // return address, step back into it so it symbolizes to the call.
  if (at_switch && n > 0 && pcs[0]) pcs[0] -= 1;
  return n;
}

uint64_t PeriodNs(const Sample& s) {
  if (s.period) return s.period;  // cpu-clock counts nanoseconds
  return 1000000000ull / (g_perf->opts.hz ? g_perf->opts.hz : 1);
}

void HandleRecord(Slot& slot, const Batch& b, uint64_t pos, const perf_event_header& h, const uint8_t* rec,
                  uint64_t now_ns, double cpu_factor) {
  Counters& c = g_perf->counters;
  switch (h.type) {
    case PERF_RECORD_SAMPLE: {
      Sample s;
      if (!ParseSample(rec, h.size, &s)) {
        c.bad_records++;
        return;
      }
      if (slot.sw_id && s.id == slot.sw_id) {
        OnSwitchSample(slot, pos, s);  // perf_switch_pairs.cc
        return;
      }
      uint64_t pcs[kMaxFrames];
      // Taken in the kernel: the user registers are those at kernel entry, so
      // the leaf is the instruction after the syscall (like at a switch).
      const bool in_kernel = (h.misc & PERF_RECORD_MISC_CPUMODE_MASK) == PERF_RECORD_MISC_KERNEL;
      const int n = UnwindSample(s, in_kernel, pcs);
      const uint64_t period =
          cpu_factor < 1.0 ? static_cast<uint64_t>(static_cast<double>(PeriodNs(s)) * cpu_factor) : PeriodNs(s);
      if (n > 0) QueueCpuSample(s.time, s.tid ? s.tid : static_cast<uint32_t>(slot.tid), pcs, n, period);
      c.samples++;
      return;
    }
    case PERF_RECORD_SWITCH:
      OnSwitchRecord(slot, b, h, rec);  // perf_switch_pairs.cc
      return;
    case PERF_RECORD_LOST:
    case PERF_RECORD_LOST_SAMPLES: {
      uint64_t lost = 0;
      const size_t at = sizeof(perf_event_header) + (h.type == PERF_RECORD_LOST ? 8 : 0);
      if (h.size < at + 8) return;
      std::memcpy(&lost, rec + at, 8);
      uint64_t time = now_ns;
      uint32_t tid = 0;
      ParseTrailer(rec, h.size, &time, &tid);
      // One sampler.lost per thread and drain, not one per kernel record
      // (ReportLost, at the end of the batch).
      if (!slot.batch_lost_time) slot.batch_lost_time = time;
      slot.lost_records += lost;
      slot.lost_since_switch_sample = true;
      // A lost switch-in would pair this switch-out with a much later one.
      slot.pending = false;
      return;
    }
    default: return;  // throttle, itrace, ...: nothing for us
  }
}

struct RingView {
  perf_event_mmap_page* meta;
  const uint8_t* data;
  uint64_t size;  // power of two
};

RingView ViewOf(const Slot& slot) {
  auto* meta = reinterpret_cast<perf_event_mmap_page*>(slot.base);
  RingView v;
  v.meta = meta;
  v.size = meta->data_size ? meta->data_size : slot.map_len - g_perf->page;
  v.data = slot.base + (meta->data_offset ? meta->data_offset : g_perf->page);
  return v;
}

// Bytes the kernel has written and we have not consumed.
size_t Unread(const RingView& v) {
  const uint64_t head = __atomic_load_n(&v.meta->data_head, __ATOMIC_ACQUIRE);
  return static_cast<size_t>(std::min<uint64_t>(head - v.meta->data_tail, v.size));
}

// Moves whole records (at most cap bytes) out of the ring into dst and hands
// the space back to the kernel. Only the slot's current owner calls this.
size_t TakeRecords(Slot& slot, uint8_t* dst, size_t cap) {
  const RingView v = ViewOf(slot);
  const uint64_t tail = v.meta->data_tail;
  const size_t len = std::min(Unread(v), cap);
  size_t whole = 0;
  while (whole + sizeof(perf_event_header) <= len) {
    perf_event_header h;
    CopyOut(v.data, v.size, tail + whole, reinterpret_cast<uint8_t*>(&h), sizeof(h));
    if (h.size < sizeof(h)) {  // cannot happen; never loop on it: drop the rest
      g_perf->counters.bad_records++;
      whole = 0;
      __atomic_store_n(&v.meta->data_tail, tail + len, __ATOMIC_RELEASE);
      return 0;
    }
    if (whole + h.size > len) break;
    whole += h.size;
  }
  if (whole) CopyOut(v.data, v.size, tail, dst, whole);
  __atomic_store_n(&v.meta->data_tail, tail + whole, __ATOMIC_RELEASE);
  return whole;
}

// The thread's CPU time (ns), or 0 if it cannot be read (the thread is gone).
uint64_t ThreadCpuNs(pid_t tid) {
  // The clock id glibc's pthread_getcpuclockid makes of a tid: per-thread,
  // CPUCLOCK_SCHED (the kernel's sum_exec_runtime).
  const clockid_t clock = static_cast<clockid_t>((~static_cast<unsigned>(tid) << 3) | 6);
  timespec ts;
  if (clock_gettime(clock, &ts) != 0) return 0;
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// The factor for the CPU samples of a live thread's batch (cpu_credit.h).
// A drain's later chunks carry the whole credit of its first: they claim the
// CPU time gained before the drain began, chunk by chunk.
double CpuFactor(Slot& slot, const Batch& b, bool first_chunk) {
  uint64_t periods = 0;
  for (size_t pos = 0; pos + sizeof(perf_event_header) <= b.len;) {
    perf_event_header h;
    std::memcpy(&h, b.data + pos, sizeof(h));
    if (h.size < sizeof(h) || pos + h.size > b.len) break;
    Sample s;
    if (h.type == PERF_RECORD_SAMPLE && ParseSample(b.data + pos, h.size, &s) && !(slot.sw_id && s.id == slot.sw_id))
      periods += PeriodNs(s);
    pos += h.size;
  }
  if (!periods) return 1.0;
  const uint64_t cpu = ThreadCpuNs(slot.tid);
  if (!cpu) return 1.0;
  return slot.cpu_credit.Take(cpu, periods,
                              first_chunk ? 1000000000ull / (g_perf->opts.hz ? g_perf->opts.hz : 1) : UINT64_MAX);
}

// The slot's losses not yet queued, as one sampler.lost (see Slot, perf_slots.h).
void ReportLost(Slot& slot, uint64_t now_ns) {
  const uint64_t total = std::max(slot.lost_records, slot.cpu_lost_read);
  if (total > slot.lost_reported) {
    const uint64_t n = total - slot.lost_reported;
    QueueSamplerLost(slot.batch_lost_time ? slot.batch_lost_time : now_ns, static_cast<uint32_t>(slot.tid), n);
    g_perf->counters.lost += n;
    slot.lost_reported = total;
  }
  slot.batch_lost_time = 0;
}

// The CPU event's count of samples lost to a full ring (PERF_FORMAT_LOST),
// into slot.cpu_lost_read. By the slot's owner, after taking its records:
// a loss needs a full ring, so the count read then holds every loss before
// those records. The raw syscall: read() is one of our own socket hooks.
void ReadCpuLost(Slot& slot) {
  if (slot.cpu_fd < 0 || !g_perf->format_lost.load(std::memory_order_relaxed)) return;
  if (FdWasLost(slot.cpu_fd) || !IsProtectedFd(slot.cpu_fd)) return;  // the application's file now
  uint64_t v[2];
  if (syscall(SYS_read, slot.cpu_fd, v, sizeof(v)) == static_cast<long>(sizeof(v)) && v[1] > slot.cpu_lost_read)
    slot.cpu_lost_read = v[1];
}

// live: the slot's thread is alive (not an orphan's saved records).
void ProcessBatch(uint64_t now_ns, Slot& slot, const Batch& b, bool live, bool first_chunk = true) {
  const double cpu_factor = live ? CpuFactor(slot, b, first_chunk) : 1.0;
  for (size_t pos = 0; pos + sizeof(perf_event_header) <= b.len;) {
    perf_event_header h;
    std::memcpy(&h, b.data + pos, sizeof(h));
    if (h.size < sizeof(h) || pos + h.size > b.len) break;
    HandleRecord(slot, b, pos, h, b.data + pos, now_ns, cpu_factor);
    pos += h.size;
  }
  ReportLost(slot, now_ns);
  // A block still open at the end of the batch is long enough to matter:
  // unwind its sample now, before the batch is reused.
  if (slot.pending && !slot.pending_unwound && !slot.pending_preempted) UnwindPending(slot, b);
  if (g_perf->shutdown.load(std::memory_order_acquire) && slot.pending) EndBlock(slot, nullptr, now_ns);
}

// Sampler thread, slot in kDraining: processes one chunk of at most
// kDrainChunkBytes of the ring (first_chunk: the first of this drain).
// Returns true when the ring holds more. In chunks, so that the records this
// thread holds outside the ring stay few: an exit that finds it in the
// middle of a collection (starved, its priority only just lifted) waits for
// one chunk, not for a whole 4 MiB ring to be unwound, and what is still in
// the ring is the exiting thread's to collect (SamplerStopRequested).
bool DrainSlot(uint64_t now_ns, Slot& slot, bool first_chunk) {
  if (!slot.base) return false;
  const size_t unread = Unread(ViewOf(slot));
  if (first_chunk && unread * 4 >= slot.map_len - g_perf->page) g_perf->pressure = true;
  const size_t want = std::min(unread, kDrainChunkBytes);
  if (want > g_perf->batch_cap) {
    void* grown = mi_realloc(g_perf->batch, want);
    if (grown) {
      g_perf->batch = static_cast<uint8_t*>(grown);
      g_perf->batch_cap = want;
    }
  }
  const size_t got = TakeRecords(slot, g_perf->batch, std::min(g_perf->batch_cap, want));
  if (got) ReadCpuLost(slot);
  const uint64_t lost_then = g_perf->counters.lost;
  ProcessBatch(now_ns, slot, Batch{g_perf->batch, got}, true, first_chunk);
  const bool overflowed = g_perf->counters.lost != lost_then;
  if (overflowed) g_perf->pressure = true;
  TuneSwitchPeriod(slot, now_ns, overflowed);
  return got && got < unread;
}

// Sampler thread, slot in kDraining: every chunk the ring holds.
void DrainSlotFully(uint64_t now_ns, Slot& slot) {
  for (size_t chunk = 0; chunk <= kMaxRingBytes / kDrainChunkBytes && DrainSlot(now_ns, slot, chunk == 0); ++chunk) {}
}

// Exiting owner, slot in kClosing: saves the unread records (no unwinding on
// an application thread), unmaps the ring and frees the slot.
void SaveAndClose(Slot& slot) {
  const size_t unread = slot.base ? Unread(ViewOf(slot)) : 0;
  if (unread) {
    auto* o = static_cast<Orphan*>(mi_malloc(sizeof(Orphan) + unread));
    if (o) {
      o->tid = slot.tid;
      o->cpu_id = slot.cpu_id;
      o->sw_id = slot.sw_id;
      // The sampler thread's pending state is ours to read: we hold kClosing
      // (acquired from its release of kDraining).
      o->pending = slot.pending && slot.pending_unwound && !slot.pending_preempted;
      o->pending_time = slot.pending_time;
      o->pending_weight = slot.pending_weight;
      o->last_switch_count = slot.last_switch_count;
      o->sw_period = slot.sw_period;
      o->prev_sw_period = slot.prev_sw_period;
      o->pending_n = o->pending ? slot.pending_n : 0;
      std::memcpy(o->pending_pcs, slot.pending_pcs, static_cast<size_t>(o->pending_n) * sizeof(uint64_t));
      o->len = TakeRecords(slot, o->data, unread);
      ReadCpuLost(slot);
      o->lost_records = slot.lost_records;
      o->cpu_lost_read = slot.cpu_lost_read;
      o->lost_reported = slot.lost_reported;
      o->next = g_perf->orphans.load(std::memory_order_relaxed);
      while (!g_perf->orphans.compare_exchange_weak(o->next, o, std::memory_order_release, std::memory_order_relaxed)) {
      }
    } else {
      g_perf->counters.orphan_bytes_lost.fetch_add(unread, std::memory_order_relaxed);
    }
  }
  Reclaim(slot);
}

void ProcessOrphans(uint64_t now_ns) {
  Orphan* o = g_perf->orphans.exchange(nullptr, std::memory_order_acquire);
  while (o) {
    Orphan* next = o->next;
    Slot& ctx = g_perf->orphan_slot;
    ctx.tid = o->tid;
    ctx.cpu_id = o->cpu_id;
    ctx.sw_id = o->sw_id;
    ctx.pending = o->pending;
    ctx.pending_preempted = false;
    ctx.pending_unwound = o->pending;
    ctx.pending_time = o->pending_time;
    ctx.pending_weight = o->pending_weight;
    ctx.last_switch_count = o->last_switch_count;
    ctx.sw_period = o->sw_period;
    ctx.prev_sw_period = o->prev_sw_period;
    ctx.lost_since_switch_sample = false;
    ctx.lost_records = o->lost_records;
    ctx.cpu_lost_read = o->cpu_lost_read;
    ctx.lost_reported = o->lost_reported;
    ctx.batch_lost_time = 0;
    ctx.pending_n = o->pending_n;
    std::memcpy(ctx.pending_pcs, o->pending_pcs, static_cast<size_t>(o->pending_n) * sizeof(uint64_t));
    ProcessBatch(now_ns, ctx, Batch{o->data, o->len}, false);
    mi_free(o);
    o = next;
  }
}

bool TaskGone(const Slot& s) {
  pollfd p{s.cpu_fd, POLLIN, 0};
  return poll(&p, 1, 0) > 0 && (p.revents & POLLHUP);
}

}  // namespace perf

using namespace perf;  // this sampler's parts (perf_slots.h)

bool PerfCollect(uint64_t now_ns) {
  if (!g_perf) return false;
  g_perf->pressure = false;
  const bool hup_check = now_ns - g_perf->last_hup_check >= kHupCheckNs;
  if (hup_check) g_perf->last_hup_check = now_ns;
  const int n = std::min(g_perf->hwm.load(std::memory_order_acquire), kMaxSlots);
  // Off the sampler thread (the exit's last collection) nobody asks to stop.
  const bool on_sampler_thread = IsSamplerThread();
  for (int i = 0; i < n; ++i) {
    Slot& s = g_perf->slots[i];
    // At most a ring's worth of chunks: a thread that writes as fast as
    // this thread unwinds must not keep it from the other rings.
    for (size_t chunk = 0; chunk <= kMaxRingBytes / kDrainChunkBytes; ++chunk) {
      const bool first = chunk == 0;
      if (on_sampler_thread && SamplerStopRequested()) return g_perf->pressure;  // the stopper collects the rest
      if (!TakeActiveSlot(s)) break;
      const bool more = DrainSlot(now_ns, s, first);
      // An owner that exited during a drain asked for reclaim; threads armed
      // from outside (at init) have no exit observer, but the kernel reports
      // their events as hung up once the task is gone.
      if (s.retire.load(std::memory_order_acquire) || (hup_check && first && TaskGone(s))) {
        DrainSlotFully(now_ns, s);
        if (s.pending) EndBlock(s, nullptr, now_ns);
        Reclaim(s);
        break;
      }
      s.state.store(kActive, std::memory_order_release);
      if (!more) break;
    }
  }
  ProcessOrphans(now_ns);
  return g_perf->pressure;
}

uint64_t PerfDiscardUnread(uint64_t now_ns) {
  if (!g_perf) return 0;
  uint64_t total = 0;
  const int n = std::min(g_perf->hwm.load(std::memory_order_acquire), kMaxSlots);
  for (int i = 0; i < n; ++i) {
    Slot& s = g_perf->slots[i];
    if (!TakeActiveSlot(s)) continue;  // the stalled sampler thread holds it (or it is free)
    if (s.base) {
      const RingView v = ViewOf(s);
      const uint64_t tail = v.meta->data_tail;
      const size_t len = Unread(v);
      uint64_t samples = 0;
      for (size_t pos = 0; pos + sizeof(perf_event_header) <= len;) {
        perf_event_header h;
        CopyOut(v.data, v.size, tail + pos, reinterpret_cast<uint8_t*>(&h), sizeof(h));
        if (h.size < sizeof(h) || pos + h.size > len) break;
        if (h.type == PERF_RECORD_SAMPLE) samples++;
        pos += h.size;
      }
      __atomic_store_n(&v.meta->data_tail, tail + len, __ATOMIC_RELEASE);
      QueueSamplerLost(now_ns, static_cast<uint32_t>(s.tid), samples);
      total += samples;
    }
    s.state.store(kActive, std::memory_order_release);
  }
  return total;
}

}  // namespace flightrec::sampler
