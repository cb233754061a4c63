// Config tests: defaults, every kind of bad value (one message naming the
// variable, the value and the default kept), unknown names, and good values.
#include <doctest/doctest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "preload/runtime/config.h"

using flightrec::Config;
using flightrec::ParseConfig;

namespace {
Config Parse(std::vector<const char*> env, std::vector<std::string>* msgs) {
  env.push_back(nullptr);
  return ParseConfig(env.data(), msgs);
}
bool Mentions(const std::vector<std::string>& msgs, const std::string& needle) {
  for (const auto& m : msgs)
    if (m.find(needle) != std::string::npos) return true;
  return false;
}
}  // namespace

TEST_CASE("config: defaults with an empty environment") {
  std::vector<std::string> msgs;
  Config c = Parse({"PATH=/bin", "HOME=/root"}, &msgs);
  CHECK(msgs.empty());
  CHECK(c.enable);
  CHECK(c.output == "/tmp/flightrec");
  CHECK(c.ring_bytes == 256 * 1024);
  CHECK(c.flush_ms == 50);
  CHECK(c.alloc_sample_bytes == 524288);
  CHECK(c.cpu_hz == 99);
  CHECK(c.sampler == flightrec::SamplerMode::kAuto);
}

TEST_CASE("config: good values are taken, with size suffixes") {
  std::vector<std::string> msgs;
  Config c = Parse({"FLIGHTREC_RING_BYTES=1M", "FLIGHTREC_FLUSH_MS=20", "FLIGHTREC_ENABLE=0", "FLIGHTREC_LOG=debug",
                    "FLIGHTREC_SAMPLER=sigprof", "FLIGHTREC_OUTPUT=/var/tmp/x", "FLIGHTREC_SEGMENT_BYTES=64KiB",
                    "FLIGHTREC_S3_PATH_STYLE=1", "FLIGHTREC_SERVICE=api"},
                   &msgs);
  CHECK(msgs.empty());
  CHECK(c.ring_bytes == (1u << 20));
  CHECK(c.flush_ms == 20);
  CHECK_FALSE(c.enable);
  CHECK(c.log == flightrec::LogLevel::kDebug);
  CHECK(c.sampler == flightrec::SamplerMode::kSigprof);
  CHECK(c.output == "/var/tmp/x");
  CHECK(c.segment_bytes == 65536);
  CHECK(c.s3_path_style == 1);
  CHECK(c.service == "api");
}

TEST_CASE("config: not a number keeps the default and says so") {
  std::vector<std::string> msgs;
  Config c = Parse({"FLIGHTREC_CPU_HZ=abc"}, &msgs);
  CHECK(c.cpu_hz == 99);
  REQUIRE(msgs.size() == 1);
  CHECK(msgs[0] == "flightrec: FLIGHTREC_CPU_HZ='abc' is not a number; using 99");
}

TEST_CASE("config: every bad-value path") {
  struct Case {
    const char* env;
    const char* expect;
  } cases[] = {
      {"FLIGHTREC_FLUSH_MS=0", "out of range"},
      {"FLIGHTREC_FLUSH_MS=-5", "not a number"},
      {"FLIGHTREC_FLUSH_MS=", "not a number"},
      {"FLIGHTREC_FLUSH_MS=99999999999999999999999", "not a number"},
      {"FLIGHTREC_RING_BYTES=5000", "not a power of two"},
      {"FLIGHTREC_RING_BYTES=1", "out of range"},
      {"FLIGHTREC_SEGMENT_BYTES=12q", "not a number"},
      {"FLIGHTREC_ENABLE=maybe", "not a boolean"},
      {"FLIGHTREC_LOG=loud", "quiet|warn|info|debug"},
      {"FLIGHTREC_SAMPLER=ebpf", "auto|perf|sigprof|off"},
      {"FLIGHTREC_OUTPUT=", "is empty"},
      {"FLIGHTREC_S3_PATH_STYLE=sometimes", "not a boolean"},
      {"FLIGHTREC_S3_SSE=aes256", "not one of AES256, aws:kms"},
      {"FLIGHTREC_S3_STORAGE_CLASS=CHEAP", "not one of STANDARD"},
      {"FLIGHTREC_S3_SSE_KMS_KEY_ID=key with spaces", "not a key id"},
      {"FLIGHTREC_BOGUS=1", "unknown variable FLIGHTREC_BOGUS"},
  };
  for (const Case& k : cases) {
    CAPTURE(k.env);
    std::vector<std::string> msgs;
    Config c = Parse({k.env}, &msgs);
    REQUIRE(msgs.size() == 1);
    CHECK(Mentions(msgs, k.expect));
    CHECK(msgs[0].rfind("flightrec: ", 0) == 0);
    CHECK(c.flush_ms == 50);
    CHECK(c.enable);
    CHECK(c.output == "/tmp/flightrec");
  }
  // A ring size that is not a power of two is rounded up, not rejected.
  std::vector<std::string> msgs;
  CHECK(Parse({"FLIGHTREC_RING_BYTES=5000"}, &msgs).ring_bytes == 8192);
}

