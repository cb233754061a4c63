// Unit tests for issue 38 items 5 and 7 in the uploader: control characters
// never reach a request header (every credential source refuses them, and
// both HTTP clients refuse to send such a header), and the environment
// checks made before libcurl and OpenSSL are initialised (an OpenSSL
// configuration that would block its reader, SSLKEYLOGFILE), plus the TLS
// key-log callback our requests take off. End to end under the preload:
// tests/integration/test_s3_host_safety.py.
#include <dlfcn.h>
#include <doctest/doctest.h>
#include <openssl/ssl.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "uploader/credentials/credential_json.h"
#include "uploader/credentials/credential_provider.h"
#include "uploader/credentials/credentials.h"
#include "uploader/credentials/http_fetch.h"
#include "uploader/credentials/web_identity.h"
#include "uploader/library_environment.h"
#include "uploader/s3/curl_transfer.h"
#include "uploader/s3/header_text.h"
#include "uploader/s3/s3_client.h"
#include "uploader/upload_libs.h"

using namespace flightrec::uploader;

namespace {

constexpr const char* kInjected = "tok\r\nX-Injected: 1";

CredentialEnv EnvFrom(std::vector<std::string> vars) {
  vars.push_back("HOME=/nonexistent-flightrec-home");
  std::vector<const char*> ptrs;
  for (const std::string& s : vars) ptrs.push_back(s.c_str());
  ptrs.push_back(nullptr);
  return CredentialEnvFrom(ptrs.data());
}

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/flightrec-host-safety-XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    const std::string cmd = "rm -rf '" + path + "'";
    CHECK(system(cmd.c_str()) == 0);
  }
  std::string Write(const std::string& name, const std::string& text) const {
    const std::string p = path + "/" + name;
    FILE* f = fopen(p.c_str(), "w");
    REQUIRE(f != nullptr);
    fwrite(text.data(), 1, text.size(), f);
    fclose(f);
    return p;
  }
  std::string Fifo(const std::string& name) const {
    const std::string p = path + "/" + name;
    REQUIRE(mkfifo(p.c_str(), 0600) == 0);
    return p;
  }
};

// A loopback port nothing listens on.
int ClosedPort() {
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(s >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  socklen_t len = sizeof(a);
  REQUIRE(getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  close(s);
  return ntohs(a.sin_port);
}

}  // namespace

TEST_CASE("header_text: control characters are every byte below 0x20 and 0x7f") {
  CHECK_FALSE(HasControlChar(""));
  CHECK_FALSE(HasControlChar("AKIA/+= ~!\x80\xff"));  // space, punctuation and bytes above 0x7f are text
  for (int c = 0; c < 0x20; c++) CHECK(HasControlChar(std::string("a") + static_cast<char>(c) + "b"));
  CHECK(HasControlChar("a\x7f"));
  CHECK(HeaderLineClean("Authorization: Bearer abc"));
  CHECK_FALSE(HeaderLineClean(std::string("Authorization: ") + kInjected));
  Credentials c{"AKID", "secret", "token"};
  CHECK(CredentialFieldWithControlChar(c) == nullptr);
  c.session_token = kInjected;
  CHECK(std::string(CredentialFieldWithControlChar(c)) == "session token");
  c.secret_access_key = "se\tcret";
  CHECK(std::string(CredentialFieldWithControlChar(c)) == "secret access key");
  c.access_key_id = "AK\x7f";
  CHECK(std::string(CredentialFieldWithControlChar(c)) == "access key id");
}

TEST_CASE("header_text: fetched credential documents with a control character are refused") {
  ExpiringCredentials c;
  std::string error;
  // Container endpoint / IMDS JSON: "\r\n" escapes decode to CR LF.
  CHECK_FALSE(ParseCredentialDocument(
      R"({"AccessKeyId": "ASIA", "SecretAccessKey": "s", "Token": "tok\r\nX-Injected: 1",
          "Expiration": "2026-12-03T15:00:00Z"})",
      &c, &error));
  CHECK(error == "refused: the credential document's session token holds a control character");
  CHECK(c.credentials.session_token.empty());
  CHECK_FALSE(ParseCredentialDocument(
      R"({"AccessKeyId": "AS\u0000IA", "SecretAccessKey": "s", "Expiration": "2026-12-03T15:00:00Z"})", &c, &error));
  CHECK(error.find("access key id holds a control character") != std::string::npos);
  CHECK_FALSE(ParseCredentialDocument(
      R"({"AccessKeyId": "ASIA", "SecretAccessKey": "s\u007f", "Expiration": "2026-12-03T15:00:00Z"})", &c, &error));
  CHECK(error.find("secret access key") != std::string::npos);
  CHECK(error.find("s\x7f") == std::string::npos);  // never the value
  CHECK_FALSE(ParseCredentialDocument(
      R"({"AccessKeyId": "ASIA", "SecretAccessKey": "s", "Expiration": "2026-12-03T15:00:00Z\n"})", &c, &error));
  CHECK(error.find("Expiration holds a control character") != std::string::npos);
  // STS XML: character references decode to CR LF too.
  CHECK_FALSE(ParseAssumeRoleWithWebIdentityResponse(
      "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult><Credentials>"
      "<SessionToken>tok&#13;&#10;X-Injected: 1</SessionToken><SecretAccessKey>sec</SecretAccessKey>"
      "<Expiration>2026-12-03T10:00:00Z</Expiration><AccessKeyId>ASIASTS</AccessKeyId>"
      "</Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>",
      &c, &error));
  CHECK(error == "refused: STS <Credentials> session token holds a control character");
}

