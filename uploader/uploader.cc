// The "flightrec-upload" thread: init/fork wiring, the seal and shutdown
// hooks, and the loop that drains the upload queue into S3.
#include "uploader/uploader.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

#include "preload/runtime/clock.h"
#include "preload/flush/flush_registry.h"
#include "preload/fds/fd_guard.h"
#include "preload/runtime/log.h"
#include "preload/flush/output_dir.h"
#include "preload/runtime/recorder_caps.h"
#include "preload/runtime/recorder_thread.h"
#include "uploader/credentials/credential_provider.h"
#include "uploader/credentials/credentials.h"
#include "uploader/s3/s3_client.h"
#include "uploader/s3/s3_endpoint.h"
#include "uploader/upload_queue.h"

extern char** environ;

namespace flightrec {
namespace uploader {
namespace {

constexpr uint64_t kMs = 1000000ull;
constexpr uint64_t kRescanNs = 60000 * kMs;   // picks up forked children's and other processes' segments
constexpr uint64_t kExitGuardNs = 100 * kMs;  // transfers stop this long before the exit deadline
constexpr size_t kMaxLoggedCauses = 64;
// A forked child gets its own uploader only once it has lived this long: a
// short-lived child (fork, work, _exit) never pays for a thread or waits for
// uploads at exit; its segments are shipped by the parent's rescans (periodic
// and at exit) or by the next run. Long-lived children (daemons) upload
// themselves from their first rotation on.
constexpr uint64_t kChildUploaderAfterNs = 5000 * kMs;

// Everything the thread needs. Allocated once and never freed: the exiting
// process may still have the thread parked on these mutexes.
struct Uploader final : S3Control {
  // Immutable after UploaderInit.
  std::string prefix, own_service, host, bucket;
  bool keep_local = false;
  bool allow_foreign = false;
  S3Endpoint endpoint;
  CredentialEnv cred_env;
  S3ClientOptions options;
  UploadQueue queue;

  // mu/cv: wakeups from the seal hook and the shutdown handshake. Never held
  // across I/O or libcurl, so the seal hook (flush thread) waits at most for
  // a few instructions.
  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t cv;  // CLOCK_MONOTONIC
  bool wake = false;
  bool shutdown = false;                // the shutdown hook ran
  bool drained = false;                 // the thread is done for good
  std::atomic<uint64_t> stop_at_ns{0};  // 0 = no deadline; else transfers and sleeps end here

  // step_mu brackets every libcurl call (S3Control::EnterStep). The shutdown
  // hook takes it once and sets `exiting`: from then on libcurl is off limits.
  pthread_mutex_t step_mu = PTHREAD_MUTEX_INITIALIZER;
  std::atomic<bool> exiting{false};

  // A process that dropped root: its uid-N directory, handed from the seal
  // hook to the thread. pending_subdir is guarded by mu; the descriptor
  // travels in g_pin_pending.
  std::string pending_subdir;
  std::string handed_pin_path;  // seal hooks only (the writer's owner)

  // Upload thread only.
  std::set<std::string> logged_causes;
  JitterRandom random{0};
  uint64_t uploaded = 0;

  Uploader(const std::string& dir, bool allow_foreign_dir)
      : allow_foreign(allow_foreign_dir), queue(dir, allow_foreign_dir) {
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&cv, &attr);
    pthread_condattr_destroy(&attr);
  }

  bool ShouldStop() override {
    if (exiting.load(std::memory_order_acquire)) return true;
    const uint64_t stop = stop_at_ns.load(std::memory_order_acquire);
    return stop != 0 && MonotonicNs() >= stop;
  }

  bool Sleep(uint64_t ns) override {
    const uint64_t until = MonotonicNs() + ns;
    pthread_mutex_lock(&mu);
    while (!ShouldStop()) {
      uint64_t target = until;
      const uint64_t stop = stop_at_ns.load(std::memory_order_acquire);
      if (stop != 0 && stop < target) target = stop;
      if (MonotonicNs() >= target) break;
      const timespec ts = NsToTimespec(target);
      pthread_cond_timedwait(&cv, &mu, &ts);
    }
    pthread_mutex_unlock(&mu);
    return !ShouldStop();
  }