TEST_CASE("config: S3 bucket policies (encryption, KMS key, storage class)") {
  std::vector<std::string> msgs;
  Config c = Parse({"FLIGHTREC_S3_SSE=aws:kms", "FLIGHTREC_S3_SSE_KMS_KEY_ID=alias/flightrec",
                    "FLIGHTREC_S3_STORAGE_CLASS=STANDARD_IA"},
                   &msgs);
  CHECK(msgs.empty());
  CHECK(c.s3_sse == "aws:kms");
  CHECK(c.s3_sse_kms_key_id == "alias/flightrec");
  CHECK(c.s3_storage_class == "STANDARD_IA");
  // A KMS key alone implies aws:kms, as the AWS CLI's --sse-kms-key-id does.
  msgs.clear();
  c = Parse({"FLIGHTREC_S3_SSE_KMS_KEY_ID=arn:aws:kms:us-east-1:1:key/k"}, &msgs);
  CHECK(msgs.empty());
  CHECK(c.s3_sse == "aws:kms");
  // With AES256 it means nothing: said once, dropped.
  msgs.clear();
  c = Parse({"FLIGHTREC_S3_SSE=AES256", "FLIGHTREC_S3_SSE_KMS_KEY_ID=alias/x"}, &msgs);
  REQUIRE(msgs.size() == 1);
  CHECK(Mentions(msgs, "key id is ignored"));
  CHECK(c.s3_sse == "AES256");
  CHECK(c.s3_sse_kms_key_id.empty());
}

TEST_CASE("config: a relative FLIGHTREC_OUTPUT is fixed against the starting directory") {
  char cwd[4096];
  REQUIRE(getcwd(cwd, sizeof(cwd)) != nullptr);
  const std::string here(cwd);
  std::vector<std::string> msgs;
  CHECK(Parse({"FLIGHTREC_OUTPUT=traces"}, &msgs).output == here + "/traces");
  CHECK(Parse({"FLIGHTREC_OUTPUT=./traces/run1"}, &msgs).output == here + "/traces/run1");
  CHECK(Parse({"FLIGHTREC_OUTPUT=/abs/x"}, &msgs).output == "/abs/x");
  CHECK(msgs.empty());
}

TEST_CASE("config: window mode and trigger settings") {
  std::vector<std::string> msgs;
  Config d = Parse({}, &msgs);
  CHECK_FALSE(d.window_mode);
  CHECK(d.window_seconds == 300);
  CHECK(d.trigger_after_seconds == 10);
  CHECK(d.trigger_slow_ms == 0);
  CHECK(d.trigger_rss_mb == 0);
  Config c = Parse({"FLIGHTREC_MODE=window", "FLIGHTREC_WINDOW_SECONDS=5", "FLIGHTREC_TRIGGER_AFTER_SECONDS=0",
                    "FLIGHTREC_TRIGGER_SLOW_MS=250", "FLIGHTREC_TRIGGER_RSS_MB=512"},
                   &msgs);
  CHECK(msgs.empty());
  CHECK(c.window_mode);
  CHECK(c.window_seconds == 5);
  CHECK(c.trigger_after_seconds == 0);
  CHECK(c.trigger_slow_ms == 250);
  CHECK(c.trigger_rss_mb == 512);
  Config bad = Parse({"FLIGHTREC_MODE=snapshot", "FLIGHTREC_WINDOW_SECONDS=0"}, &msgs);
  CHECK_FALSE(bad.window_mode);
  CHECK(bad.window_seconds == 300);
  CHECK(Mentions(msgs, "FLIGHTREC_MODE='snapshot' is not one of continuous|window; using continuous"));
  CHECK(Mentions(msgs, "FLIGHTREC_WINDOW_SECONDS='0' is out of range [1, 86400]; using 300"));
}

TEST_CASE("config: the debug-file cache is off, a directory, or the default") {
  std::vector<std::string> msgs;
  CHECK(Parse({}, &msgs).debug_cache.empty());  // the default: /var/tmp/flightrec-debug-<euid>
  CHECK(Parse({"FLIGHTREC_DEBUG_CACHE=off"}, &msgs).debug_cache == "off");
  CHECK(Parse({"FLIGHTREC_DEBUG_CACHE=/srv/cache"}, &msgs).debug_cache == "/srv/cache");
  CHECK(msgs.empty());
  CHECK(Parse({"FLIGHTREC_DEBUG_CACHE=cache"}, &msgs).debug_cache.empty());
  CHECK(Mentions(msgs, "FLIGHTREC_DEBUG_CACHE='cache'"));
  msgs.clear();
  CHECK(Parse({"FLIGHTREC_DEBUG_CACHE="}, &msgs).debug_cache.empty());
  CHECK(msgs.size() == 1);
  CHECK(Parse({}, &msgs).debug_cache_max_bytes == (1ull << 30));
  CHECK(Parse({"FLIGHTREC_DEBUG_CACHE_MAX_BYTES=4194304"}, &msgs).debug_cache_max_bytes == (4ull << 20));
}
