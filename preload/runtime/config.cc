// Config parsing: turns FLIGHTREC_* environment variables into a Config.
// Every problem becomes one message naming the variable, the bad value and
// the default kept; nothing here can stop the host.
#include "preload/runtime/config.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

namespace flightrec {
namespace {

// Never destroyed: Shutdown reads it at exit, and the order of exit handlers
// against static destructors is not ours to choose (under TSan's atexit
// interceptor ~Config ran first and Shutdown read the freed output path).
union ImmortalConfig {
  Config value;
  ImmortalConfig() : value() {}
  ~ImmortalConfig() {}
};
ImmortalConfig g_config;

// A value as it appears in a message: one line, printable, bounded. Control
// bytes and non-ASCII bytes become \xNN, so a value holding a newline or
// binary junk still yields exactly one readable line; long values are cut.
std::string Shown(const std::string& text) {
  constexpr size_t kMaxShown = 64;
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (out.size() >= kMaxShown) {
      out += "...(" + std::to_string(text.size()) + " bytes)";
      break;
    }
    const unsigned char ch = static_cast<unsigned char>(text[i]);
    if (ch < 0x20 || ch >= 0x7f || ch == '\\' || ch == '\'') {
      out += "\\x";
      out.push_back(kHex[ch >> 4]);
      out.push_back(kHex[ch & 15]);
    } else {
      out.push_back(static_cast<char>(ch));
    }
  }
  return out;
}

struct Ctx {
  std::vector<std::string>* messages;
  void Say(std::string msg) {
    if (messages) messages->push_back("flightrec: " + std::move(msg));
  }
};

bool ParseU64Text(const std::string& text, uint64_t* out) {
  if (text.empty()) return false;
  // Accept a plain decimal with an optional binary suffix (k, m, g) for byte sizes.
  uint64_t value = 0;
  size_t i = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    const uint64_t digit = static_cast<uint64_t>(text[i] - '0');
    if (value > (UINT64_MAX - digit) / 10) return false;
    value = value * 10 + digit;
  }
  if (i == 0) return false;
  if (i < text.size()) {
    uint64_t mul = 0;
    switch (text[i]) {
      case 'k':
      case 'K': mul = 1ull << 10; break;
      case 'm':
      case 'M': mul = 1ull << 20; break;
      case 'g':
      case 'G': mul = 1ull << 30; break;
      default: return false;
    }
    ++i;
    if (i < text.size() && (text[i] == 'i' || text[i] == 'I')) ++i;
    if (i < text.size() && (text[i] == 'b' || text[i] == 'B')) ++i;
    if (i != text.size()) return false;
    if (value > UINT64_MAX / mul) return false;
    value *= mul;
  }
  *out = value;
  return true;
}

void U64(Ctx& c, const char* name, const std::string& text, uint64_t* field, uint64_t lo, uint64_t hi) {
  uint64_t v = 0;
  if (!ParseU64Text(text, &v)) {
    c.Say(std::string(name) + "='" + Shown(text) + "' is not a number; using " + std::to_string(*field));
    return;
  }
  if (v < lo || v > hi) {
    c.Say(std::string(name) + "='" + Shown(text) + "' is out of range [" + std::to_string(lo) + ", " +
          std::to_string(hi) + "]; using " + std::to_string(*field));
    return;
  }
  *field = v;
}

void Bool(Ctx& c, const char* name, const std::string& text, bool* field) {
  std::string t;
  for (char ch : text) t.push_back(static_cast<char>(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch));
  if (t == "1" || t == "true" || t == "yes" || t == "on") {
    *field = true;
    return;
  }
  if (t == "0" || t == "false" || t == "no" || t == "off") {
    *field = false;
    return;
  }
  c.Say(std::string(name) + "='" + Shown(text) + "' is not a boolean (0/1); using " + (*field ? "1" : "0"));
}

enum class Empty : bool { kRefused = false, kAllowed = true };
void Str(Ctx& c, const char* name, const std::string& text, std::string* field, Empty empty) {
  if (text.empty() && empty == Empty::kRefused) {
    c.Say(std::string(name) + "='' is empty; using '" + *field + "'");
    return;
  }
  if (text.size() > 4096) {
    c.Say(std::string(name) + " is longer than 4096 bytes; using '" + *field + "'");
    return;
  }
  *field = text;
}

