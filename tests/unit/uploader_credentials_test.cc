// Unit tests for the credential chain's pure pieces (issue 33): the JSON and
// STS documents, the endpoint and URL rules of each provider, the refresh
// schedule, secret scrubbing, the AWS_* snapshot and the chain's choice of
// source. No network: fetching is covered end to end by
// tests/integration/test_s3_credentials.py against loopback stand-ins.
#include <doctest/doctest.h>
#include <stdlib.h>
#include <unistd.h>

#include <climits>
#include <string>
#include <vector>

#include "uploader/credentials/container_credentials.h"
#include "uploader/credentials/credential_json.h"
#include "uploader/credentials/credential_provider.h"
#include "uploader/credentials/credentials.h"
#include "uploader/credentials/instance_metadata.h"
#include "uploader/s3/s3_client.h"
#include "uploader/credentials/secret_scrub.h"
#include "uploader/credentials/web_identity.h"

using namespace flightrec::uploader;

namespace {

CredentialEnv EnvOf(std::vector<std::string> vars) {
  std::vector<const char*> ptrs;
  for (const std::string& s : vars) ptrs.push_back(s.c_str());
  ptrs.push_back(nullptr);
  return CredentialEnvFrom(ptrs.data());
}

struct TempFile {
  std::string path;
  explicit TempFile(const std::string& text) {
    char tmpl[] = "/tmp/flightrec-credentials-test-XXXXXX";
    int fd = mkstemp(tmpl);
    REQUIRE(fd >= 0);
    REQUIRE(write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
    close(fd);
    path = tmpl;
  }
  ~TempFile() { unlink(path.c_str()); }
};

}  // namespace

TEST_CASE("credentials_json: string members of one flat object") {
  std::string v;
  CHECK(JsonStringMember(R"({"a": "x", "b": "y"})", "b", &v));
  CHECK(v == "y");
  CHECK(
      JsonStringMember(R"( {"n": 1.5e3, "o": {"b": "inner"}, "l": [1, "s", {}], "t": true, "b": "outer"} )", "b", &v));
  CHECK(v == "outer");  // nested members of the same name are not top-level
  CHECK(JsonStringMember(R"({"b": "q\"\\\/\n\u00e9\ud83d\ude00"})", "b", &v));
  CHECK(v == "q\"\\/\n\xc3\xa9\xf0\x9f\x98\x80");
  CHECK(JsonStringMember(R"({"b": "first", "b": "second"})", "b", &v));
  CHECK(v == "first");
  v = "unchanged";
  CHECK_FALSE(JsonStringMember(R"({"b": 5})", "b", &v));
  CHECK_FALSE(JsonStringMember(R"({"b": "x"} trailing)", "b", &v));
  CHECK_FALSE(JsonStringMember(R"({"b": "unterminated)", "b", &v));
  CHECK_FALSE(JsonStringMember(R"({"b": "bad \x escape"})", "b", &v));
  CHECK_FALSE(JsonStringMember(R"({"b": "\udc00 lone low surrogate"})", "b", &v));
  CHECK_FALSE(JsonStringMember("[\"b\", \"x\"]", "b", &v));
  CHECK_FALSE(JsonStringMember("", "b", &v));
  CHECK(v == "unchanged");
  // Deep nesting is refused, not recursed into without bound.
  std::string deep = "{\"a\": " + std::string(5000, '[') + std::string(5000, ']') + ", \"b\": \"x\"}";
  CHECK_FALSE(JsonStringMember(deep, "b", &v));
}

TEST_CASE("credentials_json: credential documents from IMDS and container endpoints") {
  ExpiringCredentials c;
  std::string error;
  CHECK(ParseCredentialDocument(R"({"Code": "Success", "LastUpdated": "2026-12-03T09:00:00Z", "Type": "AWS-HMAC",
      "AccessKeyId": "ASIAEXAMPLE", "SecretAccessKey": "sec/ret+", "Token": "tok==",
      "Expiration": "2026-12-03T15:00:00Z"})",
                                &c, &error));
  CHECK(c.credentials.access_key_id == "ASIAEXAMPLE");
  CHECK(c.credentials.secret_access_key == "sec/ret+");
  CHECK(c.credentials.session_token == "tok==");
  CHECK(c.expires_at == 1796310000);  // 2026-12-03T15:00:00Z
  CHECK_FALSE(
      ParseCredentialDocument(R"({"Code": "AssumeRoleUnauthorizedAccess", "Message": "secretish"})", &c, &error));
  CHECK(error.find("AssumeRoleUnauthorizedAccess") != std::string::npos);
  CHECK_FALSE(ParseCredentialDocument(R"({"AccessKeyId": "A", "Token": "t"})", &c, &error));
  CHECK_FALSE(ParseCredentialDocument(
      R"({"AccessKeyId": "A", "SecretAccessKey": "s3cr3t-value", "Expiration": "tomorrow"})", &c, &error));
  CHECK(error.find("s3cr3t-value") == std::string::npos);
}

