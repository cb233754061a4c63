// Segment lifecycle: see segment_lifecycle.h. Moved out of flush_thread.cc
// (issue 40), unchanged in behaviour.
//
// Invariant: nothing is lost uncounted when a write fails or the file
// vanishes: the writer counts the events that never reached the file (by
// event type), and the drop ledger reports again, in the next segment, the
// drop reports that were only in such blocks (drop_ledger.h).
#include "preload/flush/segment_lifecycle.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "format/fsize_guard.h"
#include "preload/fds/fd_guard.h"
#include "preload/flush/budget_tally.h"
#include "preload/flush/drop_ledger.h"
#include "preload/flush/flush_registry_internal.h"
#include "preload/flush/output_dir.h"
#include "preload/flush/segment_access.h"
#include "preload/flush/segment_files.h"
#include "preload/flush/window_keeper.h"
#include "preload/flush/writer_liveness.h"
#include "preload/runtime/clock.h"
#include "preload/runtime/config.h"
#include "preload/runtime/features.h"
#include "preload/runtime/log.h"

namespace flightrec {
namespace {

constexpr uint64_t kMs = 1000000ull;
// What waits in the writer reaches the file at least this often while the
// process is active (its ticks come every FLIGHTREC_FLUSH_MS): a process
// that dies without running exit code (SIGKILL, the OOM killer, Go's raw
// exit_group) loses at most about this much. A smaller block compresses a
// little worse (redis under load: +1-3% bytes at 250 ms against 1 s).
constexpr uint64_t kBlockIntervalNs = 250 * kMs;
// A quiet process is not woken just to write: its drains back off, and only
// this schedules a wake for what waits (its once-a-second process.rusage
// then shares the wake that writes it).
constexpr uint64_t kBlockMaxDelayNs = 1000 * kMs;
constexpr uint64_t kRetryNs = 5000 * kMs;  // retry an unusable output this often
constexpr uint64_t kMaxBufferedBytes = 1 << 20;

uint64_t g_next_seq = 0;  // segment numbers continue across restarts (failed exec)

std::string BaseName(const std::string& path) { return path.substr(path.rfind('/') + 1); }

// A segment given up before any event reached it (a disk with room for a
// header but not a block: each retry creates one) holds nothing a reader
// could use. It goes, so a full disk leaves no such file behind, however
// long it stays full. One that holds events stays: it reads up to its
// last whole block.
void RemoveIfNothingWritten(SegmentLifecycle& s) {
  if (s.active_path.empty() || s.writer->stats().events_written != 0) return;
  const Config& cfg = GetConfig();
  OutputDir dir;
  std::string error;
  if (OpenOutputDir(cfg.output, cfg.allow_foreign_dir, false, &dir, &error))
    unlinkat(dir.fd(), BaseName(s.active_path).c_str(), 0);
}

void Pause(SegmentLifecycle& s, const std::string& why) {
  if (s.writer->is_open()) s.writer->Abandon();
  RemoveIfNothingWritten(s);
  s.active_path.clear();
  s.paused = true;
  s.retry_at_ns = MonotonicNs() + kRetryNs;
  if (!s.paused_logged) {
    Log(LogLevel::kWarn, "%s; recording paused, the service is unaffected (retrying every 5 s)", why.c_str());
    s.paused_logged = true;
  }
}

uint64_t SegmentAgeLimitNs() { return WindowKeeper::SegmentSecondsFor(GetConfig().segment_seconds) * 1000 * kMs; }

}  // namespace

void InitSegments(SegmentLifecycle& s, const ProcessInfo& info) {
  s.keeper = new WindowKeeper();
  s.info = info;
  s.seq = g_next_seq;
}

void ResetSegmentNumbering() { g_next_seq = 0; }

bool OpenSegment(SegmentLifecycle& s, uint64_t now) {
  const Config& cfg = GetConfig();
  if (s.info.details_pending) CollectProcessDetails(&s.info);  // a forked child's first segment
  std::string error;
  // The program lowered its descriptor limit since start: a new segment
  // would take one of its last numbers (fd_guard.h). Paused, retried.
  unsigned long nofile = 0;
  if (!NofileLeavesRoomForRecorder(&nofile)) {
    Pause(s, "RLIMIT_NOFILE lowered to " + std::to_string(nofile) + ", under the " +
                 std::to_string(kMinNofileForRecording) + " the recorder needs");
    return false;
  }
  // The program lowered its file-size limit (setrlimit, prlimit): a segment
  // must not take it to the limit (the write would fail, or on a program
  // thread raise SIGXFSZ). Paused, retried; segments rotate at half of it.
  const uint64_t fsize = format::FileSizeLimit();
  if (fsize < kMinFileSizeForRecording) {
    Pause(s, "RLIMIT_FSIZE lowered to " + std::to_string(fsize) + " bytes, under the " +
                 std::to_string(kMinFileSizeForRecording) + " a segment needs");
    return false;
  }
  s.segment_cap = std::min<uint64_t>(cfg.segment_bytes, fsize / 2);
  OutputDir dir;
  if (!OpenOutputDir(cfg.output, cfg.allow_foreign_dir, true, &dir, &error)) {
    Pause(s, error);
    return false;
  }
  format::SegmentHeaderInfo h;
  h.pid = s.info.pid;
  h.identity = OwnWriterIdentity();  // for other processes' disk budgets (writer_liveness.h)
  h.sequence = s.seq;
  h.anchor_monotonic_ns = s.info.monotonic_ns;
  h.anchor_realtime_ns = s.info.realtime_ns;
  h.service = s.info.service;
  h.host = s.info.hostname;
  // Relative to the directory's descriptor: after a privilege drop the path
  // is no longer reachable.
  const std::string path = ActiveSegmentPath(dir.path(), s.info.service, s.info.pid, s.seq, RealtimeNs());
  // The writer opens the file for each write and closes it after, so no
  // descriptor of ours stays in the program's table (segment_access.h).
  s.writer->SetFileAccess(OutputSegmentAccess());
  if (!s.writer->Open(BaseName(path), h, &error)) {
    Pause(s, "cannot create segment " + path + ": " + error);
    return false;
  }
  if (s.paused && s.paused_for_crash)
    Log(LogLevel::kDebug, "the program recovered from a fault; recording resumed in a new segment");
  else if (s.paused) Log(LogLevel::kWarn, "output %s usable again; recording resumed", cfg.output.c_str());
  s.paused = false;
  s.paused_for_crash = false;
  s.paused_logged = false;
  s.active_path = path;
  s.opened_ns = now;
  s.touched_ns = now;  // the header's write
  s.seq++;
  g_next_seq = s.seq;
  EmitProcessStart(s.writer, s.info, now);
  return true;
}

void SealSegment(SegmentLifecycle& s) {
  if (!s.writer->is_open()) return;
  DropLedger& ledger = TheDropLedger();
  std::string error;
  const DropLedger::Totals totals = ledger.Footer();
  if (!s.writer->Seal(totals, &error)) {
    const bool gone = s.writer->file_vanished();
    ledger.WriteFailed(*s.writer);
    Pause(s, gone ? "segment " + s.active_path + " disappeared (removed under us)"
                  : "cannot seal segment " + s.active_path + ": " + error);
    return;
  }
  ledger.Sealed();  // in the footer now
  // Window mode: a segment an incident covers is sealed under its tag;
  // any other is made read-only, which the uploader reads as "nothing to
  // ship" (window_keeper.h), before its .seg name exists.
  const std::string tag = s.keeper->TagFor(s.opened_ns);
  std::string sealed = SealedSegmentPath(s.active_path);
  if (!tag.empty()) sealed = sealed.substr(0, sealed.size() - 4) + "@" + tag + ".seg";
  const bool windowed = GetConfig().window_mode && tag.empty();
  OutputDir dir;
  std::string dir_error;
  const bool have_dir = OpenOutputDir(GetConfig().output, GetConfig().allow_foreign_dir, false, &dir, &dir_error);
  if (have_dir && windowed) fchmodat(dir.fd(), BaseName(s.active_path).c_str(), S_IRUSR, 0);
  if (!have_dir || renameat(dir.fd(), BaseName(s.active_path).c_str(), dir.fd(), BaseName(sealed).c_str()) != 0) {
    const int err = errno;
    Log(LogLevel::kWarn, "cannot rename %s: %s", s.active_path.c_str(), strerror(err));
    if (err == ENOENT) ledger.SealedFileLost(totals, *s.writer);  // removed under us, with everything in it
    s.active_path.clear();
    return;
  }
  s.active_path.clear();
  RunSealHooks(sealed);
  const uint64_t sealed_ns = MonotonicNs();
  if (windowed) s.keeper->AddWindowSegment(dir.path(), BaseName(sealed), sealed_ns);
  const BudgetDeletions expired = s.keeper->AfterSeal(dir, sealed_ns);
  // The disk budget, in allocated blocks, and the record of what it deleted (budget_tally.h).
  ApplyDiskBudgetAfterSeal(dir.fd(), BaseName(sealed), expired);
}

void OpenFirstSegment(SegmentLifecycle& s, uint64_t now) {
  if (s.opened) return;
  s.opened = true;
  s.writer = new format::SegmentWriter();
  if (SamplerPcDescriber) s.writer->SetPcDescriber(SamplerPcDescriber());
  DefineAllEventTypes(s.writer);
  s.last_block_ns = now;
  OpenSegment(s, now);
}

void PauseAfterCrash(SegmentLifecycle& s) {
  s.paused = true;
  s.paused_logged = true;
  s.paused_for_crash = true;
  s.retry_at_ns = MonotonicNs() + kRetryNs;
}

void WriteAndRotate(SegmentLifecycle& s, uint64_t now, bool incident_done) {
  if (now - s.last_block_ns >= kBlockIntervalNs || s.writer->buffered_bytes() > kMaxBufferedBytes) {
    s.last_block_ns = now;
    // The file is opened for the write and closed after (segment_access.h):
    // a file removed under us (the directory too) fails to open, ENOENT.
    std::string error;
    if (!s.writer->Flush(&error)) {
      const bool gone = s.writer->file_vanished();
      TheDropLedger().WriteFailed(*s.writer);
      Pause(s, gone ? "segment " + s.active_path + " disappeared (removed under us)"
                    : "cannot write segment " + s.active_path + ": " + error);
      return;
    }
    // With no descriptor free (the program holds them all) the blocks wait
    // in the writer for the next write: not on disk yet.
    if (!s.writer->write_deferred()) TheDropLedger().BlockWritten();
  }
  // A live writer's sign for other processes' disk budgets: its file's
  // modification time, a minute old at most (writer_liveness.h).
  if (now - s.touched_ns >= kLiveWriterTouchNs) {
    s.touched_ns = now;
    s.writer->Touch();
  }
  // Not while writes wait for a descriptor: the seal would need one too.
  if (s.writer->write_deferred()) return;
  if (incident_done || s.writer->stats().bytes_written + s.writer->buffered_bytes() >= s.segment_cap ||
      now - s.opened_ns >= SegmentAgeLimitNs()) {
    SealSegment(s);
    if (!s.paused) OpenSegment(s, MonotonicNs());
  }
}

uint64_t NextSegmentDutyNs(const SegmentLifecycle& s) {
  uint64_t due = UINT64_MAX;
  auto at = [&](uint64_t t) { due = std::min(due, t); };
  if (s.writer->buffered_bytes() > 0) at(s.last_block_ns + kBlockMaxDelayNs);
  if (s.writer->is_open()) at(s.opened_ns + SegmentAgeLimitNs());
  at(s.keeper->NextDutyNs());
  if (s.paused) at(s.retry_at_ns);
  return due;
}

void AbandonSegment(SegmentLifecycle& s) {
  if (s.writer && s.writer->is_open()) s.writer->Abandon();
}

}  // namespace flightrec