// S3 object settings go into signed request headers: one of a fixed list,
// or (a KMS key id/ARN/alias) printable ASCII with no spaces.
void OneOf(Ctx& c, const char* name, const std::string& text, std::string* field,
           std::initializer_list<const char*> allowed) {
  for (const char* a : allowed)
    if (text == a) {
      *field = text;
      return;
    }
  std::string list;
  for (const char* a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
  c.Say(std::string(name) + "='" + Shown(text) + "' is not one of " + list + "; using '" + *field + "'");
}

void HeaderToken(Ctx& c, const char* name, const std::string& text, std::string* field) {
  bool ok = !text.empty() && text.size() <= 2048;
  for (char ch : text) ok = ok && ch > 0x20 && ch < 0x7f;
  if (!ok) {
    c.Say(std::string(name) + "='" + Shown(text) + "' is not a key id, ARN or alias; using '" + *field + "'");
    return;
  }
  *field = text;
}

bool IsPowerOfTwo(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

std::string Trimmed(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && s[a] == ' ') ++a;
  while (b > a && s[b - 1] == ' ') --b;
  return s.substr(a, b - a);
}

// FLIGHTREC_ENDPOINTS: on/off or a list of classifiers
// (preload/sockets/decode/endpoint_classify.h parses it again at init).
void Endpoints(Ctx& c, const char* name, const std::string& text, std::string* field) {
  std::string t;
  for (char ch : text) t.push_back(static_cast<char>(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch));
  static const char* const kWords[] = {"1", "0", "on", "off", "true", "false", "yes", "no", "all"};
  for (const char* w : kWords)
    if (t == w) {
      *field = t;
      return;
    }
  bool ok = !t.empty() && t.size() <= 256;
  size_t at = 0;
  while (ok) {
    const size_t comma = t.find(',', at);
    const std::string item = Trimmed(t.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
    ok = item == "http" || item == "redis" || item == "postgres" || item == "pg" || item == "postgresql";
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  if (ok) {
    *field = t;
    return;
  }
  c.Say(std::string(name) + "='" + Shown(text) + "' is not on, off or a list of http, redis, postgres; using '" +
        *field + "'");
}

// FLIGHTREC_TRIGGER_SLOW_MS: a number of ms, or rules "GET /api/*=200,*=1000"
// (checked here; preload/sockets/decode/endpoint_names.h applies them).
void SlowMs(Ctx& c, const char* name, const std::string& text, uint64_t* ms, std::string* rules) {
  uint64_t v = 0;
  if (ParseU64Text(text, &v) || text.find('=') == std::string::npos) {
    U64(c, name, text, ms, 0, 3600000);
    rules->clear();
    return;
  }
  uint64_t least = 0;
  bool ok = text.size() <= 4096;
  size_t at = 0;
  while (ok) {
    const size_t comma = text.find(',', at);
    const std::string item = Trimmed(text.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
    const size_t eq = item.rfind('=');
    uint64_t r = 0;
    ok = eq != std::string::npos && !Trimmed(item.substr(0, eq)).empty() &&
         ParseU64Text(Trimmed(item.substr(eq + 1)), &r) && r <= 3600000;
    if (ok && r && (!least || r < least)) least = r;
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  if (!ok) {
    c.Say(std::string(name) + "='" + Shown(text) +
          "' is neither a number of ms nor rules like 'GET /api/*=200,*=1000'; using " + std::to_string(*ms));
    return;
  }
  *ms = least;
  *rules = text;
}

}  // namespace

Config ParseConfig(const char* const* envp, std::vector<std::string>* messages) {
  Config cfg;
  Ctx c{messages};
  if (!envp) return cfg;
  for (const char* const* e = envp; *e; ++e) {
    const char* entry = *e;
    if (strncmp(entry, "FLIGHTREC_", 10) != 0) continue;
    const char* eq = strchr(entry, '=');
    if (!eq) continue;
    const std::string name(entry, static_cast<size_t>(eq - entry));
    const std::string v(eq + 1);
    const char* n = name.c_str();
    if (name == "FLIGHTREC_ENABLE") Bool(c, n, v, &cfg.enable);
    else if (name == "FLIGHTREC_LOG") {
      if (v == "quiet") cfg.log = LogLevel::kQuiet;
      else if (v == "warn") cfg.log = LogLevel::kWarn;
      else if (v == "info") cfg.log = LogLevel::kInfo;
      else if (v == "debug") cfg.log = LogLevel::kDebug;
      else c.Say(name + "='" + Shown(v) + "' is not one of quiet|warn|info|debug; using warn");
    } else if (name == "FLIGHTREC_OUTPUT") Str(c, n, v, &cfg.output, Empty::kRefused);
    else if (name == "FLIGHTREC_SERVICE") Str(c, n, v, &cfg.service, Empty::kAllowed);
    else if (name == "FLIGHTREC_RING_BYTES") {
      uint64_t rb = cfg.ring_bytes;
      U64(c, n, v, &rb, 4096, 64ull << 20);
      if (!IsPowerOfTwo(rb)) {
        uint64_t p = 4096;
        while (p < rb) p <<= 1;
        c.Say(name + "='" + Shown(v) + "' is not a power of two; using " + std::to_string(p));
        rb = p;
      }
      cfg.ring_bytes = rb;
    } else if (name == "FLIGHTREC_FLUSH_MS") U64(c, n, v, &cfg.flush_ms, 1, 10000);
    else if (name == "FLIGHTREC_RUSAGE_MS") U64(c, n, v, &cfg.rusage_ms, 0, 3600000);
    else if (name == "FLIGHTREC_SEGMENT_BYTES") U64(c, n, v, &cfg.segment_bytes, 64 << 10, 1ull << 40);
    else if (name == "FLIGHTREC_SEGMENT_SECONDS") U64(c, n, v, &cfg.segment_seconds, 1, 86400 * 7);
    else if (name == "FLIGHTREC_MAX_DISK_BYTES") U64(c, n, v, &cfg.max_disk_bytes, 1 << 20, 1ull << 50);
    else if (name == "FLIGHTREC_RECORD_CMDLINE") Bool(c, n, v, &cfg.record_cmdline);
    else if (name == "FLIGHTREC_RECORD_ENV") Bool(c, n, v, &cfg.record_env);
    else if (name == "FLIGHTREC_CRASH") Bool(c, n, v, &cfg.crash);
    else if (name == "FLIGHTREC_ALLOW_FOREIGN_DIR") Bool(c, n, v, &cfg.allow_foreign_dir);
    else if (name == "FLIGHTREC_MODE") {
      if (v == "continuous") cfg.window_mode = false;
      else if (v == "window") cfg.window_mode = true;
      else c.Say(name + "='" + Shown(v) + "' is not one of continuous|window; using continuous");
    } else if (name == "FLIGHTREC_WINDOW_SECONDS") U64(c, n, v, &cfg.window_seconds, 1, 86400);
    else if (name == "FLIGHTREC_TRIGGER_AFTER_SECONDS") U64(c, n, v, &cfg.trigger_after_seconds, 0, 3600);
    else if (name == "FLIGHTREC_TRIGGER_SLOW_MS") SlowMs(c, n, v, &cfg.trigger_slow_ms, &cfg.trigger_slow_rules);
    else if (name == "FLIGHTREC_TRIGGER_RSS_MB") U64(c, n, v, &cfg.trigger_rss_mb, 0, 1ull << 30);
    else if (name == "FLIGHTREC_ALLOC_SAMPLE_BYTES") U64(c, n, v, &cfg.alloc_sample_bytes, 0, 1ull << 40);
    else if (name == "FLIGHTREC_ALLOC_TABLE_ENTRIES") U64(c, n, v, &cfg.alloc_table_entries, 1024, 1ull << 26);
    else if (name == "FLIGHTREC_SAMPLER") {
      if (v == "auto") cfg.sampler = SamplerMode::kAuto;
      else if (v == "perf") cfg.sampler = SamplerMode::kPerf;
      else if (v == "sigprof") cfg.sampler = SamplerMode::kSigprof;
      else if (v == "off") cfg.sampler = SamplerMode::kOff;
      else c.Say(name + "='" + Shown(v) + "' is not one of auto|perf|sigprof|off; using auto");
    } else if (name == "FLIGHTREC_CPU_HZ") U64(c, n, v, &cfg.cpu_hz, 1, 10000);
    else if (name == "FLIGHTREC_STACK_COPY_BYTES") {
      U64(c, n, v, &cfg.stack_copy_bytes, 1024, 65528);
      cfg.stack_copy_bytes &= ~uint64_t{7};  // perf requires a multiple of 8
    } else if (name == "FLIGHTREC_OFFCPU") Bool(c, n, v, &cfg.offcpu);
    else if (name == "FLIGHTREC_SAMPLER_THREAD") Bool(c, n, v, &cfg.sampler_thread);
    else if (name == "FLIGHTREC_OFFCPU_MIN_US") U64(c, n, v, &cfg.offcpu_min_us, 0, 60000000);
    else if (name == "FLIGHTREC_DEBUG_CACHE") {
      if (v != "off" && (v.empty() || v[0] != '/'))
        c.Say(name + "='" + Shown(v) + "' is neither off nor an absolute directory; using the default");
      else Str(c, n, v, &cfg.debug_cache, Empty::kRefused);
    } else if (name == "FLIGHTREC_DEBUG_CACHE_MAX_BYTES")
      U64(c, n, v, &cfg.debug_cache_max_bytes, 1ull << 20, 1ull << 40);
    else if (name == "FLIGHTREC_SOCKETS") {
      if (v == "calls") {
        cfg.sockets = true;
        cfg.socket_calls = true;
      } else {
        Bool(c, n, v, &cfg.sockets);
      }
    } else if (name == "FLIGHTREC_ACCEPTQ_MS") U64(c, n, v, &cfg.acceptq_ms, 0, 3600000);
    else if (name == "FLIGHTREC_SOCKET_TSC") Bool(c, n, v, &cfg.socket_tsc);
    else if (name == "FLIGHTREC_SOCKET_DIRECT") Bool(c, n, v, &cfg.socket_direct);
    else if (name == "FLIGHTREC_ENDPOINTS") Endpoints(c, n, v, &cfg.endpoints);
    else if (name == "FLIGHTREC_TRACE_CONTEXT") Bool(c, n, v, &cfg.trace_context);
    else if (name == "FLIGHTREC_ENDPOINT_NAMES") U64(c, n, v, &cfg.endpoint_names, 16, 1000000);
    else if (name == "FLIGHTREC_S3_BUCKET") Str(c, n, v, &cfg.s3_bucket, Empty::kAllowed);
    else if (name == "FLIGHTREC_S3_PREFIX") Str(c, n, v, &cfg.s3_prefix, Empty::kAllowed);
    else if (name == "FLIGHTREC_S3_REGION") Str(c, n, v, &cfg.s3_region, Empty::kAllowed);
    else if (name == "FLIGHTREC_S3_ENDPOINT") Str(c, n, v, &cfg.s3_endpoint, Empty::kAllowed);
    else if (name == "FLIGHTREC_S3_PATH_STYLE") {
      bool b = false;
      std::vector<std::string> tmp;
      Ctx quiet{&tmp};
      Bool(quiet, n, v, &b);
      if (tmp.empty()) cfg.s3_path_style = b ? 1 : 0;
      else c.Say(name + "='" + Shown(v) + "' is not a boolean (0/1); using automatic addressing");
    } else if (name == "FLIGHTREC_S3_MULTIPART_BYTES") U64(c, n, v, &cfg.s3_multipart_bytes, 5ull << 20, 5ull << 30);
    else if (name == "FLIGHTREC_S3_SSE") OneOf(c, n, v, &cfg.s3_sse, {"AES256", "aws:kms"});
    else if (name == "FLIGHTREC_S3_SSE_KMS_KEY_ID") HeaderToken(c, n, v, &cfg.s3_sse_kms_key_id);
    else if (name == "FLIGHTREC_S3_STORAGE_CLASS")
      OneOf(c, n, v, &cfg.s3_storage_class,
            {"STANDARD", "REDUCED_REDUNDANCY", "STANDARD_IA", "ONEZONE_IA", "INTELLIGENT_TIERING", "GLACIER",
             "DEEP_ARCHIVE", "GLACIER_IR", "OUTPOSTS", "SNOW", "EXPRESS_ONEZONE"});
    else if (name == "FLIGHTREC_KEEP_LOCAL") Bool(c, n, v, &cfg.keep_local);
    else if (name == "FLIGHTREC_UPLOAD_SHUTDOWN_MS") U64(c, n, v, &cfg.upload_shutdown_ms, 0, 600000);
    else c.Say("unknown variable " + Shown(name) + " ignored (docs/CONFIG.md lists them)");
  }
  // A KMS key only means something with aws:kms (as the AWS CLI's --sse-kms-key-id).
  if (!cfg.s3_sse_kms_key_id.empty()) {
    if (cfg.s3_sse.empty()) {
      cfg.s3_sse = "aws:kms";
    } else if (cfg.s3_sse != "aws:kms") {
      c.Say("FLIGHTREC_S3_SSE_KMS_KEY_ID is set but FLIGHTREC_S3_SSE='" + cfg.s3_sse + "'; the key id is ignored");
      cfg.s3_sse_kms_key_id.clear();
    }
  }
  // A relative directory is the one it names from where the process started
  // (the shell's working directory), fixed now: a later chdir (a daemon's
  // chdir("/")) must not move the trace, and forked children keep it too.
  if (!cfg.output.empty() && cfg.output[0] != '/') {
    char cwd[4096];
    if (getcwd(cwd, sizeof(cwd))) {
      std::string rel = cfg.output;
      while (rel.rfind("./", 0) == 0) rel.erase(0, 2);
      cfg.output = std::string(cwd) + (cwd[1] ? "/" : "") + rel;
    }
  }
  return cfg;
}

const Config& GetConfig() { return g_config.value; }
void SetConfig(const Config& config) { g_config.value = config; }

}  // namespace flightrec
