// S3 requests over libcurl (multi-stepped easy handle): signing, bodies read
// from segment files, response parsing, retries, multipart upload.
#include "uploader/s3/s3_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <mutex>
#include <unistd.h>

#include "preload/runtime/clock.h"
#include "preload/runtime/loader_quiesce.h"
#include "uploader/library_environment.h"
#include "uploader/s3/curl_transfer.h"
#include "uploader/s3/error_text.h"
#include "uploader/s3/header_text.h"
#include "uploader/s3/s3_xml.h"
#include "uploader/s3/sha256_hmac.h"
#include "uploader/upload_libs.h"

namespace flightrec::uploader {

// A request body: a byte range of a file (read with pread, so retries and
// libcurl rewinds just reset `pos`) or a small in-memory string.
struct S3Client::Body {
  int fd = -1;
  uint64_t offset = 0;
  uint64_t length = 0;
  std::string memory;
  uint64_t pos = 0;
  bool read_error = false;
  uint64_t size() const { return fd >= 0 ? length : memory.size(); }
};

struct S3Client::Response {
  long status = 0;
  std::string body;
  std::string etag;
  std::string date;
  std::string transport_error;  // libcurl's detailed text (host, port, timings)
  std::string transport_cause;  // libcurl's generic text for the code: stable, for "log once"
  bool not_sent = false;        // refused before libcurl saw it (a control character in a header)
};

namespace {

constexpr size_t kMaxResponseBody = 1 << 20;  // errors and listings are small; GetObject is for tests

// libcurl's functions; loaded by GlobalInit, which every path that reaches a
// curl call has passed (the handles are null otherwise).
const UploadLibs& Curl() { return *LoadUploadLibs(); }

CURL* Easy(void* p) { return static_cast<CURL*>(p); }
CURLM* Multi(void* p) { return static_cast<CURLM*>(p); }

size_t ReadBody(char* buffer, size_t size, size_t nitems, void* userdata) {
  auto* body = static_cast<S3Client::Body*>(userdata);
  size_t want = std::min<uint64_t>(size * nitems, body->size() - body->pos);
  if (want == 0) return 0;
  if (body->fd < 0) {
    memcpy(buffer, body->memory.data() + body->pos, want);
    body->pos += want;
    return want;
  }
  for (;;) {
    ssize_t n = pread(body->fd, buffer, want, static_cast<off_t>(body->offset + body->pos));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {  // error, or the file shrank under us: never send a short body
      body->read_error = true;
      return CURL_READFUNC_ABORT;
    }
    body->pos += static_cast<uint64_t>(n);
    return static_cast<size_t>(n);
  }
}

int SeekBody(void* userdata, curl_off_t offset, int origin) {
  auto* body = static_cast<S3Client::Body*>(userdata);
  if (origin != SEEK_SET || offset < 0 || static_cast<uint64_t>(offset) > body->size()) return CURL_SEEKFUNC_FAIL;
  body->pos = static_cast<uint64_t>(offset);
  return CURL_SEEKFUNC_OK;
}

size_t WriteResponse(char* data, size_t size, size_t nmemb, void* userdata) {
  auto* out = static_cast<std::string*>(userdata);
  size_t n = size * nmemb;
  if (out->size() < kMaxResponseBody) out->append(data, std::min(n, kMaxResponseBody - out->size()));
  return n;  // keep reading (and discarding) past the cap so the connection stays usable
}

size_t HeaderLine(char* data, size_t size, size_t nitems, void* userdata) {
  auto* r = static_cast<S3Client::Response*>(userdata);
  size_t n = size * nitems;
  std::string_view line(data, n);
  while (!line.empty() && (line.back() == '\r' || line.back() == '\n')) line.remove_suffix(1);
  if (line.rfind("HTTP/", 0) == 0) {  // a new response (e.g. after 100 Continue): forget the old one
    r->etag.clear();
    r->date.clear();
    return n;
  }
  size_t colon = line.find(':');
  if (colon == std::string_view::npos) return n;
  std::string name(line.substr(0, colon));
  for (char& c : name) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
  std::string_view value = line.substr(colon + 1);
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  if (name == "etag") r->etag = value;
  else if (name == "date") r->date = value;
  return n;
}

Transport TransportOf(CURLcode code) {
  switch (code) {
    case CURLE_OK: return Transport::kOk;
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_URL_MALFORMAT:
    case CURLE_NOT_BUILT_IN:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_ENGINE_NOTFOUND:
    case CURLE_BAD_FUNCTION_ARGUMENT:
    case CURLE_OUT_OF_MEMORY: return Transport::kFatal;
    default: return Transport::kTransient;  // resolve/connect/send/recv errors, timeouts, empty replies
  }
}

// Belt and braces: whatever a server echoes back, our secrets never reach a log line.
void Redact(std::string* text, const Credentials& c) {
  for (const std::string* secret : {&c.secret_access_key, &c.session_token}) {
    if (secret->size() < 8) continue;
    for (size_t at; (at = text->find(*secret)) != std::string::npos;) text->replace(at, secret->size(), "[redacted]");
  }
}

std::string EncodedPath(const std::string& raw_path) { return UriEncode(raw_path, Slash::kKeep); }

std::once_flag g_global_once;
bool g_global_ok = false;
std::string g_global_error;

}  // namespace

KeyValues ObjectPolicyHeaders(const S3ClientOptions& options) {
  KeyValues h;
  if (!options.sse.empty()) h.emplace_back("x-amz-server-side-encryption", options.sse);
  if (options.sse == "aws:kms" && !options.sse_kms_key_id.empty())
    h.emplace_back("x-amz-server-side-encryption-aws-kms-key-id", options.sse_kms_key_id);
  if (!options.storage_class.empty()) h.emplace_back("x-amz-storage-class", options.storage_class);
  return h;
}

bool S3Control::Sleep(uint64_t ns) {
  timespec ts = NsToTimespec(ns);
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
  return !ShouldStop();
}

std::string S3Result::Cause() const {
  if (local_error) return "reading the segment failed: " + detail;
  if (not_sent) return detail;
  if (verdict == Verdict::kAborted) return "stopped: " + detail;
  if (http_status == 0) return "connection failed: " + (error_code.empty() ? detail : error_code);
  std::string c = "HTTP " + std::to_string(http_status);
  if (!error_code.empty()) c += " " + error_code;
  return c;
}

namespace {

struct GlobalInitStep {
  const UploadLibs* libs;
  bool ok = false;
};

// Inside RecorderForkFenced: a fork waits for this, so no child inherits
// libcurl's global-init lock or an OpenSSL run-once half done.
void RunGlobalInit(void* arg) {
  auto* step = static_cast<GlobalInitStep*>(arg);
  // First OpenSSL initialisation in the process wins the atexit decision.
  // The configuration is left to libcurl's OPENSSL_init_ssl, as a program
  // of its own would have it (LibraryEnvironmentSafe checked it first).
  step->libs->openssl_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr);
  step->ok = step->libs->global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
}

}  // namespace

