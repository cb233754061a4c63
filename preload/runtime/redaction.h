// Redaction: what identifying data may leave the process in a trace.
//
// The environment (FLIGHTREC_RECORD_ENV=1) is recorded through an
// allow-list: only variables known to be harmless (locale, time zone, paths,
// terminal, user and home, FLIGHTREC_*; see IsHarmlessEnvName) keep their
// values; every other variable is recorded by name with the value
// "[redacted]". A deny-list by name always misses something (DB_PASS,
// REDIS_PASS, a token under any name at all).
//
// The command line is recorded with credentials replaced by "[redacted]":
// the values of options whose names look secret (--password=x, --token x,
// --requirepass x, --pass x), of short options that commonly carry one
// (-pSECRET, -p x, -a x: mysql, redis-cli), the password of -u/--user
// user:pw (curl), secret-looking NAME=value arguments, header arguments whose
// name looks secret (--header=Authorization: Bearer x, -H "Cookie: x"), and
// in any argument (and any allowed environment value): URL userinfo (the
// password of scheme://user:pw@host, even with a '/' in it, and a token used
// as the user, https://ghp_x@host), and secret query parameters
// (X-Amz-Security-Token, X-Amz-Signature, token=, sig=...). Erring on the
// side of hiding: -p of a program where it means "port" is hidden too.
// Runs on the flush thread / at init, never on a hot path.
#pragma once
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace flightrec {

inline constexpr const char* kRedacted = "[redacted]";

// True for names like AWS_SECRET_ACCESS_KEY, GITHUB_TOKEN, DB_PASS, api-key,
// --auth, session_cookie, requirepass (case-insensitive substring match).
bool LooksLikeSecretName(std::string_view name);

// True for environment variables whose values are recorded (the allow-list).
bool IsHarmlessEnvName(std::string_view name);

// URL userinfo, secret query parameters, secret headers and Bearer/Basic
// credentials in free text replaced by "[redacted]".
std::string RedactSecretsInText(std::string_view text);

// /proc/self/cmdline bytes (NUL-separated) to one space-separated line with
// secrets redacted (see above).
std::string CmdlineForTrace(std::string_view proc_cmdline);

// /proc/self/environ bytes to (name, value) pairs: allow-listed values kept
// (their URLs redacted), every other value "[redacted]".
std::vector<std::pair<std::string, std::string>> EnvironmentForTrace(std::string_view proc_environ);

}  // namespace flightrec
