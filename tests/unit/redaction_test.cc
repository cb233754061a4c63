// Redaction tests: which names count as secret, the environment allow-list,
// URL userinfo and query tokens, and the command line and environment as
// they are written to the trace (issue #29 item 14: each example from it).
#include <doctest/doctest.h>

#include <string>

#include "preload/runtime/redaction.h"

using namespace std::string_literals;
using flightrec::CmdlineForTrace;
using flightrec::EnvironmentForTrace;
using flightrec::IsHarmlessEnvName;
using flightrec::LooksLikeSecretName;
using flightrec::RedactSecretsInText;

TEST_CASE("redaction: secret-looking names") {
  for (const char* n : {"AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "GITHUB_TOKEN", "DB_PASSWORD", "PGPASSWORD",
                        "api-key", "--auth", "SENTRY_DSN", "MYSQL_PWD", "session_cookie", "PRIVATE_KEY_PATH", "DB_PASS",
                        "REDIS_PASS", "requirepass", "X-Amz-Security-Token"})
    CHECK_MESSAGE(LooksLikeSecretName(n), n);
  for (const char* n : {"PATH", "HOME", "LANG", "--port", "-v", "FLIGHTREC_OUTPUT", "TERM"})
    CHECK_MESSAGE(!LooksLikeSecretName(n), n);
}