TEST_CASE("credentials_sts: request body, endpoints, responses") {
  CHECK(AssumeRoleWithWebIdentityBody("arn:aws:iam::1:role/r", "s-1", "a.b+c/=") ==
        "Action=AssumeRoleWithWebIdentity&Version=2011-06-15&RoleArn=arn%3Aaws%3Aiam%3A%3A1%3Arole%2Fr"
        "&RoleSessionName=s-1&WebIdentityToken=a.b%2Bc%2F%3D");
  CHECK(StsEndpointUrl(EnvOf({}), "eu-west-1") == "https://sts.eu-west-1.amazonaws.com");
  CHECK(StsEndpointUrl(EnvOf({}), "cn-north-1") == "https://sts.cn-north-1.amazonaws.com.cn");
  CHECK(StsEndpointUrl(EnvOf({"AWS_ENDPOINT_URL=http://127.0.0.1:9/"}), "x") == "http://127.0.0.1:9");
  CHECK(StsEndpointUrl(EnvOf({"AWS_ENDPOINT_URL=http://a", "AWS_ENDPOINT_URL_STS=http://127.0.0.1:7"}), "x") ==
        "http://127.0.0.1:7");
  CHECK(WebIdentityConfigured(EnvOf({"AWS_WEB_IDENTITY_TOKEN_FILE=/t", "AWS_ROLE_ARN=arn"})));
  CHECK_FALSE(WebIdentityConfigured(EnvOf({"AWS_WEB_IDENTITY_TOKEN_FILE=/t"})));

  ExpiringCredentials c;
  std::string error;
  CHECK(ParseAssumeRoleWithWebIdentityResponse(
      R"(<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
           <AssumeRoleWithWebIdentityResult><Credentials>
             <SessionToken>FwoG&amp;tok</SessionToken><SecretAccessKey>sec</SecretAccessKey>
             <Expiration>2026-12-03T10:00:00Z</Expiration><AccessKeyId>ASIASTS</AccessKeyId>
           </Credentials><AssumedRoleUser><Arn>arn:x</Arn><AssumedRoleId>AROA:s</AssumedRoleId></AssumedRoleUser>
           </AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>)",
      &c, &error));
  CHECK(c.credentials.access_key_id == "ASIASTS");
  CHECK(c.credentials.session_token == "FwoG&tok");
  CHECK(c.expires_at == 1796292000);
  CHECK_FALSE(ParseAssumeRoleWithWebIdentityResponse(
      "<ErrorResponse><Error><Type>Sender</Type><Code>InvalidIdentityToken</Code><Message>bad</Message></Error>"
      "</ErrorResponse>",
      &c, &error));
  CHECK(error == "STS InvalidIdentityToken - bad");
  CHECK_FALSE(
      ParseAssumeRoleWithWebIdentityResponse("<Credentials><AccessKeyId>A</AccessKeyId></Credentials>", &c, &error));
}

