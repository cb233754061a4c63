// Window keeper: see window_keeper.h.
#include "preload/flush/window_keeper.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "preload/fds/fd_guard.h"
#include "preload/flush/flush_registry_internal.h"
#include "preload/flush/output_dir.h"
#include "preload/runtime/proc_stat.h"
#include "preload/runtime/clock.h"
#include "preload/runtime/config.h"
#include "preload/runtime/core_events.h"
#include "preload/runtime/log.h"
#include "preload/runtime/utc_stamp.h"

namespace flightrec {
namespace {

constexpr uint64_t kSec = 1000000000ull;
// Sources the flush thread checks itself are looked at this often at most
// (a tick may come every few ms under load): a control-file probe is three
// system calls, an RSS read one file.
constexpr uint64_t kPollNs = 250 * kSec / 1000;
// A storm of triggers (every request slow, RSS flapping at the limit) must
// not turn the black box into continuous upload: at most kIncidentBurst new
// incidents at once, then one per kIncidentRefillNs.
constexpr uint64_t kIncidentBurst = 6;
constexpr uint64_t kIncidentRefillNs = 600 * kSec;
// An open incident grows with merged triggers, but ends at most this many
// after-periods (at least 1 s each) past its first trigger.
constexpr uint64_t kMaxSpanAfters = 6;
// Merged triggers write an event at most this often; the rest are counted.
constexpr uint64_t kMergedEventGapNs = kSec;
constexpr size_t kMaxNoteBytes = 200;

uint32_t type_trigger = 0;

// The incident's tag in file names and keys: the trigger's UTC time, which
// sorts and reads well, with no '-' (segment names split on it).
std::string StampTag(uint64_t realtime_ns) { return UtcStamp(realtime_ns); }

// "X.seg" -> "X@TAG.seg".
std::string TaggedName(const std::string& name, const std::string& tag) {
  const size_t dot = name.rfind(".seg");
  if (dot == std::string::npos) return name;
  return name.substr(0, dot) + "@" + tag + ".seg";
}

// This process's start time as the kernel keeps it: field 22 of
// /proc/self/stat, in clock ticks since boot (what `flightrec-dump trigger`
// reads from /proc/PID/stat to name the control file), and the wall-clock
// time it falls at. False if /proc cannot be read.
bool ReadOwnStart(uint64_t* ticks, int64_t* started_sec) {
  char buf[1024];
  const char* p = ReadOwnStatFields(buf, sizeof(buf));  // at field 3
  if (!p) return false;
  for (int field = 3; field < 22; field++) {
    while (*p == ' ') p++;
    while (*p && *p != ' ') p++;
  }
  while (*p == ' ') p++;
  char* end = nullptr;
  const unsigned long long start = strtoull(p, &end, 10);
  if (end == p) return false;
  const long hz = sysconf(_SC_CLK_TCK);
  timespec boot, real;
  if (hz <= 0 || clock_gettime(CLOCK_BOOTTIME, &boot) != 0 || clock_gettime(CLOCK_REALTIME, &real) != 0) return false;
  // Ticks are whole 1/hz: the start is known to within one, rounded down.
  const int64_t age_sec = boot.tv_sec - static_cast<int64_t>(start / static_cast<unsigned long long>(hz));
  *ticks = start;
  *started_sec = real.tv_sec - age_sec - 1;  // a second early rather than late (rounding of both clocks)
  return true;
}

// Resident bytes from /proc/self/statm (its second field, in pages); 0 if unreadable.
uint64_t ResidentBytes() {
  const int fd = OpenTransientFd("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[128];
  const ssize_t n = read(fd, buf, sizeof(buf) - 1);
  CloseTransientFd(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  unsigned long long size = 0, resident = 0;
  if (sscanf(buf, "%llu %llu", &size, &resident) != 2) return 0;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace

void RegisterTriggerEvents() {
  using format::FieldType;
  type_trigger = DefineEventType({"trigger",
                                  {{"time", FieldType::kTime, "ns"},
                                   {"reason", FieldType::kString, ""},
                                   {"detail", FieldType::kUInt, ""},
                                   {"note", FieldType::kString, ""},
                                   {"incident", FieldType::kUInt, ""},
                                   {"before_ns", FieldType::kUInt, "ns"},
                                   {"after_ns", FieldType::kUInt, "ns"},
                                   {"merged", FieldType::kUInt, ""},
                                   {"suppressed", FieldType::kUInt, "count"},
                                   {"mode", FieldType::kString, ""},
                                   {"tag", FieldType::kString, ""}}});
}

uint64_t WindowKeeper::SegmentSecondsFor(uint64_t configured_seconds) {
  const Config& cfg = GetConfig();
  if (!cfg.window_mode) return configured_seconds;
  // A quarter of the window: the disk holds the window plus at most a
  // quarter more (the oldest segment is deleted only once all of it is older).
  const uint64_t quarter = std::max<uint64_t>(1, cfg.window_seconds / 4);
  return std::min(configured_seconds, quarter);
}

WindowKeeper::WindowKeeper()
    : window_mode_(GetConfig().window_mode),
      window_ns_(GetConfig().window_seconds * kSec),
      after_ns_(GetConfig().trigger_after_seconds * kSec),
      tokens_(kIncidentBurst) {}

void WindowKeeper::PollSources(uint64_t now_ns) {
  const Config& cfg = GetConfig();
  if (cfg.trigger_rss_mb) {
    const uint64_t rss = ResidentBytes();
    const uint64_t limit = cfg.trigger_rss_mb << 20;
    // Edge-triggered: once above, re-armed only after falling below 7/8 of
    // the limit, so a process sitting at the limit triggers once.
    if (rss > limit && !rss_above_) {
      rss_above_ = true;
      RequestTrigger(TriggerReason::kRss, rss);
    } else if (rss_above_ && rss < limit / 8 * 7) {
      rss_above_ = false;
    }
  }
  PollControlFile();
  (void)now_ns;
}

// The on-demand control file: obeyed only if it is meant for this process
// and written by its user (window_keeper.h); read its note, then remove it.
// Through the directory's descriptor, so it works after a privilege drop
// (uid-N).
void WindowKeeper::PollControlFile() {
  if (!control_known_) {
    control_known_ = true;
    uint64_t ticks = 0;
    if (ReadOwnStart(&ticks, &started_sec_)) {
      control_name_ = ".trigger-" + std::to_string(getpid()) + "-" + std::to_string(ticks);
    } else {
      Log(LogLevel::kInfo,
          "cannot read /proc/self/stat: no on-demand trigger (flightrec-dump trigger) for this process");
    }
  }
  if (control_name_.empty()) return;
  const Config& cfg = GetConfig();
  // Nearly every poll finds no file: one stat of its path says so, where
  // the walk below (the directory opened component by component, checked
  // like a segment's) took ~25 system calls, about half of an idle
  // process's. The stat follows symlinks, but only tells whether to look;
  // the walk decides what is read. A pinned directory (uid-N) has no path
  // we may use: always walked.
  if (!OutputDirPinned()) {
    if (control_path_.empty()) control_path_ = cfg.output + "/" + control_name_;
    struct stat seen;
    if (fstatat(AT_FDCWD, control_path_.c_str(), &seen, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT) return;
  }
  OutputDir dir;
  std::string error;
  if (!OpenOutputDir(cfg.output, cfg.allow_foreign_dir, false, &dir, &error)) return;
  const char* name = control_name_.c_str();
  const int fd = OpenTransientFdAt(dir.fd(), name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return;
  struct stat st {};
  const uid_t me = geteuid();
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1 || (st.st_uid != me && st.st_uid != 0)) {
    CloseTransientFd(fd);
    // Another user's (a shared sticky directory): not theirs to trigger,
    // and not ours to delete. Logged once; looked at again each poll.
    if (!foreign_logged_) {
      foreign_logged_ = true;
      Log(LogLevel::kInfo, "ignoring %s/%s: %s (only uid %u or root may trigger this process)", dir.path().c_str(),
          name, S_ISREG(st.st_mode) && st.st_nlink == 1 ? "owned by another user" : "not a plain file",
          static_cast<unsigned>(me));
    }
    return;
  }
  if (st.st_mtim.tv_sec < started_sec_) {
    // Written before this process started: aimed at an earlier one with the
    // same pid and start tick (a reboot with a persistent directory).
    CloseTransientFd(fd);
    if (st.st_uid == me) unlinkat(dir.fd(), name, 0);
    if (!stale_logged_) {
      stale_logged_ = true;
      Log(LogLevel::kInfo, "ignoring %s/%s: written before this process started", dir.path().c_str(), name);
    }
    return;
  }
  char buf[kMaxNoteBytes + 1];
  const ssize_t n = read(fd, buf, kMaxNoteBytes);
  CloseTransientFd(fd);
  if (unlinkat(dir.fd(), name, 0) != 0) return;  // not ours to consume: it would trigger again
  std::string note;
  for (ssize_t i = 0; i < n; i++) {
    const char c = buf[i];
    if (c == '\n' || c == '\r') break;
    note.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  }
  demand_note_ = note;
  RequestTrigger(TriggerReason::kDemand, 0);
}

bool WindowKeeper::Tick(FlushContext& ctx) {
  const uint64_t now = ctx.now_ns;
  if (now - last_poll_ns_ >= kPollNs || ctx.final_tick) {
    last_poll_ns_ = now;
    PollSources(now);
  }
  PendingTrigger pending[static_cast<int>(TriggerReason::kCount)];
  const int n = TakePendingTriggers(pending);
  // Oldest first: the first of them opens the incident.
  for (int i = 1; i < n; i++)  // a handful: insertion sort
    for (int j = i; j > 0 && pending[j].time_ns < pending[j - 1].time_ns; j--) std::swap(pending[j], pending[j - 1]);
  for (int i = 0; i < n; i++) {
    std::string note;
    if (pending[i].reason == TriggerReason::kDemand) note.swap(demand_note_);
    Handle(ctx, pending[i].reason, pending[i].time_ns, pending[i].detail, note);
  }
  if (suppressed_total_) {
    EmitGlobalDrops(ctx, "trigger.suppressed", suppressed_total_);
    suppressed_total_ = 0;
  }
  return incident_.open && now > incident_.end_ns;
}

void WindowKeeper::Handle(FlushContext& ctx, TriggerReason reason, uint64_t t, uint64_t detail,
                          const std::string& note) {
  if (incident_.open && t <= incident_.end_ns) {
    const uint64_t cap = incident_.first_ns + kMaxSpanAfters * std::max(after_ns_, kSec);
    incident_.end_ns = std::max(incident_.end_ns, std::min(t + after_ns_, cap));
    if (reason == TriggerReason::kCrash || t - last_event_ns_ >= kMergedEventGapNs) {
      Emit(ctx, reason, t, detail, note, Merged::kYes);
    } else {
      suppressed_++;
      suppressed_total_++;
    }
    return;
  }
  // A new incident: the bucket refills one token per kIncidentRefillNs.
  if (tokens_ < kIncidentBurst && refill_at_ns_ && t >= refill_at_ns_) {
    const uint64_t add = 1 + (t - refill_at_ns_) / kIncidentRefillNs;
    tokens_ = std::min(kIncidentBurst, tokens_ + add);
    refill_at_ns_ = tokens_ < kIncidentBurst ? refill_at_ns_ + add * kIncidentRefillNs : 0;
  }
  // A crash is always recorded: the process is ending, it will not storm.
  if (tokens_ == 0 && reason != TriggerReason::kCrash) {
    suppressed_++;
    suppressed_total_++;
    return;
  }
  if (tokens_ > 0) tokens_--;
  if (!refill_at_ns_ && tokens_ < kIncidentBurst) refill_at_ns_ = t + kIncidentRefillNs;
  incident_.open = true;
  incident_.number++;
  incident_.first_ns = t;
  // Never reaches back into the previous incident: its segments went under its own tag.
  incident_.start_ns = std::max(t > window_ns_ ? t - window_ns_ : 0, last_incident_end_ns_);
  incident_.end_ns = t + after_ns_;
  const uint64_t now = MonotonicNs();
  incident_.tag = StampTag(RealtimeNs() - (now > t ? now - t : 0));
  Emit(ctx, reason, t, detail, note, Merged::kNo);
  if (window_mode_) KeepWindowFor(incident_);
  Log(LogLevel::kInfo, "trigger (%s): incident %s%s", TriggerReasonName(reason), incident_.tag.c_str(),
      window_mode_ ? ", keeping its window" : "");
}

void WindowKeeper::Emit(FlushContext& ctx, TriggerReason reason, uint64_t t, uint64_t detail, const std::string& note,
                        Merged merged) {
  if (!type_trigger) return;
  using format::Value;
  const Value v[] = {Value::U(t),
                     Value::Str(TriggerReasonName(reason)),
                     Value::U(detail),
                     Value::Str(note),
                     Value::U(incident_.number),
                     Value::U(t - std::min(t, incident_.start_ns)),
                     Value::U(incident_.end_ns > t ? incident_.end_ns - t : 0),
                     Value::U(merged == Merged::kYes ? 1 : 0),
                     Value::U(suppressed_),
                     Value::Str(window_mode_ ? "window" : "continuous"),
                     Value::Str(incident_.tag)};
  ctx.writer->Append(type_trigger, v, 11);
  suppressed_ = 0;
  last_event_ns_ = t;
}

// Segments already sealed into the window that hold data from the
// incident's start on: renamed under its tag, owner-writable again, shipped.
void WindowKeeper::KeepWindowFor(const Incident& incident) {
  const Config& cfg = GetConfig();
  OutputDir dir;
  std::string error;
  if (!OpenOutputDir(cfg.output, cfg.allow_foreign_dir, false, &dir, &error)) return;
  std::vector<Segment> left;
  for (const Segment& seg : window_) {
    if (seg.sealed_ns < incident.start_ns || seg.dir_path != dir.path()) {
      left.push_back(seg);
      continue;
    }
    const std::string kept = TaggedName(seg.name, incident.tag);
    if (fchmodat(dir.fd(), seg.name.c_str(), S_IRUSR | S_IWUSR, 0) != 0 ||
        renameat(dir.fd(), seg.name.c_str(), dir.fd(), kept.c_str()) != 0) {
      // Gone (the disk budget took it) or out of reach: nothing to keep.
      Log(LogLevel::kDebug, "incident %s: cannot keep %s: %s", incident.tag.c_str(), seg.name.c_str(), strerror(errno));
      continue;
    }
    RunShipHooks(dir.path() + "/" + kept);
  }
  window_.swap(left);
}

std::string WindowKeeper::TagFor(uint64_t opened_ns) const {
  if (!window_mode_ || !incident_.open || opened_ns > incident_.end_ns) return "";
  return incident_.tag;
}

void WindowKeeper::AddWindowSegment(const std::string& dir_path, const std::string& name, uint64_t sealed_ns) {
  window_.push_back(Segment{dir_path, name, sealed_ns});
}

BudgetDeletions WindowKeeper::AfterSeal(OutputDir& dir, uint64_t now_ns) {
  if (incident_.open && now_ns > incident_.end_ns) {
    incident_.open = false;
    last_incident_end_ns_ = incident_.end_ns;
  }
  return window_mode_ ? Expire(dir, now_ns) : BudgetDeletions{};
}

// Deletes window segments whose newest data is older than the window. Only
// this process's own, and only where it wrote them.
BudgetDeletions WindowKeeper::Expire(OutputDir& dir, uint64_t now_ns) {
  BudgetDeletions freed;
  size_t gone = 0;
  while (gone < window_.size() && window_[gone].sealed_ns + window_ns_ < now_ns) {
    const Segment& seg = window_[gone++];
    if (seg.dir_path != dir.path()) continue;
    struct stat st;
    const bool known = fstatat(dir.fd(), seg.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
    if (unlinkat(dir.fd(), seg.name.c_str(), 0) != 0) {
      if (errno != ENOENT) Log(LogLevel::kDebug, "window: cannot delete %s: %s", seg.name.c_str(), strerror(errno));
      continue;
    }
    freed.expired_windows++;
    if (known) freed.expired_bytes += AllocatedBytes(st);
  }
  window_.erase(window_.begin(), window_.begin() + static_cast<std::ptrdiff_t>(gone));
  return freed;
}

}  // namespace flightrec
