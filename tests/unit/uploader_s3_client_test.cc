// S3Client against the strict local stand-in (tests/s3/s3_standin.py, which
// re-verifies every signature with botocore): byte-identical PUT and
// multipart uploads, retries on 503/dropped connections, the clock-skew
// retry, no retry on a wrong secret, session tokens, abort on stop.
//
// The stand-in runs as a child process on 127.0.0.1 (a free port it picks),
// started once per binary and killed at exit; it also exits by itself after
// --max-lifetime. Needs /usr/bin/python3 with python3-botocore.
#include <doctest/doctest.h>
#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "uploader/s3/s3_client.h"
#include "uploader/s3/sha256_hmac.h"

namespace fs = std::filesystem;
using namespace flightrec::uploader;

namespace {

constexpr const char* kBucket = "flightrec-test";
constexpr const char* kAccessKey = "AKIDFLIGHTREC";
constexpr const char* kSecret = "s3cr3t/Key+with=chars";
constexpr const char* kToken = "session/token+abc==";

std::string StandInScript() {
  std::vector<std::string> tried = {"tests/s3/s3_standin.py"};
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n > 0) {
    buf[n] = 0;
    tried.push_back((fs::path(buf).parent_path() / "../tests/s3/s3_standin.py").string());
  }
  for (const std::string& p : tried)
    if (fs::exists(p)) return p;
  return "";
}

// One stand-in process; killed (SIGTERM) when destroyed.
class StandIn {
 public:
  explicit StandIn(bool with_token) {
    const std::string script = StandInScript();
    if (script.empty()) {
      error_ = "tests/s3/s3_standin.py not found (run from the repo root)";
      return;
    }
    int out[2];
    if (pipe(out) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], 1);
      close(out[0]);
      close(out[1]);
      std::vector<std::string> args = {"/usr/bin/python3", script,         "--bucket", kBucket,          "--access-key",
                                       kAccessKey,         "--secret-key", kSecret,    "--max-lifetime", "300"};
      if (with_token) args.insert(args.end(), {"--session-token", kToken});
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(out[1]);
    // Wait (bounded) for "PORT <n>".
    std::string line;
    pollfd pfd{out[0], POLLIN, 0};
    while (line.find('\n') == std::string::npos && poll(&pfd, 1, 30000) == 1) {
      char c[64];
      ssize_t k = read(out[0], c, sizeof(c));
      if (k <= 0) break;
      line.append(c, static_cast<size_t>(k));
    }
    close(out[0]);
    if (line.rfind("PORT ", 0) == 0) port_ = atoi(line.c_str() + 5);
    if (port_ <= 0) error_ = "the S3 stand-in did not start (is python3-botocore installed?)";
  }
  ~StandIn() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
  }
  bool ok() const { return port_ > 0; }
  const std::string& error() const { return error_; }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }

  // The unsigned control endpoint.
  std::string Control(const char* method, const std::string& path, const std::string& body = "") {
    CURL* c = curl_easy_init();
    std::string out;
    std::string url = endpoint() + path;
    curl_easy_setopt(c, CURLOPT_URL, url.c_str());
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    if (!body.empty() || strcmp(method, "POST") == 0) {
      curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.c_str());
      curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
    }
    curl_easy_setopt(
        c, CURLOPT_WRITEFUNCTION, +[](char* d, size_t s, size_t n, void* u) {
          static_cast<std::string*>(u)->append(d, s * n);
          return s * n;
        });
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &out);
    curl_easy_perform(c);
    curl_easy_cleanup(c);
    return out;
  }
  void Reset() { Control("POST", "/__control/reset"); }
  void Faults(const std::string& json) { Control("POST", "/__control/faults", json); }
  std::string Requests() { return Control("GET", "/__control/requests"); }
  std::string Objects() { return Control("GET", "/__control/objects"); }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  std::string error_;
};