TEST_CASE("credentials_container: which URLs credentials may be fetched from") {
  std::string url, error;
  CHECK(ContainerCredentialsUrl(EnvOf({"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI=/v2/credentials/x"}), &url, &error));
  CHECK(url == "http://169.254.170.2/v2/credentials/x");  // built, never fetched in tests
  // The relative URI wins over the full one, as in the SDKs.
  CHECK(ContainerCredentialsUrl(
      EnvOf({"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI=/r", "AWS_CONTAINER_CREDENTIALS_FULL_URI=http://127.0.0.1:1/f"}),
      &url, &error));
  CHECK(url == "http://169.254.170.2/r");
  for (const char* ok :
       {"http://127.0.0.1:8080/creds", "http://127.5.6.7/c", "http://[::1]:9/c", "http://localhost/c",
        "http://169.254.170.23/v1/credentials", "http://[fd00:ec2::23]/c", "https://creds.example.com/c"}) {
    CAPTURE(ok);
    CHECK(ContainerCredentialsUrl(EnvOf({std::string("AWS_CONTAINER_CREDENTIALS_FULL_URI=") + ok}), &url, &error));
    CHECK(url == ok);
  }
  for (const char* refused : {"http://10.0.0.1/c", "http://example.com/c", "http://127.0.0.1.example.com/c",
                              "http://user:pw@127.0.0.1/c", "ftp://127.0.0.1/c", "127.0.0.1/c"}) {
    CAPTURE(refused);
    CHECK_FALSE(
        ContainerCredentialsUrl(EnvOf({std::string("AWS_CONTAINER_CREDENTIALS_FULL_URI=") + refused}), &url, &error));
    CHECK(error.find("AWS_CONTAINER_CREDENTIALS_FULL_URI") != std::string::npos);
  }
  CHECK_FALSE(ContainerCredentialsUrl(EnvOf({"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI=v2/no-slash"}), &url, &error));
}

TEST_CASE("credentials_imds: endpoint and switch") {
  CHECK(InstanceMetadataEndpoint(EnvOf({})) == "http://169.254.169.254");
  CHECK(InstanceMetadataEndpoint(EnvOf({"AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE=IPv6"})) == "http://[fd00:ec2::254]");
  CHECK(InstanceMetadataEndpoint(EnvOf({"AWS_EC2_METADATA_SERVICE_ENDPOINT=http://127.0.0.1:5/"})) ==
        "http://127.0.0.1:5");
  CHECK(EnvOf({"AWS_EC2_METADATA_DISABLED=true"}).ec2_metadata_disabled);
  CHECK(EnvOf({"AWS_EC2_METADATA_DISABLED=TRUE"}).ec2_metadata_disabled);
  CHECK_FALSE(EnvOf({"AWS_EC2_METADATA_DISABLED=1"}).ec2_metadata_disabled);  // the SDKs take "true" only
  CHECK_FALSE(EnvOf({}).ec2_metadata_disabled);
  // Disabled means nothing is sent: the fetch refuses before any request.
  S3Control control;
  HttpFetcher http(&control);
  ExpiringCredentials c;
  std::string seen;
  FetchOutcome o = FetchInstanceMetadataCredentials(EnvOf({"AWS_EC2_METADATA_DISABLED=true"}), &http, &c, &seen);
  CHECK_FALSE(o.ok);
  CHECK(o.error.find("disabled") != std::string::npos);
  CHECK(seen.empty());
}

TEST_CASE("credentials_refresh: minutes ahead, or halfway through a short lifetime") {
  CHECK(RefreshAt(1000, 0) == INT64_MAX);              // static keys never expire
  CHECK(RefreshAt(1000, 1000 + 3600) == 1000 + 3300);  // an hour: 5 minutes ahead
  CHECK(RefreshAt(1000, 1000 + 21600) == 1000 + 21300);
  CHECK(RefreshAt(1000, 1000 + 6) == 1000 + 3);  // 6 s: halfway
  CHECK(RefreshAt(1000, 1000 + 1) == 1000 + 1);  // never sooner than 1 s after the fetch
  CHECK(RefreshAt(1000, 900) == 1000 + 1);       // handed out already expired
  CHECK(CredentialRetryNs(0) == 0);
  CHECK(CredentialRetryNs(1) == 1000000000ull);
  CHECK(CredentialRetryNs(3) == 4000000000ull);
  CHECK(CredentialRetryNs(9) == 256000000000ull);
  CHECK(CredentialRetryNs(10) == 300000000000ull);  // capped at 5 minutes
  CHECK(CredentialRetryNs(64) == 300000000000ull);
}