  bool EnterStep() override {
    pthread_mutex_lock(&step_mu);
    if (exiting.load(std::memory_order_acquire)) {
      pthread_mutex_unlock(&step_mu);
      return false;
    }
    return true;
  }
  void LeaveStep() override { pthread_mutex_unlock(&step_mu); }
};

std::atomic<Uploader*> g_uploader{nullptr};
// Set in a forked child: the parent's Uploader (immutable parts only are
// read) to clone when the child seals its first segment.
std::atomic<Uploader*> g_restart_from{nullptr};
std::atomic<uint64_t> g_forked_at_ns{0};  // CLOCK_MONOTONIC of the fork, in a child
// Our own descriptors on the pinned uid-N directory: made by the seal hook
// (pending), then adopted by the queue. Atomics so that a forked child can
// close the parent's (UploaderAtFork); its own uploader reopens.
std::atomic<int> g_pin_pending{-1};
std::atomic<int> g_pin_adopted{-1};
// The process went back to root (output_dir.h unpinned): the queue leaves
// uid-N for OUTPUT. Set by the seal hook, taken by the upload thread.
std::atomic<bool> g_unpin_pending{false};

// Logs each distinct cause once per process: an outage or a bad key gives
// one line, not one per segment or per retry.
void LogOnceForCause(Uploader* u, const std::string& cause, LogLevel level, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));
void LogOnceForCause(Uploader* u, const std::string& cause, LogLevel level, const char* fmt, ...) {
  if (u->logged_causes.count(cause) || u->logged_causes.size() >= kMaxLoggedCauses) return;
  u->logged_causes.insert(cause);
  char line[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  Log(level, "%s", line);
}

void ReportFailure(Uploader* u, const S3Result& r, const CredentialProvider& provider) {
  std::string cause = r.Cause(), detail_text = r.detail;
  provider.Scrub(&cause);  // a server's <Code> or <Message> may echo any token we ever held
  provider.Scrub(&detail_text);
  const char* detail = detail_text.c_str();
  const char* sep = r.detail.empty() ? "" : " - ";
  if (r.local_error) {
    LogOnceForCause(u, cause, LogLevel::kWarn, "S3 upload skipped a segment in %s: %s", u->queue.where().c_str(),
                    cause.c_str());
  } else if (r.not_sent) {
    LogOnceForCause(u, cause, LogLevel::kWarn, "S3 upload to bucket %s: %s; segments stay in %s", u->bucket.c_str(),
                    cause.c_str(), u->queue.where().c_str());
  } else if (r.verdict == Verdict::kFatal) {
    LogOnceForCause(u, cause, LogLevel::kWarn,
                    "S3 upload to bucket %s rejected: %s%s%s; check credentials, bucket and region. Segments stay "
                    "in %s; retrying later",
                    u->bucket.c_str(), cause.c_str(), sep, detail, u->queue.where().c_str());
  } else {
    LogOnceForCause(u, cause, LogLevel::kWarn,
                    "S3 unavailable (%s after %u attempts); segments stay in %s and are uploaded when it is back",
                    cause.c_str(), r.attempts, u->queue.where().c_str());
  }
}

// S3's answers that mean "these credentials, not this request": temporary
// credentials are fetched again at once instead of waiting out a fatal backoff.
bool CredentialsRejected(const std::string& code) {
  return code == "ExpiredToken" || code == "TokenRefreshRequired" || code == "InvalidToken" ||
         code == "InvalidAccessKeyId";
}

// Hands the client usable credentials before a request: refreshes temporary
// ones when due (here, on the upload thread). False when there are none;
// the segments then stay queued and the cause is logged once.
bool EnsureCredentials(Uploader* u, S3Client* client, CredentialProvider* provider, bool shutting) {
  Credentials credentials;
  bool changed = false;
  std::string error;
  const CredentialProvider::Status status = provider->Get(shutting, &credentials, &changed, &error);
  if (status == CredentialProvider::Status::kReady) {
    // A refresh failed but the current credentials still work: said once
    // now (under the same cause as the "unavailable" line below, so a
    // failure that outlasts them still gives one line in all).
    if (!error.empty())
      LogOnceForCause(u, "credentials: " + error, LogLevel::kWarn,
                      "S3 credentials could not be refreshed (%s); the current ones are used until they expire, "
                      "then segments stay in %s until a refresh succeeds",
                      error.c_str(), u->queue.where().c_str());
    if (changed) {
      client->SetCredentials(credentials);
      if (provider->temporary())
        Log(LogLevel::kDebug, "S3 credentials from %s, valid until %lld (Unix time)",
            CredentialSourceName(provider->source()), static_cast<long long>(provider->expires_at()));
    }
    credentials.Clear();
    return true;
  }
  if (status == CredentialProvider::Status::kWait) {
    LogOnceForCause(u, "credentials: " + error, LogLevel::kWarn,
                    "S3 credentials unavailable (%s); segments stay in %s and are uploaded once credentials "
                    "are back",
                    error.c_str(), u->queue.where().c_str());
    u->queue.OnFailure(Verdict::kRetry, MonotonicNs(), u->random.Next());
  }
  return false;
}

// Uploads queued segments oldest first until the queue is empty, S3 fails,
// or we must stop. While `shutting`, the outage backoff is ignored: exit is
// the last chance this process gets.
void RunRound(Uploader* u, S3Client* client, CredentialProvider* provider, bool shutting) {
  for (;;) {
    if (u->ShouldStop()) return;
    if (!shutting && MonotonicNs() < u->queue.next_attempt_ns()) return;
    if (u->queue.size() == 0) return;  // nothing to ship: no credentials fetched for nothing
    if (!EnsureCredentials(u, client, provider, shutting)) return;
    PendingSegment segment;
    if (!u->queue.PopOldest(&segment)) return;
    ClaimedSegment claimed;
    if (u->queue.Claim(segment, &claimed) != ClaimStatus::kClaimed) continue;  // busy, gone, shipped: not ours

    std::string service, incident, pid;
    time_t when = 0, incident_when = 0;
    if (!ParseSegmentName(claimed.name, &service, &when, &incident, &incident_when, &pid)) {
      service = u->own_service;
      when = static_cast<time_t>(claimed.mtime_seconds);
      incident.clear();
    }
    // Window mode's kept segments go under a folder naming their incident.
    const std::string key =
        incident.empty() ? SegmentKey(u->prefix, service, when, u->host, claimed.name)
                         : IncidentSegmentKey(u->prefix, service, incident_when, u->host, incident, pid, claimed.name);
    if (!IsProtectedFd(claimed.fd)) {
      // The program dup2'd over the segment's descriptor since the claim:
      // the number is its file now, never to be read or sent (fd_guard.h).
      u->queue.Release(&claimed);
      continue;
    }
    S3Result r = client->UploadFile(key, claimed.fd, claimed.size);
    if (r.ok()) {
      std::string error;
      if (!u->queue.Finish(&claimed, u->keep_local, &error))
        LogOnceForCause(u, "finish", LogLevel::kWarn, "%s", error.c_str());
      if (u->queue.consecutive_failures() > 0) Log(LogLevel::kInfo, "S3 upload resumed");
      u->queue.OnSuccess();
      u->uploaded++;
      Log(LogLevel::kDebug, "uploaded %s (%llu bytes) to s3://%s/%s", claimed.name.c_str(),
          static_cast<unsigned long long>(claimed.size), u->bucket.c_str(), key.c_str());
      continue;
    }
    u->queue.Release(&claimed);
    if (r.local_error) {  // this file's problem, not S3's: the next rescan offers it again
      ReportFailure(u, r, *provider);
      continue;
    }
    u->queue.Return(segment);
    if (r.verdict == Verdict::kAborted) return;
    const bool refetch = r.verdict == Verdict::kFatal && provider->temporary() && CredentialsRejected(r.error_code);
    if (!refetch) ReportFailure(u, r, *provider);  // expired temporary keys are routine: refreshed, not reported
    u->queue.OnFailure(refetch ? Verdict::kRetry : r.verdict, MonotonicNs(), u->random.Next());
    // Expired session tokens and rotated files are the common 403: look again before the next attempt.
    if (r.verdict == Verdict::kFatal) provider->Invalidate();
    return;
  }
}

// Upload thread: the process dropped root and records in OUTPUT/uid-N now;
// ship from there, through the descriptor the seal hook made while it could.
bool AdoptPinnedDir(Uploader* u) {
  bool moved = false;
  if (g_unpin_pending.exchange(false, std::memory_order_acq_rel)) {
    u->queue.LeavePinnedDir();
    g_pin_adopted.store(-1, std::memory_order_release);  // closed by the queue
    Log(LogLevel::kDebug, "uploading from %s", u->queue.where().c_str());
    moved = true;
  }
  pthread_mutex_lock(&u->mu);
  const int fd = g_pin_pending.exchange(-1, std::memory_order_acq_rel);
  const std::string subdir = u->pending_subdir;
  pthread_mutex_unlock(&u->mu);
  if (fd < 0) return moved;
  g_pin_adopted.store(-1, std::memory_order_release);  // the queue closes the one it had
  if (!u->queue.UsePinnedDir(fd, subdir)) return moved;
  g_pin_adopted.store(fd, std::memory_order_release);
  Log(LogLevel::kDebug, "uploading from %s", u->queue.where().c_str());
  return true;
}

void Rescan(Uploader* u) {
  std::string error;
  u->queue.Rescan(&error);
  if (!error.empty()) LogOnceForCause(u, "scan", LogLevel::kInfo, "%s", error.c_str());
}

void Run(Uploader* u) {
  u->random = JitterRandom(MonotonicNs() ^ (static_cast<uint64_t>(getpid()) << 20));
  // libcurl and OpenSSL: loaded and initialised here, on this thread, never
  // on the program's (S3Client::GlobalInit; fenced against the program's
  // fork). Refused when the environment would make them block or log our
  // TLS keys; the program's own use of them is untouched.
  // Inside the step fence, like every libcurl call: an exiting process
  // (OpenSSL's own atexit cleanup, if the program registered it) never
  // runs while we are in there, past the shutdown hook's deadline.
  if (!u->EnterStep()) return;
  std::string libs_error;
  const bool libs_ok = S3Client::GlobalInit(&libs_error);
  u->LeaveStep();
  if (!libs_ok) {
    Log(LogLevel::kWarn, "S3 upload off: %s; segments stay in %s", libs_error.c_str(), u->queue.where().c_str());
    return;
  }
  // Declared before the client: destroyed after it, both inside the step fence.
  CredentialProvider provider(u->cred_env, u->endpoint.region, u);
  std::string error;
  if (provider.Select(&error) == CredentialSource::kNone) {
    // Nothing configured (and instance metadata disabled): no request of any kind is made.
    Log(LogLevel::kWarn, "S3 upload off: no AWS credentials (%s); segments stay in %s", error.c_str(),
        u->queue.where().c_str());
    return;
  }
  Log(LogLevel::kInfo, "uploading sealed segments to s3://%s/%s via %s://%s (credentials from %s)", u->bucket.c_str(),
      u->prefix.c_str(), u->endpoint.scheme.c_str(), u->endpoint.host.c_str(), provider.Describe().c_str());
  S3Client client(u->endpoint, Credentials(), u->options, u);
  if (!client.ok()) {
    Log(LogLevel::kWarn, "S3 upload off: libcurl handles unavailable");
    return;
  }

  uint64_t next_rescan = 0;
  for (;;) {
    const bool pending = u->queue.size() > 0;
    bool shutting;
    pthread_mutex_lock(&u->mu);
    for (;;) {
      RecorderCapsApply();  // the program's capset, made on this thread too
      if (u->shutdown) break;
      const uint64_t now = MonotonicNs();
      if (now >= next_rescan) break;
      const bool work = u->wake || pending;
      if (work && now >= u->queue.next_attempt_ns()) break;
      uint64_t target = next_rescan;
      if (work && u->queue.next_attempt_ns() < target) target = u->queue.next_attempt_ns();
      const timespec ts = NsToTimespec(target);
      pthread_cond_timedwait(&u->cv, &u->mu, &ts);
    }
    u->wake = false;
    shutting = u->shutdown;
    pthread_mutex_unlock(&u->mu);

    // At exit too: forked children and other processes may have left segments.
    const bool moved = AdoptPinnedDir(u);
    if (shutting || moved || MonotonicNs() >= next_rescan) {
      Rescan(u);
      next_rescan = MonotonicNs() + kRescanNs;
    }
    RunRound(u, &client, &provider, shutting);
    if (shutting) {
      const size_t left = u->queue.size();
      if (left)
        Log(LogLevel::kWarn, "exit: %zu sealed segment(s) not uploaded; left in %s for a later run", left,
            u->queue.where().c_str());
      return;  // ~S3Client leaves libcurl alone once `exiting` is set
    }
  }
}

// The program made a capset (recorder_caps.h): out of the wait, to take it on.
void WakeForCaps() {
  Uploader* u = g_uploader.load(std::memory_order_acquire);
  if (!u) return;
  pthread_mutex_lock(&u->mu);
  pthread_cond_broadcast(&u->cv);
  pthread_mutex_unlock(&u->mu);
}

void* ThreadMain(void* arg) {
  auto* u = static_cast<Uploader*>(arg);
  RecorderCapsSetWaker(&WakeForCaps);
  Run(u);
  pthread_mutex_lock(&u->mu);
  u->drained = true;
  pthread_cond_broadcast(&u->cv);
  pthread_mutex_unlock(&u->mu);
  return nullptr;
}

bool Start(Uploader* u) {
  pthread_t thread;
  // CreateRecorderThread blocks every signal for the new thread, names it,
  // and has it call MarkRecorderThread() before ThreadMain runs.
  const int rc = CreateRecorderThread(&thread, "flightrec-upload", ThreadMain, u);
  if (rc != 0) {
    if (rc != kRefusedForNproc) Log(LogLevel::kWarn, "S3 upload off: cannot start its thread: %s", strerror(rc));
    return false;
  }
  pthread_detach(thread);
  g_uploader.store(u, std::memory_order_release);
  return true;
}

Uploader* CloneForChild(const Uploader* parent) {
  auto* u = new Uploader(parent->queue.dir(), parent->allow_foreign);
  u->prefix = parent->prefix;
  u->own_service = parent->own_service;
  u->host = parent->host;
  u->bucket = parent->bucket;
  u->keep_local = parent->keep_local;
  u->endpoint = parent->endpoint;
  u->cred_env = parent->cred_env;
  u->options = parent->options;
  return u;
}

// Seal hook: the segment was sealed in the pinned OUTPUT/uid-N (this process
// dropped root), new to this uploader. Only the writer's owner may look at
// the pinned directory, so the descriptor for the thread is made here.
void HandOverPinnedDir(Uploader* u, const std::string& sealed_path) {
  if (!OutputDirPinned()) {
    if (u->handed_pin_path.empty()) return;
    // Back to root (seteuid(0)): sealed in OUTPUT again, shipped from there.
    u->handed_pin_path.clear();
    CloseTransientFd(g_pin_pending.exchange(-1, std::memory_order_acq_rel));  // never adopted: still ours
    g_unpin_pending.store(true, std::memory_order_release);
    return;
  }
  const size_t slash = sealed_path.rfind('/');
  if (slash == std::string::npos || sealed_path.compare(0, slash, u->handed_pin_path) == 0) return;
  std::string path;
  const int fd = ReopenPinnedOutputDir(&path);  // one of ours: high and protected
  if (fd < 0) return;
  u->handed_pin_path = path;
  pthread_mutex_lock(&u->mu);
  u->pending_subdir = path.substr(path.rfind('/') + 1);
  const int stale = g_pin_pending.exchange(fd, std::memory_order_acq_rel);
  pthread_mutex_unlock(&u->mu);
  CloseTransientFd(stale);  // never adopted: still ours
}

// Flush thread, once per sealed segment. Enqueue and signal; never blocks.
void SealHook(const std::string& sealed_path) {
  if (g_restart_from.load(std::memory_order_acquire) &&
      MonotonicNs() - g_forked_at_ns.load(std::memory_order_acquire) >= kChildUploaderAfterNs) {
    if (Uploader* parent = g_restart_from.exchange(nullptr, std::memory_order_acq_rel)) {
      if (!Start(CloneForChild(parent))) return;  // a long-lived forked child: its own thread
    }
  }
  Uploader* u = g_uploader.load(std::memory_order_acquire);
  if (!u) return;
  HandOverPinnedDir(u, sealed_path);
  u->queue.Push(sealed_path);
  pthread_mutex_lock(&u->mu);
  u->wake = true;
  pthread_cond_broadcast(&u->cv);  // the shutdown hook may wait on cv too: wake everyone
  pthread_mutex_unlock(&u->mu);
}

// At exit, after the final seal: ship what we can until the deadline, then
// fence libcurl off and return. Returns by `deadline` whatever S3 does.
void ShutdownHook(uint64_t deadline) {
  Uploader* u = g_uploader.load(std::memory_order_acquire);
  if (!u) return;
  const uint64_t now = MonotonicNs();
  uint64_t guard = deadline > now ? (deadline - now) / 4 : 0;
  if (guard > kExitGuardNs) guard = kExitGuardNs;
  const uint64_t stop = deadline > now + guard ? deadline - guard : now;
  pthread_mutex_lock(&u->mu);
  u->stop_at_ns.store(stop ? stop : 1, std::memory_order_release);
  u->shutdown = true;
  pthread_cond_broadcast(&u->cv);
  const timespec ts = NsToTimespec(deadline);
  while (!u->drained)
    if (pthread_cond_timedwait(&u->cv, &u->mu, &ts) == ETIMEDOUT) break;
  pthread_mutex_unlock(&u->mu);
  // A step in flight ends within poll_ms of stop_at; wait for it, but never past the deadline.
  // trylock and short sleeps rather than pthread_mutex_clocklock: TSan does
  // not intercept clocklock and then reports our unlock as unpaired.
  bool locked = pthread_mutex_trylock(&u->step_mu) == 0;
  while (!locked && MonotonicNs() < deadline) {
    SleepNs(1000 * 1000);
    locked = pthread_mutex_trylock(&u->step_mu) == 0;
  }
  u->exiting.store(true, std::memory_order_release);
  if (locked) pthread_mutex_unlock(&u->step_mu);
}

std::string HostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0 || !buf[0]) return "unknown";
  return buf;
}

}  // namespace