StandIn& Shared(bool with_token) {
  S3Client::GlobalInit();
  static std::unique_ptr<StandIn> plain, token;
  auto& slot = with_token ? token : plain;
  if (!slot) slot = std::make_unique<StandIn>(with_token);
  REQUIRE_MESSAGE(slot->ok(), slot->error());
  slot->Reset();
  return *slot;
}

int Count(const std::string& haystack, const std::string& needle) {
  int n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos; at = haystack.find(needle, at + 1)) n++;
  return n;
}

struct TempSegment {
  std::string path;
  std::string data;
  int fd = -1;
  explicit TempSegment(size_t size, unsigned seed = 1) {
    std::mt19937 rng(seed);
    data.resize(size);
    for (char& c : data) c = static_cast<char>(rng());
    char tmpl[] = "/tmp/flightrec-s3-client-XXXXXX";
    fd = mkstemp(tmpl);
    REQUIRE(fd >= 0);
    path = tmpl;
    size_t off = 0;
    while (off < size) {
      ssize_t w = write(fd, data.data() + off, size - off);
      REQUIRE(w > 0);
      off += static_cast<size_t>(w);
    }
  }
  ~TempSegment() {
    close(fd);
    unlink(path.c_str());
  }
  std::string sha256() const { return Sha256Hex(data); }
};

S3Endpoint Endpoint(const StandIn& s) {
  S3Endpoint ep;
  std::string error;
  REQUIRE(ResolveS3Endpoint({kBucket, "us-east-1", s.endpoint(), -1}, {}, &ep, &error));
  return ep;
}

S3ClientOptions FastOptions() {
  S3ClientOptions o;
  o.backoff_base_ns = 1'000'000;  // 1 ms: these tests count attempts, they do not time them
  o.backoff_cap_ns = 10'000'000;
  return o;
}

Credentials Creds(const char* secret = kSecret, const char* token = "") { return {kAccessKey, secret, token}; }

// Stops after a fixed number of checks: deterministic, no clock involved.
class CountingStop : public S3Control {
 public:
  explicit CountingStop(int allowed) : allowed_(allowed) {}
  bool ShouldStop() override { return ++calls_ > allowed_; }
  int calls() const { return calls_; }

 private:
  int allowed_;
  int calls_ = 0;
};

}  // namespace

TEST_CASE("uploader_s3_client: PUT arrives byte-identical under an awkward key") {
  StandIn& s = Shared(false);
  S3Client client(Endpoint(s), Creds(), FastOptions(), nullptr);
  REQUIRE(client.ok());
  TempSegment seg(300 * 1024 + 7);
  const std::string key = "flightrec/svc/2024-01-02/host 1/a$b+c=d~e%f.seg";
  S3Result r = client.UploadFile(key, seg.fd, seg.data.size());
  CHECK_MESSAGE(r.ok(), r.Cause() << " " << r.detail);
  CHECK(r.attempts == 1);
  std::string body;
  REQUIRE(client.GetObject(key, &body).ok());
  CHECK(body == seg.data);
  CHECK(Count(s.Objects(), seg.sha256()) == 1);
  // Empty segments are objects too.
  TempSegment empty(0);
  CHECK(client.UploadFile("flightrec/empty.seg", empty.fd, 0).ok());
}

TEST_CASE("uploader_s3_client: multipart above the threshold; parts honour S3's 5 MiB floor") {
  StandIn& s = Shared(false);
  S3ClientOptions o = FastOptions();
  o.multipart_threshold = 5ull << 20;
  S3Client client(Endpoint(s), Creds(), o, nullptr);
  TempSegment seg((11ull << 20) + 123, 2);
  CHECK(client.PartBytesFor(seg.data.size()) == 5ull << 20);
  S3Result r = client.UploadFile("mp/big.seg", seg.fd, seg.data.size());
  CHECK_MESSAGE(r.ok(), r.Cause() << " " << r.detail);
  const std::string log = s.Requests();
  CHECK(Count(log, "\"op\": \"CreateMultipartUpload\"") == 1);
  CHECK(Count(log, "\"op\": \"UploadPart\"") == 3);
  CHECK(Count(log, "\"op\": \"CompleteMultipartUpload\"") == 1);
  CHECK(Count(s.Objects(), seg.sha256()) == 1);
  // A small file under the same client is a single PUT.
  TempSegment small(1000, 3);
  CHECK(client.UploadFile("mp/small.seg", small.fd, 1000).ok());
  CHECK(Count(s.Requests(), "\"op\": \"PutObject\"") == 1);
}