TEST_CASE("credentials_scrub: secrets and JWT-shaped tokens never survive") {
  SecretList list;
  list.Add("short");  // too short to scrub safely: ignored
  list.Add("FwoGZXIvYXdzEBAaDSECRETTOKEN");
  std::string text = "InvalidToken: FwoGZXIvYXdzEBAaDSECRETTOKEN is not valid (short)";
  list.Scrub(&text);
  CHECK(text == "InvalidToken: [redacted] is not valid (short)");
  text = "Couldn't verify eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl, sorry; keyJSON stays";
  list.Scrub(&text);
  CHECK(text == "Couldn't verify [redacted], sorry; keyJSON stays");
  for (size_t i = 0; i < SecretList::kMax + 4; i++) list.Add("secret-number-" + std::to_string(i));
  text = "secret-number-0 secret-number-19";
  list.Scrub(&text);
  CHECK(text == "secret-number-0 [redacted]");  // the oldest are forgotten, the recent kept
}

TEST_CASE("credentials_env: the AWS_* snapshot and the config file") {
  CredentialEnv env =
      EnvOf({"AWS_WEB_IDENTITY_TOKEN_FILE=/var/run/token", "AWS_ROLE_ARN=arn:r", "AWS_ROLE_SESSION_NAME=s",
             "AWS_DEFAULT_REGION=eu-west-1", "AWS_CONTAINER_AUTHORIZATION_TOKEN=auth-token-value",
             "AWS_CONTAINER_CREDENTIALS_FULL_URI=http://127.0.0.1/c"});
  CHECK(env.web_identity_token_file == "/var/run/token");
  CHECK(env.role_arn == "arn:r");
  CHECK(env.role_session_name == "s");
  CHECK(env.region == "eu-west-1");
  CHECK(env.container_token == "auth-token-value");
  env.Clear();
  CHECK(env.container_token.empty());

  TempFile config(
      "[default]\nregion = us-east-1\n[profile ci]\naws_access_key_id = AKCONFIG\n"
      "aws_secret_access_key = config-secret\n");
  Credentials c;
  std::string error;
  CHECK(LoadCredentials(
            EnvOf({"AWS_PROFILE=ci", "AWS_SHARED_CREDENTIALS_FILE=/nonexistent", "AWS_CONFIG_FILE=" + config.path}), &c,
            &error) == CredentialSource::kConfigFile);
  CHECK(c.access_key_id == "AKCONFIG");
  CHECK(LoadCredentials(EnvOf({"AWS_SHARED_CREDENTIALS_FILE=/nonexistent", "AWS_CONFIG_FILE=" + config.path}), &c,
                        &error) == CredentialSource::kNone);
  CHECK(error.find("[default] in " + config.path) != std::string::npos);
  CHECK(ConfigFileSection("default") == "default");
  CHECK(ConfigFileSection("ci") == "profile ci");
}

TEST_CASE("credentials_env: web identity from the config file's profile, unless the variables say otherwise") {
  TempFile config(
      "[profile eks]\nrole_arn = arn:aws:iam::1:role/from-profile\n"
      "web_identity_token_file = /var/run/profile-token\nrole_session_name = prof-session\n"
      "[profile half]\nrole_arn = arn:aws:iam::1:role/half\n");
  CredentialEnv env = EnvOf({"AWS_PROFILE=eks", "AWS_CONFIG_FILE=" + config.path});
  ApplyProfileWebIdentity(&env);
  CHECK(env.role_arn == "arn:aws:iam::1:role/from-profile");
  CHECK(env.web_identity_token_file == "/var/run/profile-token");
  CHECK(env.role_session_name == "prof-session");
  env = EnvOf({"AWS_PROFILE=eks", "AWS_CONFIG_FILE=" + config.path, "AWS_ROLE_ARN=arn:env",
               "AWS_WEB_IDENTITY_TOKEN_FILE=/env-token"});
  ApplyProfileWebIdentity(&env);
  CHECK(env.role_arn == "arn:env");
  CHECK(env.web_identity_token_file == "/env-token");
  env = EnvOf({"AWS_PROFILE=half", "AWS_CONFIG_FILE=" + config.path});
  ApplyProfileWebIdentity(&env);
  CHECK_FALSE(WebIdentityConfigured(env));  // a role without a token file is no web identity
}