namespace {

// "yyyymmddThhmmss[.mmm]Z" as UTC seconds; false for any other shape.
bool ParseStamp(std::string_view stamp, time_t* utc_seconds) {
  auto digits = [](std::string_view s) {
    if (s.empty()) return false;
    for (char c : s)
      if (c < '0' || c > '9') return false;
    return true;
  };
  if (stamp.size() < 16 || stamp[8] != 'T' || stamp.back() != 'Z' || !digits(stamp.substr(0, 8)) ||
      !digits(stamp.substr(9, 6)))
    return false;
  struct tm tm;
  memset(&tm, 0, sizeof(tm));
  auto num = [&](size_t at, size_t n) {
    int v = 0;
    for (size_t i = 0; i < n; i++) v = v * 10 + (stamp[at + i] - '0');
    return v;
  };
  tm.tm_year = num(0, 4) - 1900;
  tm.tm_mon = num(4, 2) - 1;
  tm.tm_mday = num(6, 2);
  tm.tm_hour = num(9, 2);
  tm.tm_min = num(11, 2);
  tm.tm_sec = num(13, 2);
  if (tm.tm_mon < 0 || tm.tm_mon > 11 || tm.tm_mday < 1 || tm.tm_mday > 31) return false;
  *utc_seconds = timegm(&tm);
  return true;
}

}  // namespace