bool S3Client::GlobalInit(std::string* error) {
  std::call_once(g_global_once, [] {
    std::string error;
    const UploadLibs* libs = LoadUploadLibs(&error);
    if (!libs) {
      g_global_error = error;
      return;
    }
    // Before libcurl reads the environment: a configuration file that
    // would block OpenSSL's reader, or SSLKEYLOGFILE, keeps both libraries
    // uninitialised by us (library_environment.h).
    if (!LibraryEnvironmentSafe(*libs, &error)) {
      g_global_error = error;
      return;
    }
    GlobalInitStep step{libs};
    OwnForkFenced(RunGlobalInit, &step);
    g_global_ok = step.ok;
    if (!g_global_ok) g_global_error = "libcurl could not be initialised";
  });
  if (!g_global_ok && error) *error = g_global_error;
  return g_global_ok;
}

S3Client::S3Client(const S3Endpoint& endpoint, const Credentials& credentials, const S3ClientOptions& options,
                   S3Control* control)
    : endpoint_(endpoint),
      credentials_(credentials),
      options_(options),
      control_(control ? control : &default_control_),
      random_(static_cast<uint64_t>(time(nullptr)) ^ (static_cast<uint64_t>(getpid()) << 32) ^
              reinterpret_cast<uintptr_t>(this)) {
  if (!GlobalInit()) return;
  easy_ = Curl().easy_init();
  multi_ = Curl().multi_init();
}

S3Client::~S3Client() {
  credentials_.Clear();
  if (dead_ || !control_->EnterStep()) return;  // exiting: leave libcurl alone
  if (multi_) Curl().multi_cleanup(Multi(multi_));
  if (easy_) Curl().easy_cleanup(Easy(easy_));
  control_->LeaveStep();
}

void S3Client::SetCredentials(const Credentials& credentials) {
  credentials_.Clear();
  credentials_ = credentials;
}

uint64_t S3Client::PartBytesFor(uint64_t size) const {
  uint64_t part = options_.part_bytes ? options_.part_bytes : options_.multipart_threshold;
  part = std::max(part, options_.min_part_bytes);
  part = std::max<uint64_t>(part, (size + 9999) / 10000);  // S3 allows at most 10,000 parts
  return std::max<uint64_t>(part, 1);
}