TEST_CASE("credentials_chain: the first configured source wins, chosen without network") {
  S3Control control;
  std::string why;
  const std::vector<std::string> no_files = {"HOME=/nonexistent-flightrec-home"};
  auto pick = [&](std::vector<std::string> vars) {
    vars.insert(vars.end(), no_files.begin(), no_files.end());
    CredentialProvider p(EnvOf(vars), "us-east-1", &control);
    why.clear();
    return p.Select(&why);
  };
  CHECK(pick({"AWS_ACCESS_KEY_ID=AK", "AWS_SECRET_ACCESS_KEY=sk", "AWS_ROLE_ARN=arn",
              "AWS_WEB_IDENTITY_TOKEN_FILE=/t"}) == CredentialSource::kEnvironment);
  CHECK(pick({"AWS_ROLE_ARN=arn", "AWS_WEB_IDENTITY_TOKEN_FILE=/t",
              "AWS_CONTAINER_CREDENTIALS_FULL_URI=http://127.0.0.1/c"}) == CredentialSource::kWebIdentity);
  CHECK(pick({"AWS_CONTAINER_CREDENTIALS_FULL_URI=http://127.0.0.1/c"}) == CredentialSource::kContainer);
  CHECK(pick({"AWS_CONTAINER_CREDENTIALS_FULL_URI=http://10.1.2.3/c"}) == CredentialSource::kNone);
  CHECK(why.find("not allowed") != std::string::npos);
  CHECK(pick({}) == CredentialSource::kInstanceMetadata);
  CHECK(pick({"AWS_EC2_METADATA_DISABLED=true"}) == CredentialSource::kNone);
  CHECK(why.find("AWS_EC2_METADATA_DISABLED=true") != std::string::npos);

  // Static keys are ready at once and never refreshed.
  CredentialProvider p(EnvOf({"AWS_ACCESS_KEY_ID=AK", "AWS_SECRET_ACCESS_KEY=static-secret"}), "us-east-1", &control);
  REQUIRE(p.Select(&why) == CredentialSource::kEnvironment);
  Credentials c;
  bool changed = false;
  std::string error;
  CHECK(p.Get(false, &c, &changed, &error) == CredentialProvider::Status::kReady);
  CHECK(changed);
  CHECK(c.secret_access_key == "static-secret");
  CHECK(p.Get(false, &c, &changed, &error) == CredentialProvider::Status::kReady);
  CHECK_FALSE(changed);
  CHECK(p.fetches() == 0);
  std::string echoed = "SignatureDoesNotMatch for static-secret";
  p.Scrub(&echoed);
  CHECK(echoed == "SignatureDoesNotMatch for [redacted]");
}

TEST_CASE("credentials_policy: object headers for SSE and storage class") {
  S3ClientOptions o;
  CHECK(ObjectPolicyHeaders(o).empty());
  o.sse = "aws:kms";
  o.sse_kms_key_id = "alias/k";
  o.storage_class = "GLACIER_IR";
  CHECK(ObjectPolicyHeaders(o) == KeyValues{{"x-amz-server-side-encryption", "aws:kms"},
                                            {"x-amz-server-side-encryption-aws-kms-key-id", "alias/k"},
                                            {"x-amz-storage-class", "GLACIER_IR"}});
  o.sse = "AES256";  // a key id means nothing without aws:kms
  CHECK(ObjectPolicyHeaders(o) ==
        KeyValues{{"x-amz-server-side-encryption", "AES256"}, {"x-amz-storage-class", "GLACIER_IR"}});
}