TEST_CASE("header_text: environment and shared-file keys with a control character stop the chain") {
  Credentials out;
  std::string error;
  bool refused = false;
  CHECK(LoadCredentials(EnvFrom({"AWS_ACCESS_KEY_ID=AK", "AWS_SECRET_ACCESS_KEY=sk",
                                 std::string("AWS_SESSION_TOKEN=") + "tok\nX-Injected: 1"}),
                        &out, &error, &refused) == CredentialSource::kNone);
  CHECK(refused);
  CHECK(error == "refused: AWS_SESSION_TOKEN (or AWS_SECURITY_TOKEN) holds a control character");
  CHECK(LoadCredentials(EnvFrom({"AWS_ACCESS_KEY_ID=AK\r", "AWS_SECRET_ACCESS_KEY=sk"}), &out, &error, &refused) ==
        CredentialSource::kNone);
  CHECK(error == "refused: AWS_ACCESS_KEY_ID holds a control character");
  CHECK(LoadCredentials(EnvFrom({"AWS_ACCESS_KEY_ID=AK", "AWS_SECRET_ACCESS_KEY=sk"}), &out, &error, &refused) ==
        CredentialSource::kEnvironment);
  CHECK_FALSE(refused);

  TempDir dir;
  // CR LF line ends are fine (trimmed); a CR or another control character inside a value is not.
  const std::string good = dir.Write("good",
                                     "[default]\r\naws_access_key_id = AK\r\naws_secret_access_key = sk\r\n"
                                     "aws_session_token = tok\r\n");
  CHECK(LoadCredentials(EnvFrom({"AWS_SHARED_CREDENTIALS_FILE=" + good}), &out, &error, &refused) ==
        CredentialSource::kSharedFile);
  CHECK(out.session_token == "tok");
  const std::string bad = dir.Write("bad",
                                    "[default]\naws_access_key_id = AK\naws_secret_access_key = sk\n"
                                    "aws_session_token = tok\rX-Injected: 1\n");
  CHECK(LoadCredentials(EnvFrom({"AWS_SHARED_CREDENTIALS_FILE=" + bad, "AWS_CONFIG_FILE=" + good}), &out, &error,
                        &refused) == CredentialSource::kNone);
  CHECK(refused);
  CHECK(error == "refused: the session token of [default] in " + bad + " holds a control character");
  CHECK(out.session_token.empty());

  // The provider stops there: no web identity, container or instance metadata stands in.
  S3Control control;
  CredentialProvider p(EnvFrom({"AWS_ACCESS_KEY_ID=AK", "AWS_SECRET_ACCESS_KEY=sk", "AWS_SESSION_TOKEN=a\x01",
                                "AWS_CONTAINER_CREDENTIALS_FULL_URI=http://127.0.0.1/c"}),
                       "us-east-1", &control);
  std::string why;
  CHECK(p.Select(&why) == CredentialSource::kNone);
  CHECK(why == "refused: AWS_SESSION_TOKEN (or AWS_SECURITY_TOKEN) holds a control character");
}