TEST_CASE("uploader_s3_client: a failed multipart upload is aborted") {
  StandIn& s = Shared(false);
  S3ClientOptions o = FastOptions();
  o.multipart_threshold = 5ull << 20;
  o.max_attempts = 2;
  S3Client client(Endpoint(s), Creds(), o, nullptr);
  TempSegment seg((5ull << 20) + 10, 4);
  s.Faults("{\"fail_500\": 100, \"ops\": [\"CompleteMultipartUpload\"]}");
  S3Result r = client.UploadFile("mp/fails.seg", seg.fd, seg.data.size());
  CHECK(r.verdict == Verdict::kRetry);
  CHECK(r.Cause() == "HTTP 500 InternalError");
  const std::string log = s.Requests();
  CHECK(Count(log, "\"op\": \"CompleteMultipartUpload\"") == 2);
  CHECK(Count(log, "\"op\": \"AbortMultipartUpload\", \"method\": \"DELETE\"") == 1);
  CHECK(Count(s.Objects(), seg.sha256()) == 0);
}

TEST_CASE("uploader_s3_client: 503s and dropped connections are retried") {
  StandIn& s = Shared(false);
  S3Client client(Endpoint(s), Creds(), FastOptions(), nullptr);
  TempSegment seg(4096, 5);
  s.Faults("{\"fail_503\": 2, \"drop\": 1}");
  S3Result r = client.UploadFile("retry/a.seg", seg.fd, seg.data.size());
  CHECK_MESSAGE(r.ok(), r.Cause());
  CHECK(r.attempts == 4);
  const std::string log = s.Requests();
  CHECK(Count(log, "\"code\": \"SlowDown\"") == 2);
  CHECK(Count(log, "\"code\": \"dropped\"") == 1);
  CHECK(Count(s.Objects(), seg.sha256()) == 1);

  S3ClientOptions o = FastOptions();
  o.max_attempts = 3;
  S3Client limited(Endpoint(s), Creds(), o, nullptr);
  s.Faults("{\"fail_503\": 100}");
  r = limited.UploadFile("retry/b.seg", seg.fd, seg.data.size());
  CHECK(r.verdict == Verdict::kRetry);  // gave up for now; the queue retries later
  CHECK(r.attempts == 3);
  CHECK(r.Cause() == "HTTP 503 SlowDown");
}

TEST_CASE("uploader_s3_client: RequestTimeTooSkewed gets one re-signed retry with the server's time") {
  StandIn& s = Shared(false);
  S3Client client(Endpoint(s), Creds(), FastOptions(), nullptr);
  TempSegment seg(2048, 6);
  s.Faults("{\"skew_seconds\": 3600}");
  S3Result r = client.UploadFile("skew/a.seg", seg.fd, seg.data.size());
  CHECK_MESSAGE(r.ok(), r.Cause());
  CHECK(r.attempts == 2);
  CHECK(client.clock_skew_seconds() > 3500);
  CHECK(client.clock_skew_seconds() < 3700);
  CHECK(Count(s.Requests(), "RequestTimeTooSkewed") == 1);
  CHECK(client.UploadFile("skew/b.seg", seg.fd, seg.data.size()).attempts == 1);  // the skew is remembered
}

