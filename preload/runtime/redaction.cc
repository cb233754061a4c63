// Redaction of credentials in the recorded command line and environment:
// see redaction.h.
#include "preload/runtime/redaction.h"

#include <cctype>

namespace flightrec {
namespace {

// Fragments of names that carry credentials. KEY also hides harmless names
// (KEYBOARD_LAYOUT), PASS hides --passive: hiding too much is the safe mistake.
constexpr std::string_view kSecretFragments[] = {"secret",     "token", "pass",    "pwd",    "key",
                                                 "credential", "auth",  "session", "cookie", "private",
                                                 "signature",  "dsn",   "apikey",  "bearer", "jwt"};

// Query parameters too short for a fragment (Azure SAS `sig`, `pw`, OAuth `code`).
constexpr std::string_view kSecretQueryNames[] = {"sig", "pw", "code"};

// Environment variables recorded with their values: nothing here carries a
// credential by convention. Names ending in PATH (LD_LIBRARY_PATH, PYTHONPATH,
// CLASSPATH...), and LC_*, FLIGHTREC_*, count too.
constexpr std::string_view kHarmlessEnvNames[] = {
    "LANG",     "LANGUAGE",  "TZ",         "TERM",   "COLORTERM",  "SHELL",           "HOME",
    "USER",     "LOGNAME",   "PWD",        "OLDPWD", "HOSTNAME",   "HOSTTYPE",        "TMPDIR",
    "SHLVL",    "_",         "LD_PRELOAD", "GOGC",   "GOMAXPROCS", "OMP_NUM_THREADS", "MALLOC_ARENA_MAX",
    "NODE_ENV", "RAILS_ENV", "container"};
constexpr std::string_view kHarmlessEnvPrefixes[] = {"LC_", "FLIGHTREC_"};

std::string Lower(std::string_view s) {
  std::string lower(s);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower;
}

bool StartsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool EndsWith(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}
bool IsSpace(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }

std::vector<std::string_view> SplitNul(std::string_view bytes) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (start < bytes.size()) {
    size_t end = bytes.find('\0', start);
    if (end == std::string_view::npos) end = bytes.size();
    parts.push_back(bytes.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

bool IsSecretQueryName(std::string_view name) {
  if (LooksLikeSecretName(name)) return true;
  const std::string lower = Lower(name);
  for (std::string_view n : kSecretQueryNames)
    if (lower == n) return true;
  return false;
}

// The userinfo of the URL whose "://" ends at auth_start: the text up to an
// '@' (the last one that fits, since a password may hold one) that is
// user:password (anything after the first ':', '/' included, as long as
// the user holds no '/') or a bare user with no '/', '?', '#' (a token as
// the user). npos if the '@' is in the path or there is none.
size_t UserinfoEnd(std::string_view text, size_t auth_start) {
  size_t end = auth_start;
  while (end < text.size() && !IsSpace(text[end])) ++end;
  const std::string_view rest = text.substr(auth_start, end - auth_start);
  for (size_t at = rest.rfind('@'); at != std::string_view::npos && at > 0; at = rest.rfind('@', at - 1)) {
    const std::string_view info = rest.substr(0, at);
    const size_t colon = info.find(':');
    const size_t path = info.find_first_of("/?#");
    if ((colon != std::string_view::npos && (path == std::string_view::npos || colon < path)) ||
        path == std::string_view::npos)
      return auth_start + at;
  }
  return std::string_view::npos;
}

std::string RedactUrlUserinfo(std::string_view text) {
  std::string out;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t scheme_end = text.find("://", pos);
    if (scheme_end == std::string_view::npos) break;
    const size_t auth_start = scheme_end + 3;
    out.append(text.substr(pos, auth_start - pos));
    pos = auth_start;
    const size_t at = UserinfoEnd(text, auth_start);
    if (at == std::string_view::npos) continue;
    const std::string_view info = text.substr(auth_start, at - auth_start);
    const size_t colon = info.find(':');
    // user:password keeps the user; a bare user is itself the token.
    if (colon != std::string_view::npos) out.append(info.substr(0, colon + 1));
    out.append(kRedacted);
    pos = at;  // from the '@' on
  }
  out.append(text.substr(pos));
  return out;
}

// ?name=value and &name=value with a secret-looking name.
std::string RedactQueryParams(std::string_view text) {
  std::string out;
  size_t pos = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '?' && text[i] != '&') continue;
    const size_t name_start = i + 1;
    size_t eq = name_start;
    while (eq < text.size() && text[eq] != '=' && text[eq] != '&' && text[eq] != '#' && !IsSpace(text[eq])) ++eq;
    if (eq >= text.size() || text[eq] != '=' || !IsSecretQueryName(text.substr(name_start, eq - name_start))) continue;
    size_t end = eq + 1;
    while (end < text.size() && text[end] != '&' && text[end] != '#' && !IsSpace(text[end])) ++end;
    out.append(text.substr(pos, eq + 1 - pos));
    out.append(kRedacted);
    pos = end;
    i = end - 1;
  }
  out.append(text.substr(pos));
  return out;
}

// "Authorization: Bearer x", "Cookie: a=b": a header whose name looks
// secret; and the credentials of the Bearer/Basic schemes anywhere.
std::string RedactHeaders(std::string_view text) {
  const size_t colon = text.find(':');
  if (colon != std::string_view::npos && colon > 0) {
    const std::string_view name = text.substr(0, colon);
    bool token = true;
    for (char c : name) token = token && (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_');
    if (token && LooksLikeSecretName(name)) return std::string(text.substr(0, colon + 1)) + " " + kRedacted;
  }
  std::string out(text);
  for (std::string_view scheme : {"bearer ", "basic "}) {
    std::string lower = Lower(out);
    for (size_t at = lower.find(scheme); at != std::string::npos; at = lower.find(scheme, at + 1)) {
      size_t start = at + scheme.size();
      while (start < out.size() && out[start] == ' ') ++start;
      size_t end = start;
      while (end < out.size() && !IsSpace(out[end]) && out[end] != '"' && out[end] != '\'') ++end;
      if (end == start || out.compare(start, end - start, kRedacted) == 0) continue;
      out.replace(start, end - start, kRedacted);
      lower = Lower(out);
    }
  }
  return out;
}

// "user:password" (curl's -u) keeps the user.
std::string RedactUserPassword(std::string_view value) {
  const size_t colon = value.find(':');
  if (colon == std::string_view::npos) return RedactSecretsInText(value);
  return std::string(value.substr(0, colon + 1)) + kRedacted;
}

// NAME=value where NAME looks like a variable or option name.
bool SecretAssignment(std::string_view arg, size_t* eq) {
  *eq = arg.find('=');
  if (*eq == std::string_view::npos || *eq == 0) return false;
  for (char c : arg.substr(0, *eq))
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') return false;
  return LooksLikeSecretName(arg.substr(0, *eq));
}

// Short options whose value is commonly a password (mysql -pSECRET, redis-cli -a pw).
bool SecretShortOption(char c) { return c == 'p' || c == 'a'; }

}  // namespace

bool LooksLikeSecretName(std::string_view name) {
  const std::string lower = Lower(name);
  for (std::string_view f : kSecretFragments)
    if (lower.find(f) != std::string::npos) return true;
  return false;
}

bool IsHarmlessEnvName(std::string_view name) {
  if (LooksLikeSecretName(name)) return false;  // FLIGHTREC_S3_SSE_KMS_KEY_ID, a *_KEY_PATH
  for (std::string_view n : kHarmlessEnvNames)
    if (name == n) return true;
  for (std::string_view p : kHarmlessEnvPrefixes)
    if (StartsWith(name, p)) return true;
  return EndsWith(name, "PATH");
}

std::string RedactSecretsInText(std::string_view text) {
  return RedactHeaders(RedactQueryParams(RedactUrlUserinfo(text)));
}

std::string CmdlineForTrace(std::string_view proc_cmdline) {
  enum class Next { kShow, kHide, kHideUnlessOption, kUserPassword };
  std::string line;
  Next next = Next::kShow;
  const std::vector<std::string_view> args = SplitNul(proc_cmdline);
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string_view arg = args[i];
    if (i > 0) line += ' ';
    const Next pending = next;
    next = Next::kShow;
    if (i == 0) {  // the program itself
      line += RedactSecretsInText(arg);
      continue;
    }
    if (pending == Next::kHide || (pending == Next::kHideUnlessOption && !StartsWith(arg, "-"))) {
      line += kRedacted;
      continue;
    }
    if (pending == Next::kUserPassword) {
      line += RedactUserPassword(arg);
      continue;
    }
    const bool is_long = arg.size() > 2 && StartsWith(arg, "--");
    const bool is_short = !is_long && arg.size() >= 2 && arg[0] == '-' && arg[1] != '-';
    size_t eq = std::string_view::npos;
    if (is_long || is_short) {
      eq = arg.find('=');
      const std::string_view name =
          arg.substr(is_long ? 2 : 1, eq == std::string_view::npos ? arg.npos : eq - (is_long ? 2 : 1));
      const bool user = is_long && (name == "user" || name == "proxy-user");
      if (eq != std::string_view::npos) {  // --name=value, -Dname=value
        line.append(arg.substr(0, eq + 1));
        const std::string_view value = arg.substr(eq + 1);
        if (LooksLikeSecretName(name)) line += kRedacted;
        else if (user) line += RedactUserPassword(value);
        else line += RedactSecretsInText(value);  // --header=Authorization: ..., --url=https://u:p@h
        continue;
      }
      if (is_short && SecretShortOption(arg[1])) {  // -pSECRET, -p SECRET, -a pw
        line.append(arg.substr(0, 2));
        if (arg.size() > 2) line += kRedacted;
        else next = Next::kHideUnlessOption;
        continue;
      }
      if (is_short && arg[1] == 'u') {  // curl -u user:pw, -uuser:pw
        line.append(arg.substr(0, 2));
        if (arg.size() > 2) line += RedactUserPassword(arg.substr(2));
        else next = Next::kUserPassword;
        continue;
      }
      if (user) next = Next::kUserPassword;
      else if (arg.size() > 2 && LooksLikeSecretName(name)) next = Next::kHide;  // --password value
      line.append(arg);
      continue;
    }
    if (SecretAssignment(arg, &eq)) {  // DB_PASS=x (env, make), password=x
      line.append(arg.substr(0, eq + 1));
      line += kRedacted;
      continue;
    }
    line += RedactSecretsInText(arg);  // URLs, "Authorization: Bearer x" after -H
  }
  return line;
}

std::vector<std::pair<std::string, std::string>> EnvironmentForTrace(std::string_view proc_environ) {
  std::vector<std::pair<std::string, std::string>> env;
  for (std::string_view entry : SplitNul(proc_environ)) {
    const size_t eq = entry.find('=');
    if (eq == std::string_view::npos || eq == 0) continue;
    const std::string_view name = entry.substr(0, eq), value = entry.substr(eq + 1);
    env.emplace_back(std::string(name), IsHarmlessEnvName(name) ? RedactSecretsInText(value) : std::string(kRedacted));
  }
  return env;
}

}  // namespace flightrec