bool ParseSegmentName(std::string_view name, std::string* service, time_t* utc_seconds, std::string* incident,
                      time_t* incident_utc_seconds, std::string* pid) {
  if (name.size() < 5 || name.substr(name.size() - 4) != ".seg") return false;
  name.remove_suffix(4);
  std::string_view tag;
  if (const size_t at = name.find('@'); at != std::string_view::npos) {
    tag = name.substr(at + 1);
    name = name.substr(0, at);
    time_t when;
    if (!ParseStamp(tag, &when)) return false;
    if (incident_utc_seconds) *incident_utc_seconds = when;
  }
  if (incident) *incident = std::string(tag);
  std::string_view parts[4];
  for (int i = 0; i < 4; i++) {
    const size_t dash = name.find('-');
    if (i < 3 && dash == std::string_view::npos) return false;
    if (i == 3 && dash != std::string_view::npos) return false;
    parts[i] = name.substr(0, dash);
    name = dash == std::string_view::npos ? std::string_view() : name.substr(dash + 1);
  }
  auto digits = [](std::string_view s) {
    if (s.empty()) return false;
    for (char c : s)
      if (c < '0' || c > '9') return false;
    return true;
  };
  if (parts[1].empty() || !digits(parts[2]) || !digits(parts[3])) return false;
  if (!ParseStamp(parts[0], utc_seconds)) return false;
  if (pid) *pid = std::string(parts[2]);
  *service = std::string(parts[1]);
  return true;
}

}  // namespace uploader

