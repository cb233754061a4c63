// Redaction: what identifying data may leave the process in a trace.
// The command line and (with FLIGHTREC_RECORD_ENV=1) the environment are
// recorded with credentials replaced by "<redacted>": values of variables
// and options whose names look secret, and the password part of URLs
// (scheme://user:password@host). Best effort by name, erring on the side of
// hiding: a value that merely looks random is not detected.
// Runs on the flush thread / at init, never on a hot path.
#pragma once
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace flightrec {

inline constexpr const char* kRedacted = "<redacted>";

// True for names like AWS_SECRET_ACCESS_KEY, GITHUB_TOKEN, DB_PASSWORD,
// api-key, --auth, session_cookie (case-insensitive substring match).
bool LooksLikeSecretName(std::string_view name);

// Replaces the password of every scheme://user:password@ in the text.
std::string RedactUrlPasswords(std::string_view text);

// /proc/self/cmdline bytes (NUL-separated) to one space-separated line with
// `--secret=value`, `--secret value` and URL passwords redacted.
std::string CmdlineForTrace(std::string_view proc_cmdline);

// /proc/self/environ bytes to (name, value) pairs with secrets redacted.
std::vector<std::pair<std::string, std::string>> EnvironmentForTrace(std::string_view proc_environ);

}  // namespace flightrec
