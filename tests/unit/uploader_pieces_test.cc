// Unit tests for the uploader's small pure pieces: credentials lookup,
// endpoint/addressing rules, object keys, segment names, S3 XML, the retry
// policy and HTTP dates.
#include <doctest/doctest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "uploader/credentials/credentials.h"
#include "uploader/retry_policy.h"
#include "uploader/s3/s3_endpoint.h"
#include "uploader/s3/s3_xml.h"
#include "uploader/uploader.h"

using namespace flightrec::uploader;

namespace {

// A NULL-terminated environment built from "K=V" strings.
struct Env {
  std::vector<std::string> vars;
  std::vector<const char*> ptrs;
  explicit Env(std::vector<std::string> v) : vars(std::move(v)) {
    for (const std::string& s : vars) ptrs.push_back(s.c_str());
    ptrs.push_back(nullptr);
  }
  const char* const* envp() const { return ptrs.data(); }
};

struct TempFile {
  std::string path;
  explicit TempFile(const std::string& text) {
    char tmpl[] = "/tmp/flightrec-uploader-test-XXXXXX";
    int fd = mkstemp(tmpl);
    REQUIRE(fd >= 0);
    REQUIRE(write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
    close(fd);
    path = tmpl;
  }
  ~TempFile() { unlink(path.c_str()); }
};

}  // namespace

TEST_CASE("uploader_credentials: environment first, then the shared file profile") {
  TempFile file(
      "# comment\n[default]\naws_access_key_id = AKDEFAULT\naws_secret_access_key=secretdefault\n\n"
      "[ci]\n  AWS_ACCESS_KEY_ID = AKCI  \naws_secret_access_key = secret/ci+=\naws_session_token = tokci\n"
      "; trailing comment\n[broken]\naws_access_key_id = AKONLY\n");
  Credentials c;
  std::string error;

  SUBCASE("environment wins") {
    Env env({"AWS_ACCESS_KEY_ID=AKENV", "AWS_SECRET_ACCESS_KEY=envsecret", "AWS_SESSION_TOKEN=envtok",
             "AWS_SHARED_CREDENTIALS_FILE=" + file.path});
    CHECK(LoadCredentials(CredentialEnvFrom(env.envp()), &c, &error) == CredentialSource::kEnvironment);
    CHECK(c.access_key_id == "AKENV");
    CHECK(c.secret_access_key == "envsecret");
    CHECK(c.session_token == "envtok");
  }
  SUBCASE("default profile from the file") {
    Env env({"AWS_SHARED_CREDENTIALS_FILE=" + file.path});
    CHECK(LoadCredentials(CredentialEnvFrom(env.envp()), &c, &error) == CredentialSource::kSharedFile);
    CHECK(c.access_key_id == "AKDEFAULT");
    CHECK(c.secret_access_key == "secretdefault");
    CHECK(c.session_token.empty());
  }
  SUBCASE("AWS_PROFILE selects a section; keys are case-insensitive; a half-set env is ignored") {
    Env env({"AWS_ACCESS_KEY_ID=AKHALF", "AWS_PROFILE=ci", "AWS_SHARED_CREDENTIALS_FILE=" + file.path});
    CHECK(LoadCredentials(CredentialEnvFrom(env.envp()), &c, &error) == CredentialSource::kSharedFile);
    CHECK(c.access_key_id == "AKCI");
    CHECK(c.secret_access_key == "secret/ci+=");
    CHECK(c.session_token == "tokci");
  }
  SUBCASE("a profile without a secret is no credentials, and the error names no secret") {
    Env env({"AWS_PROFILE=broken", "AWS_SHARED_CREDENTIALS_FILE=" + file.path});
    CHECK(LoadCredentials(CredentialEnvFrom(env.envp()), &c, &error) == CredentialSource::kNone);
    CHECK(error.find("broken") != std::string::npos);
    CHECK(error.find(file.path) != std::string::npos);
    CHECK(error.find("secretdefault") == std::string::npos);
    CHECK(error.find("AKONLY") == std::string::npos);
  }
  SUBCASE("~/.aws/credentials under HOME by default; missing file is reported") {
    Env env({"HOME=/nonexistent-flightrec-home"});
    CHECK(LoadCredentials(CredentialEnvFrom(env.envp()), &c, &error) == CredentialSource::kNone);
    CHECK(error.find("/nonexistent-flightrec-home/.aws/credentials") != std::string::npos);
  }
}

TEST_CASE("uploader_endpoint: region, endpoint and addressing rules") {
  S3Endpoint ep;
  std::string error;
  SUBCASE("AWS default: regional endpoint, virtual-hosted") {
    REQUIRE(ResolveS3Endpoint({"my-bucket", "", "", -1}, {}, &ep, &error));
    CHECK(ep.region == "us-east-1");
    CHECK(ep.scheme == "https");
    CHECK(ep.host == "my-bucket.s3.us-east-1.amazonaws.com");
    CHECK_FALSE(ep.path_style);
    CHECK(ep.ObjectPath("a/b.seg") == "/a/b.seg");
    CHECK(ep.Url("/a/b.seg") == "https://my-bucket.s3.us-east-1.amazonaws.com/a/b.seg");
  }
  SUBCASE("region fallbacks: flag, AWS_REGION, AWS_DEFAULT_REGION") {
    EndpointEnv env{"eu-west-1", "ap-south-1", "", ""};
    REQUIRE(ResolveS3Endpoint({"b-1", "us-west-2", "", -1}, env, &ep, &error));
    CHECK(ep.region == "us-west-2");
    REQUIRE(ResolveS3Endpoint({"b-1", "", "", -1}, env, &ep, &error));
    CHECK(ep.region == "eu-west-1");
    env.aws_region.clear();
    REQUIRE(ResolveS3Endpoint({"b-1", "", "", -1}, env, &ep, &error));
    CHECK(ep.region == "ap-south-1");
    CHECK(ep.host == "b-1.s3.ap-south-1.amazonaws.com");
    REQUIRE(ResolveS3Endpoint({"b-1", "cn-north-1", "", -1}, {}, &ep, &error));
    CHECK(ep.host == "b-1.s3.cn-north-1.amazonaws.com.cn");
  }
  SUBCASE("dotted bucket names use path style on AWS") {
    REQUIRE(ResolveS3Endpoint({"logs.example.com", "", "", -1}, {}, &ep, &error));
    CHECK(ep.path_style);
    CHECK(ep.host == "s3.us-east-1.amazonaws.com");
    CHECK(ep.ObjectPath("k") == "/logs.example.com/k");
  }
  SUBCASE("custom endpoints: flag > AWS_ENDPOINT_URL_S3 > AWS_ENDPOINT_URL; path style; ports") {
    EndpointEnv env{"", "", "http://127.0.0.1:9000", "http://ignored:1"};
    REQUIRE(ResolveS3Endpoint({"bkt", "", "", -1}, env, &ep, &error));
    CHECK(ep.custom);
    CHECK(ep.path_style);
    CHECK(ep.scheme == "http");
    CHECK(ep.host == "127.0.0.1:9000");
    CHECK(ep.ObjectPath("x/y") == "/bkt/x/y");
    CHECK(ep.BucketPath() == "/bkt/");
    env.aws_endpoint_url_s3.clear();
    REQUIRE(ResolveS3Endpoint({"bkt", "", "", -1}, env, &ep, &error));
    CHECK(ep.host == "ignored:1");
    REQUIRE(ResolveS3Endpoint({"bkt", "", "https://Minio.Local:443/base/", -1}, env, &ep, &error));
    CHECK(ep.host == "minio.local");  // default port omitted, host lowercased
    CHECK(ep.base_path == "/base");
    CHECK(ep.ObjectPath("k") == "/base/bkt/k");
    REQUIRE(ResolveS3Endpoint({"bkt", "", "http://[::1]:8080", -1}, {}, &ep, &error));
    CHECK(ep.host == "[::1]:8080");
  }
  SUBCASE("FLIGHTREC_S3_PATH_STYLE overrides both ways") {
    REQUIRE(ResolveS3Endpoint({"bkt", "", "http://localhost:9000", 0}, {}, &ep, &error));
    CHECK_FALSE(ep.path_style);
    CHECK(ep.host == "bkt.localhost:9000");
    REQUIRE(ResolveS3Endpoint({"bkt", "", "", 1}, {}, &ep, &error));
    CHECK(ep.path_style);
    CHECK(ep.host == "s3.us-east-1.amazonaws.com");
  }
  SUBCASE("bad settings give one clear reason") {
    CHECK_FALSE(ResolveS3Endpoint({"Bad_Bucket", "", "", -1}, {}, &ep, &error));
    CHECK(error.find("Bad_Bucket") != std::string::npos);
    CHECK_FALSE(ResolveS3Endpoint({"bkt", "", "ftp://x", -1}, {}, &ep, &error));
    CHECK(error.find("FLIGHTREC_S3_ENDPOINT") != std::string::npos);
    CHECK_FALSE(ResolveS3Endpoint({"bkt", "", "http://user:pw@host", -1}, {}, &ep, &error));
    CHECK(error.find("pw") == std::string::npos);
    CHECK_FALSE(ResolveS3Endpoint({"bkt", "", "http://host:99999", -1}, {}, &ep, &error));
    CHECK_FALSE(ResolveS3Endpoint({"bkt", "", "http://host/p?q=1", -1}, {}, &ep, &error));
    CHECK_FALSE(ResolveS3Endpoint({"bkt", "us east", "", -1}, {}, &ep, &error));
  }
  CHECK(IsValidBucketName("abc"));
  CHECK(IsValidBucketName("a.b-c"));
  CHECK_FALSE(IsValidBucketName("ab"));
  CHECK_FALSE(IsValidBucketName("-abc"));
  CHECK_FALSE(IsValidBucketName("a..b"));
}

TEST_CASE("uploader_keys: {prefix}/{service}/{yyyy-mm-dd}/{host}/{file}") {
  const time_t t = 1700000000;  // 2023-11-14T22:13:20Z
  CHECK(SegmentKey("flightrec", "api", t, "web-1", "x.seg") == "flightrec/api/2023-11-14/web-1/x.seg");
  CHECK(SegmentKey("/a/b/", "api", t, "h", "x.seg") == "a/b/api/2023-11-14/h/x.seg");
  CHECK(SegmentKey("", "", t, "h/1", "x.seg") == "unknown/2023-11-14/h_1/x.seg");

  std::string service;
  time_t when = 0;
  REQUIRE(ParseSegmentName("20231114T221320.123Z-api_v2-4242-0007.seg", &service, &when));
  CHECK(service == "api_v2");
  CHECK(when == t);
  CHECK_FALSE(ParseSegmentName("20231114T221320.123Z-api-4242-0007.active", &service, &when));
  CHECK_FALSE(ParseSegmentName("20231114T221320.123Z-api-x-0007.seg", &service, &when));
  CHECK_FALSE(ParseSegmentName("random.seg", &service, &when));
  CHECK_FALSE(ParseSegmentName("2023111xT221320.123Z-api-1-1.seg", &service, &when));
}

TEST_CASE("uploader_xml: element text, entities, escaping") {
  const std::string err =
      "<?xml version=\"1.0\"?><Error><Code>SignatureDoesNotMatch</Code><Message>a &lt;b&gt; &amp; &quot;c&quot; "
      "&#65;&#x42;</Message><CodeX>no</CodeX></Error>";
  std::string v;
  REQUIRE(XmlElementText(err, "Code", &v));
  CHECK(v == "SignatureDoesNotMatch");
  REQUIRE(XmlElementText(err, "Message", &v));
  CHECK(v == "a <b> & \"c\" AB");
  CHECK_FALSE(XmlElementText(err, "UploadId", &v));
  REQUIRE(XmlElementText("<R xmlns=\"x\"><UploadId attr=\"1\">id-1</UploadId><Empty/></R>", "UploadId", &v));
  CHECK(v == "id-1");
  REQUIRE(XmlElementText("<R><Empty/></R>", "Empty", &v));
  CHECK(v.empty());
  CHECK(XmlEscape("\"e&t<a>g'\"") == "&quot;e&amp;t&lt;a&gt;g&apos;&quot;");
}

TEST_CASE("uploader_retry: classification of S3 outcomes") {
  CHECK(Classify(Transport::kOk, 200, "") == Verdict::kSuccess);
  CHECK(Classify(Transport::kOk, 204, "") == Verdict::kSuccess);
  CHECK(Classify(Transport::kTransient, 0, "") == Verdict::kRetry);
  CHECK(Classify(Transport::kAborted, 0, "") == Verdict::kAborted);
  CHECK(Classify(Transport::kFatal, 0, "") == Verdict::kFatal);
  CHECK(Classify(Transport::kOk, 500, "InternalError") == Verdict::kRetry);
  CHECK(Classify(Transport::kOk, 503, "SlowDown") == Verdict::kRetry);
  CHECK(Classify(Transport::kOk, 502, "") == Verdict::kRetry);
  CHECK(Classify(Transport::kOk, 429, "") == Verdict::kRetry);
  CHECK(Classify(Transport::kOk, 400, "RequestTimeout") == Verdict::kRetry);
  CHECK(Classify(Transport::kOk, 403, "RequestTimeTooSkewed") == Verdict::kRetrySkew);
  CHECK(Classify(Transport::kOk, 403, "SignatureDoesNotMatch") == Verdict::kFatal);
  CHECK(Classify(Transport::kOk, 403, "AccessDenied") == Verdict::kFatal);
  CHECK(Classify(Transport::kOk, 404, "NoSuchBucket") == Verdict::kFatal);
  CHECK(Classify(Transport::kOk, 301, "PermanentRedirect") == Verdict::kFatal);
  CHECK(Classify(Transport::kOk, 200, "InternalError") == Verdict::kRetry);  // CompleteMultipartUpload's 200 error
  CHECK(Classify(Transport::kOk, 200, "InvalidPart") == Verdict::kFatal);
}

TEST_CASE("uploader_retry: full-jitter backoff stays within its exponential ceiling") {
  const uint64_t base = 100, cap = 1000;
  CHECK(BackoffCeilingNs(0, base, cap) == 100);
  CHECK(BackoffCeilingNs(3, base, cap) == 800);
  CHECK(BackoffCeilingNs(4, base, cap) == 1000);
  CHECK(BackoffCeilingNs(200, base, cap) == 1000);  // no overflow
  JitterRandom rng(42);
  for (unsigned attempt = 0; attempt < 8; attempt++) {
    uint64_t lo = UINT64_MAX, hi = 0;
    for (int i = 0; i < 2000; i++) {
      uint64_t w = FullJitterBackoffNs(attempt, base, cap, rng.Next());
      lo = std::min(lo, w);
      hi = std::max(hi, w);
    }
    const uint64_t ceiling = BackoffCeilingNs(attempt, base, cap);
    CHECK(hi <= ceiling);
    CHECK(lo < ceiling / 4);      // "full" jitter reaches near zero...
    CHECK(hi > ceiling * 3 / 4);  // ...and near the ceiling
  }
}

TEST_CASE("uploader_retry: HTTP and ISO dates parse without the locale") {
  int64_t t = 0;
  REQUIRE(ParseHttpDate("Sun, 06 Nov 1994 08:49:37 GMT", &t));
  CHECK(t == 784111777);
  REQUIRE(ParseHttpDate("2013-05-24T00:00:00Z", &t));
  CHECK(t == 1369353600);
  REQUIRE(ParseHttpDate("2013-05-24T00:00:00.123Z", &t));
  CHECK(t == 1369353600);
  CHECK_FALSE(ParseHttpDate("Sun, 06 Foo 1994 08:49:37 GMT", &t));
  CHECK_FALSE(ParseHttpDate("Sun, 06 Nov 1994 08:49:37 PST", &t));
  CHECK_FALSE(ParseHttpDate("2013-05-24T00:00:00+02:00", &t));
  CHECK_FALSE(ParseHttpDate("", &t));
}

TEST_CASE("uploader_keys: a segment kept for an incident goes under incident-{tag}-{pid}/") {
  std::string service, incident, pid;
  time_t when = 0, incident_when = 0;
  REQUIRE(ParseSegmentName("20231114T221320.123Z-api-4242-0007@20231115T000001.500Z.seg", &service, &when, &incident,
                           &incident_when, &pid));
  CHECK(service == "api");
  CHECK(when == 1700000000);
  CHECK(incident == "20231115T000001.500Z");
  CHECK(incident_when == 1700006401);
  CHECK(pid == "4242");
  // The incident's date, not the segment's: one incident, one prefix.
  CHECK(IncidentSegmentKey("flightrec", service, incident_when, "h", incident, pid,
                           "20231114T221320.123Z-api-4242-0007@20231115T000001.500Z.seg") ==
        "flightrec/api/2023-11-15/h/incident-20231115T000001.500Z-4242/"
        "20231114T221320.123Z-api-4242-0007@20231115T000001.500Z.seg");
  // No tag: no incident.
  REQUIRE(ParseSegmentName("20231114T221320.123Z-api-4242-0007.seg", &service, &when, &incident, &incident_when, &pid));
  CHECK(incident.empty());
  // A tag that is not a stamp makes the name unknown (keyed the old way, by mtime).
  CHECK_FALSE(ParseSegmentName("20231114T221320.123Z-api-4242-0007@junk.seg", &service, &when, &incident));
  CHECK_FALSE(ParseSegmentName("20231114T221320.123Z-api-4242-0007@.seg", &service, &when, &incident));
}