TEST_CASE("header_text: neither HTTP client sends a header with a control character") {
  const std::string url = "http://127.0.0.1:" + std::to_string(ClosedPort());
  S3Control control;
  HttpFetcher http(&control);
  HttpRequest req;
  req.url = url + "/creds";
  req.headers = {std::string("Authorization: ") + kInjected};
  HttpResponse resp;
  CHECK_FALSE(http.Fetch(req, &resp));
  CHECK(resp.error == "request not sent: a header or the URL holds a control character");
  req.headers = {"Authorization: fine"};
  CHECK_FALSE(http.Fetch(req, &resp));  // sent: nothing listens
  CHECK(resp.error != "request not sent: a header or the URL holds a control character");

  REQUIRE(S3Client::GlobalInit());
  S3Endpoint endpoint;
  std::string error;
  REQUIRE(ResolveS3Endpoint({"bucket", "us-east-1", url, 1}, {}, &endpoint, &error));
  S3ClientOptions options;
  options.max_attempts = 1;
  S3Client client(endpoint, Credentials{"AKID", "secret", kInjected}, options, nullptr);
  std::string body;
  S3Result r = client.GetObject("k", &body);
  CHECK(r.not_sent);
  CHECK(r.verdict == Verdict::kFatal);
  CHECK(r.Cause() == "request not sent: header x-amz-security-token holds a control character");
  CHECK(r.Cause().find("Injected") == std::string::npos);
  client.SetCredentials(Credentials{"AKID", "secret", "fine"});
  r = client.GetObject("k", &body);
  CHECK_FALSE(r.not_sent);  // sent, and refused by the closed port
  CHECK(r.http_status == 0);
}

TEST_CASE("library_environment: OpenSSL configurations that would block their reader") {
  TempDir dir;
  std::string why;
  CHECK(OpenSslConfigReadable(dir.path + "/missing.cnf", nullptr, &why));
  const std::string plain = dir.Write("plain.cnf", "openssl_conf = init\n[init]\n");
  CHECK(OpenSslConfigReadable(plain, nullptr, &why));
  const std::string fifo = dir.Fifo("fifo.cnf");
  CHECK_FALSE(OpenSslConfigReadable(fifo, nullptr, &why));
  CHECK(why == fifo + " is a FIFO");
  CHECK_FALSE(OpenSslConfigReadable("/dev/null", nullptr, &why));
  CHECK(why == "/dev/null is a character device");

  // .include, in each spelling, of a file or a directory; nested; relative to an include dir.
  CHECK_FALSE(OpenSslConfigReadable(dir.Write("a.cnf", "# c\n .include " + fifo + "\n"), nullptr, &why));
  CHECK(why == fifo + " is a FIFO");
  CHECK_FALSE(OpenSslConfigReadable(dir.Write("b.cnf", ".include=" + fifo + "\n"), nullptr, &why));
  CHECK_FALSE(OpenSslConfigReadable(dir.Write("c.cnf", ".include = " + dir.path + "/a.cnf\n"), nullptr, &why));
  CHECK(OpenSslConfigReadable(dir.Write("d.cnf", ".include " + plain + " # fine\n.include /nonexistent.cnf\n"), nullptr,
                              &why));
  CHECK(mkdir((dir.path + "/conf.d").c_str(), 0700) == 0);
  dir.Write("conf.d/one.cnf", "x = 1\n");
  const std::string dir_cnf = dir.Write("e.cnf", ".include " + dir.path + "/conf.d\n");
  CHECK(OpenSslConfigReadable(dir_cnf, nullptr, &why));
  dir.Fifo("conf.d/notes.txt");  // OpenSSL reads only *.cnf and *.conf from a directory
  CHECK(OpenSslConfigReadable(dir_cnf, nullptr, &why));
  dir.Fifo("conf.d/two.CONF");
  CHECK_FALSE(OpenSslConfigReadable(dir_cnf, nullptr, &why));
  CHECK(why == dir.path + "/conf.d/two.CONF is a FIFO");
  const std::string rel = dir.Write("f.cnf", ".include fifo.cnf\n");
  CHECK_FALSE(OpenSslConfigReadable(rel, dir.path.c_str(), &why));
  CHECK_FALSE(OpenSslConfigReadable(dir.Write("g.cnf", ".pragma includedir:" + dir.path + "\n.include fifo.cnf\n"),
                                    nullptr, &why));
  CHECK_FALSE(OpenSslConfigReadable(dir.Write("h.cnf", ".include $dir/x.cnf\n"), nullptr, &why));
  CHECK(why.find("cannot check") != std::string::npos);
  // A provider or engine module is dlopen'ed: a FIFO there blocks too.
  CHECK_FALSE(OpenSslConfigReadable(dir.Write("i.cnf", "[p]\nmodule = " + fifo + "\n"), nullptr, &why));
  CHECK(why == "module " + fifo + " is a FIFO");
  CHECK(OpenSslConfigReadable(dir.Write("j.cnf", "[p]\nmodule = legacy\n"), nullptr, &why));
  // Includes that include themselves end, refused, at the depth limit.
  const std::string loop = dir.path + "/loop.cnf";
  dir.Write("loop.cnf", ".include " + loop + "\n");
  CHECK_FALSE(OpenSslConfigReadable(loop, nullptr, &why));
}