TEST_CASE("redaction: the environment allow-list") {
  for (const char* n :
       {"PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "LANG", "LC_ALL", "TZ", "HOME", "TERM", "FLIGHTREC_OUTPUT", "USER"})
    CHECK_MESSAGE(IsHarmlessEnvName(n), n);
  // Unknown names are not harmless, whatever they look like; nor is an
  // allowed prefix with a secret-looking name.
  for (const char* n : {"DB_PASS", "REDIS_PASS", "VISIBLE_SETTING", "MY_APP_CONFIG", "DATABASE_URL",
                        "FLIGHTREC_S3_SSE_KMS_KEY_ID", "PRIVATE_KEY_PATH", "path"})
    CHECK_MESSAGE(!IsHarmlessEnvName(n), n);
}

TEST_CASE("redaction: URL userinfo, user and host kept") {
  CHECK(RedactSecretsInText("postgres://app:s3cr3t@db.internal:5432/app") ==
        "postgres://app:[redacted]@db.internal:5432/app");
  CHECK(RedactSecretsInText("a https://u:p@h/x and redis://:pw@r:6379 end") ==
        "a https://u:[redacted]@h/x and redis://:[redacted]@r:6379 end");
  // A token as the user part, and passwords holding '/' or '@'.
  CHECK(RedactSecretsInText("https://ghp_x1y2z3@github.com/o/r.git") == "https://[redacted]@github.com/o/r.git");
  CHECK(RedactSecretsInText("postgres://u:p/ss@db/x") == "postgres://u:[redacted]@db/x");
  CHECK(RedactSecretsInText("postgres://u:p@ss@db/x") == "postgres://u:[redacted]@db/x");
  // An '@' in the path or query is no userinfo...
  CHECK(RedactSecretsInText("https://h/p?mail=a@b.c") == "https://h/p?mail=a@b.c");
  // ...but host:port/path@x cannot be told from user:pass/word@host: hidden.
  CHECK(RedactSecretsInText("http://h:8080/a@b") == "http://h:[redacted]@b");
  CHECK(RedactSecretsInText("no url here") == "no url here");
  CHECK(RedactSecretsInText("trailing://") == "trailing://");
}

TEST_CASE("redaction: query tokens, headers, bearer credentials") {
  CHECK(RedactSecretsInText("https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIA%2F"
                            "x&X-Amz-Security-Token=FwoGZX&X-Amz-Signature=abc123&X-Amz-Expires=60") ==
        "https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=[redacted]"
        "&X-Amz-Security-Token=[redacted]&X-Amz-Signature=[redacted]&X-Amz-Expires=60");
  CHECK(RedactSecretsInText("https://a.blob/c?sv=1&sig=Zm9v#frag") == "https://a.blob/c?sv=1&sig=[redacted]#frag");
  CHECK(RedactSecretsInText("Authorization: Bearer eyJabc") == "Authorization: [redacted]");
  CHECK(RedactSecretsInText("Cookie: sid=1") == "Cookie: [redacted]");
  CHECK(RedactSecretsInText("Accept: text/html") == "Accept: text/html");
  CHECK(RedactSecretsInText("then Bearer abc.def used") == "then Bearer [redacted] used");
}

TEST_CASE("redaction: command line") {
  CHECK(CmdlineForTrace("server\0--port=80\0--password=hunter2\0-v\0"s) == "server --port=80 --password=[redacted] -v");
  CHECK(CmdlineForTrace("cli\0--token\0abc\0next\0"s) == "cli --token [redacted] next");
  CHECK(CmdlineForTrace("psql\0postgresql://me:pw@db/x\0"s) == "psql postgresql://me:[redacted]@db/x");
  CHECK(CmdlineForTrace(""s) == "");
  // The last argument may name a secret with no value after it.
  CHECK(CmdlineForTrace("x\0--secret"s) == "x --secret");
  // The examples of issue #29.
  CHECK(CmdlineForTrace("redis-server\0--requirepass\0hunter2\0--port\0"
                        "6379\0"s) == "redis-server --requirepass [redacted] --port 6379");
  CHECK(CmdlineForTrace("mysql\0-pSECRET\0-h\0db\0"s) == "mysql -p[redacted] -h db");
  CHECK(CmdlineForTrace("redis-cli\0-a\0pw\0ping\0"s) == "redis-cli -a [redacted] ping");
  CHECK(CmdlineForTrace("curl\0-u\0user:pw\0https://h/\0"s) == "curl -u user:[redacted] https://h/");
  CHECK(CmdlineForTrace("curl\0-uuser:pw\0--user=me:pw2\0--user\0you:pw3\0"s) ==
        "curl -uuser:[redacted] --user=me:[redacted] --user you:[redacted]");
  CHECK(CmdlineForTrace("curl\0--header=Authorization: Bearer tok123\0-H\0Authorization: Bearer tok456\0"s) ==
        "curl --header=Authorization: [redacted] -H Authorization: [redacted]");
  CHECK(CmdlineForTrace("tool\0--pass\0x\0"s) == "tool --pass [redacted]");
  CHECK(CmdlineForTrace("git\0clone\0https://ghp_x@host/r\0"s) == "git clone https://[redacted]@host/r");
  CHECK(CmdlineForTrace("app\0--db=postgres://u:p/ss@db\0"s) == "app --db=postgres://u:[redacted]@db");
  CHECK(CmdlineForTrace("wget\0https://b/k?X-Amz-Security-Token=T0K&X-Amz-Signature=S1G\0"s) ==
        "wget https://b/k?X-Amz-Security-Token=[redacted]&X-Amz-Signature=[redacted]");
  CHECK(CmdlineForTrace("env\0DB_PASS=x\0LANG=C\0prog\0"s) == "env DB_PASS=[redacted] LANG=C prog");
  // Flags of -p or -a that take no value leave the next option alone.
  CHECK(CmdlineForTrace("mkdir\0-p\0-v\0/x\0"s) == "mkdir -p -v /x");
}

TEST_CASE("redaction: environment") {
  const auto env = EnvironmentForTrace(
      "PATH=/usr/bin\0AWS_SECRET_ACCESS_KEY=abc\0DATABASE_URL=mysql://u:pw@h/d\0"
      "EMPTY=\0=weird\0NOEQUALS\0DB_PASS=p1\0REDIS_PASS=p2\0LANG=C.UTF-8\0"
      "FLIGHTREC_S3_ENDPOINT=http://k:s@127.0.0.1:9\0"s);
  REQUIRE(env.size() == 8);
  CHECK(env[0] == std::make_pair("PATH"s, "/usr/bin"s));
  CHECK(env[1] == std::make_pair("AWS_SECRET_ACCESS_KEY"s, "[redacted]"s));
  CHECK(env[2] == std::make_pair("DATABASE_URL"s, "[redacted]"s));
  CHECK(env[3] == std::make_pair("EMPTY"s, "[redacted]"s));
  CHECK(env[4] == std::make_pair("DB_PASS"s, "[redacted]"s));
  CHECK(env[5] == std::make_pair("REDIS_PASS"s, "[redacted]"s));
  CHECK(env[6] == std::make_pair("LANG"s, "C.UTF-8"s));
  CHECK(env[7] == std::make_pair("FLIGHTREC_S3_ENDPOINT"s, "http://k:[redacted]@127.0.0.1:9"s));
}