Transport S3Client::PerformOnce(const char* method, const std::string& raw_path, const KeyValues& query, Body* body,
                                const std::string& payload_hash, const char* content_type, Response* response,
                                const KeyValues* extra) {
  *response = Response();
  curl_error_[0] = '\0';
  if (body) {
    body->pos = 0;
    body->read_error = false;
  }

  // Sign with the server's idea of now once we have learned the skew.
  const std::string amz_date = AmzDate(time(nullptr) + skew_seconds_);
  SigV4Request req;
  req.method = method;
  req.path = raw_path;
  req.query = query;
  req.headers = {{"host", endpoint_.host}, {"x-amz-content-sha256", payload_hash}, {"x-amz-date", amz_date}};
  if (!credentials_.session_token.empty()) req.headers.emplace_back("x-amz-security-token", credentials_.session_token);
  if (extra) req.headers.insert(req.headers.end(), extra->begin(), extra->end());  // signed like the rest
  SigV4Params params{amz_date, endpoint_.region, "s3", /*normalize_path=*/false};
  SigV4Result signed_req = SignHeaders(req, payload_hash, credentials_, params);

  std::string url = endpoint_.Url(EncodedPath(raw_path));
  const std::string canonical_query = CanonicalQuery(query);
  if (!canonical_query.empty()) url += "?" + canonical_query;  // the wire query is the canonical one

  // Header text with a control character would put lines of its own on the
  // wire (header_text.h): the request is not sent. Names only in the text.
  const char* bad_header = nullptr;
  for (const auto& [name, value] : req.headers)
    if (!bad_header && (HasControlChar(name) || HasControlChar(value))) bad_header = name.c_str();
  if (!bad_header && HasControlChar(signed_req.authorization)) bad_header = "authorization";
  if (!bad_header && content_type && HasControlChar(content_type)) bad_header = "content-type";
  if (bad_header || HasControlChar(url)) {
    response->transport_error = response->transport_cause =
        std::string("request not sent: ") + (bad_header ? "header " + std::string(bad_header) : std::string("URL")) +
        " holds a control character";
    response->not_sent = true;
    explicit_bzero(signed_req.authorization.data(), signed_req.authorization.size());
    return Transport::kFatal;
  }

  if (dead_ || !control_->EnterStep()) {
    dead_ = true;
    return Transport::kAborted;
  }
  if (!easy_ || !multi_) {  // GlobalInit failed (no libcurl) or curl could not make handles
    control_->LeaveStep();
    response->transport_error = response->transport_cause = "libcurl unavailable";
    return Transport::kFatal;
  }
  CURL* e = Easy(easy_);
  Curl().easy_reset(e);  // options only; the multi handle keeps the connection
  curl_slist* headers = nullptr;
  std::string h;
  for (const auto& [name, value] : req.headers) {
    h = name + ": " + value;
    headers = Curl().slist_append(headers, h.c_str());
  }
  h = "Authorization: " + signed_req.authorization;
  headers = Curl().slist_append(headers, h.c_str());
  explicit_bzero(h.data(), h.size());
  headers = Curl().slist_append(headers, "Expect:");  // no 100-continue round trip
  if (content_type) {
    h = std::string("Content-Type: ") + content_type;
    headers = Curl().slist_append(headers, h.c_str());
  }
  SetCommonRequestOptions(e, url.c_str(), headers, options_.connect_timeout_ms);
  // The path as signed: libcurl would otherwise collapse "/./" and "/../"
  // (a service named "..", a prefix "a/../b") and S3 would check the
  // signature against a path we never signed. S3 keys are opaque text.
  Curl().easy_setopt(e, CURLOPT_PATH_AS_IS, 1L);
  Curl().easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, options_.low_speed_bytes);
  Curl().easy_setopt(e, CURLOPT_LOW_SPEED_TIME, options_.low_speed_seconds);
  Curl().easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
  Curl().easy_setopt(e, CURLOPT_ERRORBUFFER, curl_error_);
  Curl().easy_setopt(e, CURLOPT_WRITEFUNCTION, WriteResponse);
  Curl().easy_setopt(e, CURLOPT_WRITEDATA, &response->body);
  Curl().easy_setopt(e, CURLOPT_HEADERFUNCTION, HeaderLine);
  Curl().easy_setopt(e, CURLOPT_HEADERDATA, response);
  const std::string_view m(method);
  if (m == "PUT") {
    Curl().easy_setopt(e, CURLOPT_UPLOAD, 1L);
    Curl().easy_setopt(e, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(body ? body->size() : 0));
  } else if (m == "POST") {
    Curl().easy_setopt(e, CURLOPT_POST, 1L);
    Curl().easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body ? body->size() : 0));
  } else if (m == "GET") {
    Curl().easy_setopt(e, CURLOPT_HTTPGET, 1L);
  } else {
    Curl().easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
  }
  Body empty_body;  // lives until this function returns, like the transfer
  Body* b = body ? body : &empty_body;
  Curl().easy_setopt(e, CURLOPT_READFUNCTION, ReadBody);
  Curl().easy_setopt(e, CURLOPT_READDATA, b);
  Curl().easy_setopt(e, CURLOPT_SEEKFUNCTION, SeekBody);
  Curl().easy_setopt(e, CURLOPT_SEEKDATA, b);
  Curl().multi_add_handle(Multi(multi_), e);
  control_->LeaveStep();

  // Step the transfer; between steps, check whether we must stop.
  CURLcode result = CURLE_OK;
  const TransferEnd end =
      StepTransfer(control_, Multi(multi_), e, headers, options_.poll_ms, &result, &response->status);
  if (end == TransferEnd::kAbandoned) {
    dead_ = true;  // the process is exiting: abandon handles and headers as they are
    return Transport::kAborted;
  }
  if (end == TransferEnd::kStopped) {
    response->transport_error = "shutdown deadline reached";
    return Transport::kAborted;
  }
  if (body && body->read_error) {
    response->transport_error = "segment file unreadable or truncated";
    return Transport::kFatal;
  }
  if (result != CURLE_OK) {
    response->transport_error = curl_error_[0] ? curl_error_ : Curl().easy_strerror(result);
    response->transport_cause = Curl().easy_strerror(result);
    response->status = 0;
  }
  return TransportOf(result);
}