void UploaderInit(const Config& config) {
  using namespace uploader;
  if (config.s3_bucket.empty()) return;
  // Nothing here loads or initialises libcurl or OpenSSL: that reads files
  // the environment names (OPENSSL_CONF may be a FIFO) and would block the
  // program's start. The upload thread does it first thing (Run).

  EndpointSettings settings{config.s3_bucket, config.s3_region, config.s3_endpoint, config.s3_path_style};
  S3Endpoint endpoint;
  std::string error;
  if (!ResolveS3Endpoint(settings, EndpointEnvFrom(environ), &endpoint, &error)) {
    Log(LogLevel::kWarn, "S3 upload off: %s", error.c_str());
    return;
  }
  auto* u = new Uploader(config.output, config.allow_foreign_dir);
  u->prefix = config.s3_prefix;
  u->own_service = config.service.empty() ? program_invocation_short_name : config.service;
  u->host = HostName();
  u->bucket = config.s3_bucket;
  u->keep_local = config.keep_local;
  u->endpoint = endpoint;
  u->cred_env = CredentialEnvFrom(environ);  // snapshot now: the host may setenv() later
  u->options.multipart_threshold = config.s3_multipart_bytes;
  u->options.sse = config.s3_sse;
  u->options.sse_kms_key_id = config.s3_sse_kms_key_id;
  u->options.storage_class = config.s3_storage_class;
  RegisterSealHook(SealHook);
  RegisterShipHook(SealHook);  // window mode: kept for an incident after its seal
  RegisterShutdownHook(ShutdownHook);
  Start(u);
}

void UploaderAtFork() {
  using namespace uploader;
  // Async-signal-safe: atomics and clock_gettime. The parent's thread does not
  // exist here and its mutexes may be held forever; never touch them again.
  Uploader* parent = g_uploader.exchange(nullptr, std::memory_order_acq_rel);
  if (parent) {
    g_forked_at_ns.store(MonotonicNs(), std::memory_order_release);
    g_restart_from.store(parent, std::memory_order_release);
  }
  // The parent's descriptors on its uid-N: this child's uploader makes its own.
  CloseTransientFd(g_pin_pending.exchange(-1, std::memory_order_acq_rel));
  CloseTransientFd(g_pin_adopted.exchange(-1, std::memory_order_acq_rel));
}

}  // namespace flightrec
