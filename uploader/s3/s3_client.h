// S3Client: signed S3 requests over one libcurl easy handle.
//
// Operations: PutObject (one PUT), multipart upload (create, upload parts,
// complete; abort on failure) above the multipart threshold, GetObject (for
// tests and tools). Each request is signed with our own SigV4 (never
// CURLOPT_AWS_SIGV4), carries x-amz-content-sha256 = SHA-256 of the body,
// and is retried per uploader/retry_policy.h.
//
// Threading: one client belongs to one thread (the upload thread, or a test).
// Transfers run through a private curl multi handle in short steps so that
// S3Control can stop them within ~poll_ms (shutdown deadline), and so that
// no libcurl code runs outside EnterStep()/LeaveStep() (the process may be
// exiting around us). The connection is kept alive between requests.
//
// Results never carry secrets: only HTTP status, S3 <Code>, a shortened
// <Message>, or libcurl's error text.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "uploader/retry_policy.h"
#include "uploader/s3/s3_endpoint.h"
#include "uploader/s3/sigv4.h"

namespace flightrec::uploader {

struct S3ClientOptions {
  uint64_t multipart_threshold = 64ull << 20;  // files larger than this go multipart
  uint64_t part_bytes = 0;                     // 0: use multipart_threshold
  uint64_t min_part_bytes = 5ull << 20;        // S3's floor for every part but the last
  long connect_timeout_ms = 10000;
  long low_speed_bytes = 1024;  // abort a transfer slower than this...
  long low_speed_seconds = 30;  // ...for this long (covers a silent server)
  unsigned max_attempts = 5;    // per request, including the first
  uint64_t backoff_base_ns = 200'000'000;
  uint64_t backoff_cap_ns = 10'000'000'000;
  long poll_ms = 50;  // granularity of ShouldStop checks
  // Bucket policies (FLIGHTREC_S3_SSE, _SSE_KMS_KEY_ID, _STORAGE_CLASS): sent
  // as x-amz-* headers, signed, on PutObject and CreateMultipartUpload (S3
  // applies them to the whole object; UploadPart must not carry them).
  std::string sse;             // "", "AES256" or "aws:kms"
  std::string sse_kms_key_id;  // only with "aws:kms"
  std::string storage_class;   // "" = the bucket's default
};

// The x-amz-* headers that create an object under the options' policies.
KeyValues ObjectPolicyHeaders(const S3ClientOptions& options);

// How the owner lets long operations stop and sleep.
class S3Control {
 public:
  virtual ~S3Control() = default;
  virtual bool ShouldStop() { return false; }
  // Sleeps up to ns; returns false if it stopped early because ShouldStop().
  virtual bool Sleep(uint64_t ns);
  // Brackets every libcurl call. EnterStep() returning false means "never
  // touch libcurl again" (the process is exiting); the client then gives up
  // without cleanup.
  virtual bool EnterStep() { return true; }
  virtual void LeaveStep() {}
};

struct S3Result {
  Verdict verdict = Verdict::kFatal;
  long http_status = 0;
  std::string error_code;  // S3 <Code>, or libcurl's generic text for a connection failure
  std::string detail;      // shortened <Message> or libcurl's error text
  unsigned attempts = 0;
  bool local_error = false;  // reading the segment failed; S3 is not to blame
  bool not_sent = false;     // a header held a control character: nothing went out (header_text.h)
  // We had to stop (S3Control::ShouldStop) while retrying; verdict and the
  // other fields describe the last failed attempt. A stop during the first
  // attempt is verdict kAborted instead.
  bool stopped = false;
  bool ok() const { return verdict == Verdict::kSuccess; }
  // A short stable description, used as the "log once per cause" key:
  // "HTTP 403 SignatureDoesNotMatch", "connection failed: Couldn't connect to server".
  std::string Cause() const;
};

class S3Client {
 public:
  // control may be null (never stops, sleeps with nanosleep).
  S3Client(const S3Endpoint& endpoint, const Credentials& credentials, const S3ClientOptions& options,
           S3Control* control);
  ~S3Client();
  S3Client(const S3Client&) = delete;
  S3Client& operator=(const S3Client&) = delete;

  bool ok() const { return easy_ != nullptr && multi_ != nullptr; }
  void SetCredentials(const Credentials& credentials);
  const S3Endpoint& endpoint() const { return endpoint_; }

  // PUT for size <= multipart_threshold, multipart above. Reads fd with pread.
  S3Result UploadFile(const std::string& key, int fd, uint64_t size);
  S3Result PutObject(const std::string& key, int fd, uint64_t offset, uint64_t length);
  S3Result MultipartUpload(const std::string& key, int fd, uint64_t size);
  S3Result GetObject(const std::string& key, std::string* body);

  // Server time minus ours, learned from RequestTimeTooSkewed (0 until then).
  int64_t clock_skew_seconds() const { return skew_seconds_; }
  // The part size MultipartUpload uses for a file of `size` bytes.
  uint64_t PartBytesFor(uint64_t size) const;

  // Process-wide libcurl/OpenSSL loading (upload_libs.h) and initialisation;
  // idempotent and thread-safe. On the upload thread only, never in the
  // constructor or on a program's thread: OpenSSL reads its configuration
  // file here, which can block. Refused (false) when the environment would
  // make libcurl or OpenSSL block or log our TLS keys
  // (uploader/library_environment.h). Tells OpenSSL not to register its
  // atexit cleanup, so a host exiting while this thread is mid-TLS cannot
  // free OpenSSL state underneath it. On failure, *error says why.
  static bool GlobalInit(std::string* error = nullptr);

  struct Body;      // request body (defined in s3_client.cc)
  struct Response;  // response status, headers, body (defined in s3_client.cc)

 private:
  // extra: further headers to send and sign (ObjectPolicyHeaders), or null.
  S3Result Send(const char* method, const std::string& raw_path, const KeyValues& query, Body* body,
                const std::string& payload_hash, const char* content_type, Response* response,
                const KeyValues* extra = nullptr);
  Transport PerformOnce(const char* method, const std::string& raw_path, const KeyValues& query, Body* body,
                        const std::string& payload_hash, const char* content_type, Response* response,
                        const KeyValues* extra);
  void AbortMultipart(const std::string& raw_path, const std::string& upload_id);

  S3Endpoint endpoint_;
  Credentials credentials_;
  S3ClientOptions options_;
  S3Control* control_;
  S3Control default_control_;
  void* easy_ = nullptr;   // CURL* (kept out of this header)
  void* multi_ = nullptr;  // CURLM*
  bool dead_ = false;      // EnterStep() refused once: libcurl is off limits for good
  int64_t skew_seconds_ = 0;
  JitterRandom random_;
  char curl_error_[256] = {};
};

}  // namespace flightrec::uploader