S3Result S3Client::Send(const char* method, const std::string& raw_path, const KeyValues& query, Body* body,
                        const std::string& payload_hash, const char* content_type, Response* response,
                        const KeyValues* extra) {
  S3Result r;
  if (!ok()) {
    r.verdict = Verdict::kFatal;
    r.detail = "libcurl could not be initialised";
    return r;
  }
  bool skew_retried = false;
  S3Result last;  // the last attempt that got an answer (or a connection error)
  for (unsigned attempt = 0;;) {
    Transport t = PerformOnce(method, raw_path, query, body, payload_hash, content_type, response, extra);
    r = S3Result();
    r.attempts = last.attempts + 1;
    r.http_status = response->status;
    r.error_code = response->transport_cause;
    r.detail = Shorten(response->transport_error);
    r.local_error = body && body->read_error;
    r.not_sent = response->not_sent;
    // CompleteMultipartUpload may answer 200 with an <Error> body.
    const bool post_error = strcmp(method, "POST") == 0 && response->body.find("<Error>") != std::string::npos;
    if (t == Transport::kOk && (response->status >= 300 || post_error)) {
      XmlElementText(response->body, "Code", &r.error_code);
      std::string message;
      if (XmlElementText(response->body, "Message", &message)) {
        Redact(&message, credentials_);  // before shortening: a cut token would no longer match
        r.detail = Shorten(message);
      }
      Redact(&r.error_code, credentials_);
      r.error_code = Shorten(r.error_code, 64);
    }
    Redact(&r.detail, credentials_);
    r.verdict = Classify(t, response->status, r.error_code);
    if (r.verdict == Verdict::kAborted && last.attempts > 0) {
      // Stopped mid-retry: report what S3 last said, not just "stopped".
      last.stopped = true;
      return last;
    }
    if (r.verdict == Verdict::kSuccess || r.verdict == Verdict::kFatal || r.verdict == Verdict::kAborted) return r;
    last = r;
    if (r.verdict == Verdict::kRetrySkew) {
      // One re-signed retry with the server's clock; a second skew is fatal.
      int64_t server = 0;
      std::string server_time;
      bool have = ParseHttpDate(response->date, &server) ||
                  (XmlElementText(response->body, "ServerTime", &server_time) && ParseHttpDate(server_time, &server));
      if (skew_retried || !have) {
        r.verdict = Verdict::kFatal;
        return r;
      }
      skew_retried = true;
      skew_seconds_ = server - static_cast<int64_t>(time(nullptr));
      continue;
    }
    // kRetry
    if (++attempt >= options_.max_attempts) return r;
    uint64_t wait = FullJitterBackoffNs(attempt - 1, options_.backoff_base_ns, options_.backoff_cap_ns, random_.Next());
    if (control_->ShouldStop() || !control_->Sleep(wait)) {
      r.stopped = true;  // verdict stays kRetry: S3 was failing when we had to stop
      return r;
    }
  }
}

