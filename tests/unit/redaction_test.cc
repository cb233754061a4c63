// Redaction tests: which names count as secret, URL passwords, and the
// command line and environment as they are written to the trace.
#include <doctest/doctest.h>

#include <string>

#include "preload/runtime/redaction.h"

using namespace std::string_literals;
using flightrec::CmdlineForTrace;
using flightrec::EnvironmentForTrace;
using flightrec::LooksLikeSecretName;
using flightrec::RedactUrlPasswords;

TEST_CASE("redaction: secret-looking names") {
  for (const char* n : {"AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "GITHUB_TOKEN", "DB_PASSWORD", "PGPASSWORD",
                        "api-key", "--auth", "SENTRY_DSN", "MYSQL_PWD", "session_cookie", "PRIVATE_KEY_PATH"})
    CHECK_MESSAGE(LooksLikeSecretName(n), n);
  for (const char* n : {"PATH", "HOME", "LANG", "--port", "-v", "FLIGHTREC_OUTPUT", "TERM"})
    CHECK_MESSAGE(!LooksLikeSecretName(n), n);
}

TEST_CASE("redaction: URL passwords, user and host kept") {
  CHECK(RedactUrlPasswords("postgres://app:s3cr3t@db.internal:5432/app") ==
        "postgres://app:<redacted>@db.internal:5432/app");
  CHECK(RedactUrlPasswords("a https://u:p@h/x and redis://:pw@r:6379 end") ==
        "a https://u:<redacted>@h/x and redis://:<redacted>@r:6379 end");
  CHECK(RedactUrlPasswords("https://user@h/p") == "https://user@h/p");
  CHECK(RedactUrlPasswords("http://h:8080/a@b") == "http://h:8080/a@b");
  CHECK(RedactUrlPasswords("no url here") == "no url here");
  CHECK(RedactUrlPasswords("trailing://") == "trailing://");
}

TEST_CASE("redaction: command line") {
  CHECK(CmdlineForTrace("server\0--port=80\0--password=hunter2\0-v\0"s) ==
        "server --port=80 --password=<redacted> -v");
  CHECK(CmdlineForTrace("cli\0--token\0abc\0next\0"s) == "cli --token <redacted> next");
  CHECK(CmdlineForTrace("psql\0postgresql://me:pw@db/x\0"s) == "psql postgresql://me:<redacted>@db/x");
  CHECK(CmdlineForTrace(""s) == "");
  // The last argument may name a secret with no value after it.
  CHECK(CmdlineForTrace("x\0--secret"s) == "x --secret");
}

TEST_CASE("redaction: environment") {
  const auto env = EnvironmentForTrace("PATH=/usr/bin\0AWS_SECRET_ACCESS_KEY=abc\0DATABASE_URL=mysql://u:pw@h/d\0"
                                       "EMPTY=\0=weird\0NOEQUALS\0"s);
  REQUIRE(env.size() == 4);
  CHECK(env[0] == std::make_pair("PATH"s, "/usr/bin"s));
  CHECK(env[1] == std::make_pair("AWS_SECRET_ACCESS_KEY"s, "<redacted>"s));
  CHECK(env[2] == std::make_pair("DATABASE_URL"s, "mysql://u:<redacted>@h/d"s));
  CHECK(env[3] == std::make_pair("EMPTY"s, ""s));
}
