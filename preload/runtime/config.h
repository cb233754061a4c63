// Config: every FLIGHTREC_* knob, parsed once at init from the environment.
//
// A bad value never stops the host: Parse() logs one line naming the
// variable, the bad value and the default used, and keeps the default.
// Unknown FLIGHTREC_* names are reported once each. docs/CONFIG.md lists
// every field here with its default; keep the two in step.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace flightrec {

enum class LogLevel { kQuiet = 0, kWarn = 1, kInfo = 2, kDebug = 3 };
enum class SamplerMode { kAuto, kPerf, kSigprof, kOff };

struct Config {
  // runtime (foundation)
  bool enable = true;                     // FLIGHTREC_ENABLE
  LogLevel log = LogLevel::kWarn;         // FLIGHTREC_LOG
  std::string output = "/tmp/flightrec";  // FLIGHTREC_OUTPUT
  std::string service;                    // FLIGHTREC_SERVICE (default: exe basename)
  // 256 KiB: a server thread doing ~100k socket calls/s (redis) writes 64 KiB
  // in ~13 ms, which a niced flush thread on a busy machine did not always
  // drain in time (socket.op records dropped); pages are touched only as
  // records are written, so quiet threads do not pay for the size.
  uint64_t ring_bytes = 256 * 1024;      // FLIGHTREC_RING_BYTES (power of two, 4 KiB..64 MiB)
  uint64_t flush_ms = 50;                // FLIGHTREC_FLUSH_MS
  uint64_t rusage_ms = 1000;             // FLIGHTREC_RUSAGE_MS (0 = off)
  uint64_t segment_bytes = 16ull << 20;  // FLIGHTREC_SEGMENT_BYTES
  uint64_t segment_seconds = 60;         // FLIGHTREC_SEGMENT_SECONDS
  uint64_t max_disk_bytes = 1ull << 30;  // FLIGHTREC_MAX_DISK_BYTES
  bool record_cmdline = true;            // FLIGHTREC_RECORD_CMDLINE
  bool record_env = false;               // FLIGHTREC_RECORD_ENV
  bool crash = true;                     // FLIGHTREC_CRASH
  bool allow_foreign_dir = false;        // FLIGHTREC_ALLOW_FOREIGN_DIR

  // flight-recorder (window) mode and triggers (preload/flush/window_keeper.h)
  bool window_mode = false;             // FLIGHTREC_MODE=continuous|window
  uint64_t window_seconds = 300;        // FLIGHTREC_WINDOW_SECONDS
  uint64_t trigger_after_seconds = 10;  // FLIGHTREC_TRIGGER_AFTER_SECONDS
  uint64_t trigger_slow_ms = 0;         // FLIGHTREC_TRIGGER_SLOW_MS (0 = off; with rules: the smallest)
  std::string trigger_slow_rules;       // FLIGHTREC_TRIGGER_SLOW_MS as per-endpoint rules ("" = plain ms)
  uint64_t trigger_rss_mb = 0;          // FLIGHTREC_TRIGGER_RSS_MB (0 = off)

  // allocations
  uint64_t alloc_sample_bytes = 524288;    // FLIGHTREC_ALLOC_SAMPLE_BYTES (0 = off, 1 = all)
  uint64_t alloc_table_entries = 1 << 16;  // FLIGHTREC_ALLOC_TABLE_ENTRIES (live sampled blocks tracked)

  // CPU / off-CPU sampling
  SamplerMode sampler = SamplerMode::kAuto;  // FLIGHTREC_SAMPLER=auto|perf|sigprof|off
  uint64_t cpu_hz = 99;                      // FLIGHTREC_CPU_HZ
  uint64_t stack_copy_bytes = 16384;         // FLIGHTREC_STACK_COPY_BYTES
  bool offcpu = true;                        // FLIGHTREC_OFFCPU
  // The collection (unwinding the copied stacks) on the flush thread (0,
  // one recorder thread) or on a thread of its own (1) (sampler_thread.h).
  bool sampler_thread = false;    // FLIGHTREC_SAMPLER_THREAD
  uint64_t offcpu_min_us = 1000;  // FLIGHTREC_OFFCPU_MIN_US
  // Inflated copies of compressed debug files, shared by every process
  // (sampler/symbols/debug_file_cache.h): "" = /var/tmp/flightrec-debug-<euid>,
  // "off", or an absolute directory.
  std::string debug_cache;                      // FLIGHTREC_DEBUG_CACHE
  uint64_t debug_cache_max_bytes = 1ull << 30;  // FLIGHTREC_DEBUG_CACHE_MAX_BYTES

  // sockets
  bool sockets = true;             // FLIGHTREC_SOCKETS
  bool socket_calls = false;       // FLIGHTREC_SOCKETS=calls: one record per call, not per exchange
  uint64_t acceptq_ms = 1000;      // FLIGHTREC_ACCEPTQ_MS (0 = off)
  bool socket_tsc = true;          // FLIGHTREC_SOCKET_TSC (0 = clock_gettime)
  bool socket_direct = true;       // FLIGHTREC_SOCKET_DIRECT (0 = always through libc)
  std::string endpoints = "on";    // FLIGHTREC_ENDPOINTS: on, off, or http,redis,postgres
  bool trace_context = false;      // FLIGHTREC_TRACE_CONTEXT (traceparent, x-request-id)
  uint64_t endpoint_names = 1000;  // FLIGHTREC_ENDPOINT_NAMES (distinct names kept per process)

  // S3 upload
  std::string s3_bucket;                      // FLIGHTREC_S3_BUCKET (empty = no upload)
  std::string s3_prefix = "flightrec";        // FLIGHTREC_S3_PREFIX
  std::string s3_region;                      // FLIGHTREC_S3_REGION (else AWS_REGION, ...)
  std::string s3_endpoint;                    // FLIGHTREC_S3_ENDPOINT (else AWS_ENDPOINT_URL_S3, ...)
  int s3_path_style = -1;                     // FLIGHTREC_S3_PATH_STYLE (-1 = auto)
  uint64_t s3_multipart_bytes = 64ull << 20;  // FLIGHTREC_S3_MULTIPART_BYTES
  std::string s3_sse;                         // FLIGHTREC_S3_SSE: "", "AES256" or "aws:kms"
  std::string s3_sse_kms_key_id;              // FLIGHTREC_S3_SSE_KMS_KEY_ID (implies aws:kms)
  std::string s3_storage_class;               // FLIGHTREC_S3_STORAGE_CLASS ("" = the bucket's default)
  bool keep_local = false;                    // FLIGHTREC_KEEP_LOCAL
  uint64_t upload_shutdown_ms = 3000;         // FLIGHTREC_UPLOAD_SHUTDOWN_MS
};

// Parses `envp` (NULL-terminated, like environ). Messages go to `messages`
// (one per problem, already formatted "flightrec: ..."), so the caller
// decides where and whether to print them. Pure: usable from unit tests.
Config ParseConfig(const char* const* envp, std::vector<std::string>* messages);

// The process-wide config, set once by the runtime at init.
const Config& GetConfig();
void SetConfig(const Config& config);

}  // namespace flightrec