namespace {

// A request body of fd's bytes [offset, offset + length) and their SHA-256
// (hex, the signed payload hash). False, with *failed a local error, when
// the file cannot be read.
bool FileRangeBody(int fd, uint64_t offset, uint64_t length, S3Client::Body* body, std::string* sha_hex,
                   S3Result* failed) {
  body->fd = fd;
  body->offset = offset;
  body->length = length;
  Digest digest;
  std::string error;
  if (!Sha256FileRange(fd, offset, length, &digest, &error)) {
    failed->local_error = true;
    failed->detail = error;
    return false;
  }
  *sha_hex = HexLower(digest);
  return true;
}

}  // namespace

S3Result S3Client::PutObject(const std::string& key, int fd, uint64_t offset, uint64_t length) {
  Body body;
  std::string sha;
  S3Result failed;
  if (!FileRangeBody(fd, offset, length, &body, &sha, &failed)) return failed;
  Response response;
  const KeyValues policy = ObjectPolicyHeaders(options_);
  return Send("PUT", endpoint_.ObjectPath(key), {}, &body, sha, nullptr, &response, &policy);
}

void S3Client::AbortMultipart(const std::string& raw_path, const std::string& upload_id) {
  // Best effort: a bucket lifecycle rule (AbortIncompleteMultipartUpload) is
  // the backstop for uploads we could not abort before a deadline.
  if (control_->ShouldStop()) return;
  Response response;
  Send("DELETE", raw_path, {{"uploadId", upload_id}}, nullptr, kEmptySha256Hex, nullptr, &response);
}

S3Result S3Client::MultipartUpload(const std::string& key, int fd, uint64_t size) {
  const std::string path = endpoint_.ObjectPath(key);
  Response response;
  const KeyValues policy = ObjectPolicyHeaders(options_);  // the parts inherit them
  S3Result r = Send("POST", path, {{"uploads", ""}}, nullptr, kEmptySha256Hex, nullptr, &response, &policy);
  if (!r.ok()) return r;
  std::string upload_id;
  if (!XmlElementText(response.body, "UploadId", &upload_id) || upload_id.empty()) {
    r.verdict = Verdict::kFatal;
    r.detail = "CreateMultipartUpload returned no UploadId";
    return r;
  }
  const uint64_t part_bytes = PartBytesFor(size);
  std::vector<std::string> etags;
  for (uint64_t offset = 0, part = 1; offset < size || part == 1; part++) {
    const uint64_t length = std::min(part_bytes, size - offset);
    Body body;
    std::string sha;
    S3Result failed;
    if (!FileRangeBody(fd, offset, length, &body, &sha, &failed)) {
      AbortMultipart(path, upload_id);
      return failed;
    }
    r = Send("PUT", path, {{"partNumber", std::to_string(part)}, {"uploadId", upload_id}}, &body, sha, nullptr,
             &response);
    if (r.ok() && response.etag.empty()) {
      r.verdict = Verdict::kFatal;
      r.detail = "UploadPart returned no ETag";
    }
    if (!r.ok()) {
      AbortMultipart(path, upload_id);
      return r;
    }
    etags.push_back(response.etag);
    offset += length;
    if (offset >= size) break;
  }
  Body xml;
  xml.memory = "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">";
  for (size_t i = 0; i < etags.size(); i++)
    xml.memory +=
        "<Part><PartNumber>" + std::to_string(i + 1) + "</PartNumber><ETag>" + XmlEscape(etags[i]) + "</ETag></Part>";
  xml.memory += "</CompleteMultipartUpload>";
  r = Send("POST", path, {{"uploadId", upload_id}}, &xml, Sha256Hex(xml.memory), "application/xml", &response);
  if (!r.ok()) AbortMultipart(path, upload_id);
  return r;
}

S3Result S3Client::UploadFile(const std::string& key, int fd, uint64_t size) {
  if (size > options_.multipart_threshold) return MultipartUpload(key, fd, size);
  return PutObject(key, fd, 0, size);
}

S3Result S3Client::GetObject(const std::string& key, std::string* body) {
  Response response;
  S3Result r = Send("GET", endpoint_.ObjectPath(key), {}, nullptr, kEmptySha256Hex, nullptr, &response);
  if (r.ok()) *body = std::move(response.body);
  return r;
}

}  // namespace flightrec::uploader