TEST_CASE("library_environment: SSLKEYLOGFILE and OPENSSL_CONF in the process's environment") {
  std::string error;
  const UploadLibs* libs = LoadUploadLibs(&error);
  REQUIRE_MESSAGE(libs, error);
  TempDir dir;
  const char* saved_conf = getenv("OPENSSL_CONF");
  const std::string kept_conf = saved_conf ? saved_conf : "";
  const char* saved_keylog = getenv("SSLKEYLOGFILE");
  const std::string kept_keylog = saved_keylog ? saved_keylog : "";
  unsetenv("SSLKEYLOGFILE");
  setenv("OPENSSL_CONF", dir.Write("ok.cnf", "").c_str(), 1);
  std::string why;
  CHECK(LibraryEnvironmentSafe(*libs, &why));
  setenv("SSLKEYLOGFILE", "", 1);  // empty: libcurl ignores it
  CHECK(LibraryEnvironmentSafe(*libs, &why));
  setenv("SSLKEYLOGFILE", (dir.path + "/keys").c_str(), 1);
  CHECK_FALSE(LibraryEnvironmentSafe(*libs, &why));
  CHECK(why.find("SSLKEYLOGFILE is set") == 0);
  CHECK(why.find(dir.path) == std::string::npos);  // never the value
  unsetenv("SSLKEYLOGFILE");
  const std::string fifo = dir.Fifo("fifo.cnf");
  setenv("OPENSSL_CONF", fifo.c_str(), 1);  // libcrypto's own lookup names it
  CHECK_FALSE(LibraryEnvironmentSafe(*libs, &why));
  CHECK(why == "OpenSSL's configuration could block its reader: " + fifo + " is a FIFO");
  if (saved_conf) setenv("OPENSSL_CONF", kept_conf.c_str(), 1);
  else unsetenv("OPENSSL_CONF");
  if (saved_keylog) setenv("SSLKEYLOGFILE", kept_keylog.c_str(), 1);
}

TEST_CASE("library_environment: our TLS contexts lose libcurl's key-log callback") {
  std::string error;
  REQUIRE_MESSAGE(LoadUploadLibs(&error), error);
  void* ssl = dlopen("libssl.so.3", RTLD_NOW | RTLD_LOCAL);
  REQUIRE(ssl != nullptr);
  auto ctx_new = reinterpret_cast<decltype(&SSL_CTX_new)>(dlsym(ssl, "SSL_CTX_new"));
  auto ctx_free = reinterpret_cast<decltype(&SSL_CTX_free)>(dlsym(ssl, "SSL_CTX_free"));
  auto method = reinterpret_cast<decltype(&TLS_client_method)>(dlsym(ssl, "TLS_client_method"));
  auto set_cb = reinterpret_cast<decltype(&SSL_CTX_set_keylog_callback)>(dlsym(ssl, "SSL_CTX_set_keylog_callback"));
  auto get_cb = reinterpret_cast<decltype(&SSL_CTX_get_keylog_callback)>(dlsym(ssl, "SSL_CTX_get_keylog_callback"));
  REQUIRE((ctx_new && ctx_free && method && set_cb && get_cb));
  SSL_CTX* ctx = ctx_new(method());
  REQUIRE(ctx != nullptr);
  set_cb(ctx, [](const SSL*, const char*) {});  // what libcurl does with a key-log file open
  const bool installed = get_cb(ctx) != nullptr;
  REQUIRE(installed);
  CHECK(NoTlsKeyLog(nullptr, ctx, nullptr) == CURLE_OK);
  const bool cleared = get_cb(ctx) == nullptr;
  CHECK(cleared);
  ctx_free(ctx);
  dlclose(ssl);
}