TEST_CASE("uploader_s3_client: a wrong secret is fatal at once and leaks nothing") {
  StandIn& s = Shared(true);
  S3Client client(Endpoint(s), Creds("wrong-secret-value", kToken), FastOptions(), nullptr);
  TempSegment seg(1024, 7);
  S3Result r = client.UploadFile("auth/a.seg", seg.fd, seg.data.size());
  CHECK(r.verdict == Verdict::kFatal);
  CHECK(r.attempts == 1);
  CHECK(r.http_status == 403);
  CHECK(r.Cause() == "HTTP 403 SignatureDoesNotMatch");
  // The stand-in, like S3, echoes the canonical request (with the token) in its body.
  CHECK(r.detail.find(kToken) == std::string::npos);
  CHECK(r.detail.find("wrong-secret-value") == std::string::npos);
  CHECK(Count(s.Requests(), "\"op\": \"PutObject\"") == 1);
}

TEST_CASE("uploader_s3_client: session tokens are sent and signed") {
  StandIn& s = Shared(true);
  TempSegment seg(1024, 8);
  S3Client with(Endpoint(s), Creds(kSecret, kToken), FastOptions(), nullptr);
  CHECK(with.UploadFile("tok/a.seg", seg.fd, seg.data.size()).ok());
  S3Client without(Endpoint(s), Creds(kSecret, ""), FastOptions(), nullptr);
  S3Result r = without.UploadFile("tok/b.seg", seg.fd, seg.data.size());
  CHECK(r.verdict == Verdict::kFatal);
  CHECK(r.http_status == 403);
  S3Client wrong(Endpoint(s), Creds(kSecret, "other-token"), FastOptions(), nullptr);
  CHECK(wrong.UploadFile("tok/c.seg", seg.fd, seg.data.size()).Cause() == "HTTP 400 InvalidToken");
}

TEST_CASE("uploader_s3_client: 403 AccessDenied is not retried") {
  StandIn& s = Shared(false);
  S3Client client(Endpoint(s), Creds(), FastOptions(), nullptr);
  TempSegment seg(100, 9);
  s.Faults("{\"forbid\": 5}");
  S3Result r = client.UploadFile("deny/a.seg", seg.fd, seg.data.size());
  CHECK(r.Cause() == "HTTP 403 AccessDenied");
  CHECK(r.attempts == 1);
}

TEST_CASE("uploader_s3_client: a stop request ends a hung transfer") {
  StandIn& s = Shared(false);
  CountingStop stop(40);  // ~40 poll steps, then stop: no clock in the assertion
  S3Client client(Endpoint(s), Creds(), FastOptions(), &stop);
  TempSegment seg(100, 10);
  s.Faults("{\"blackhole\": true}");
  S3Result r = client.UploadFile("hang/a.seg", seg.fd, seg.data.size());
  s.Faults("{\"blackhole\": false}");
  CHECK(r.verdict == Verdict::kAborted);
  CHECK(stop.calls() == 41);
  CHECK(r.Cause().rfind("stopped:", 0) == 0);
}

TEST_CASE("uploader_s3_client: nothing listening is a transient connection failure") {
  S3Client::GlobalInit();
  // Bind and close a socket to find a port that nothing listens on.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  S3Endpoint ep;
  std::string error;
  REQUIRE(
      ResolveS3Endpoint({kBucket, "", "http://127.0.0.1:" + std::to_string(ntohs(a.sin_port)), -1}, {}, &ep, &error));
  S3ClientOptions o = FastOptions();
  o.max_attempts = 2;
  S3Client client(ep, Creds(), o, nullptr);
  TempSegment seg(100, 11);
  S3Result r = client.UploadFile("x.seg", seg.fd, seg.data.size());
  CHECK(r.verdict == Verdict::kRetry);
  CHECK(r.attempts == 2);
  CHECK(r.http_status == 0);
  CHECK(r.Cause().rfind("connection failed:", 0) == 0);
}
