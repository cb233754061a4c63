// Redaction of credentials in the recorded command line and environment:
// see redaction.h.
#include "preload/runtime/redaction.h"

#include <cctype>

namespace flightrec {
namespace {

// Fragments of names that carry credentials. KEY also hides harmless names
// (KEYBOARD_LAYOUT): hiding too much is the safe mistake.
constexpr std::string_view kSecretFragments[] = {
    "secret", "token", "passw", "pwd", "key", "credential", "auth", "session", "cookie", "private",
    "signature", "dsn", "apikey"};

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

}  // namespace

bool LooksLikeSecretName(std::string_view name) {
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (std::string_view f : kSecretFragments)
    if (lower.find(f) != std::string::npos) return true;
  return false;
}

std::string RedactUrlPasswords(std::string_view text) {
  std::string out;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t scheme_end = text.find("://", pos);
    if (scheme_end == std::string_view::npos) break;
    const size_t auth_start = scheme_end + 3;
    // The authority ends at the first '/', whitespace, or the end; userinfo
    // is what precedes the last '@' inside it.
    size_t auth_end = auth_start;
    while (auth_end < text.size() && text[auth_end] != '/' && !std::isspace(static_cast<unsigned char>(text[auth_end])))
      ++auth_end;
    const std::string_view authority = text.substr(auth_start, auth_end - auth_start);
    const size_t at = authority.rfind('@');
    const size_t colon = at == std::string_view::npos ? std::string_view::npos : authority.find(':');
    out.append(text.substr(pos, auth_start - pos));
    if (colon != std::string_view::npos && colon < at) {
      out.append(authority.substr(0, colon + 1));
      out.append(kRedacted);
      out.append(authority.substr(at));
    } else {
      out.append(authority);
    }
    pos = auth_end;
  }
  out.append(text.substr(pos));
  return out;
}

std::string CmdlineForTrace(std::string_view proc_cmdline) {
  std::string line;
  bool hide_next = false;
  for (std::string_view arg : SplitNul(proc_cmdline)) {
    if (!line.empty()) line += ' ';
    if (hide_next) {
      line += kRedacted;
      hide_next = false;
      continue;
    }
    const bool is_option = arg.size() > 1 && arg[0] == '-';
    const size_t eq = arg.find('=');
    if (is_option && eq != std::string_view::npos && LooksLikeSecretName(arg.substr(0, eq))) {
      line.append(arg.substr(0, eq + 1));
      line += kRedacted;
    } else if (is_option && eq == std::string_view::npos && arg.size() > 2 && LooksLikeSecretName(arg)) {
      line.append(arg);  // `--password value`: the value is the next argument
      hide_next = true;
    } else {
      line += RedactUrlPasswords(arg);
    }
  }
  return line;
}

std::vector<std::pair<std::string, std::string>> EnvironmentForTrace(std::string_view proc_environ) {
  std::vector<std::pair<std::string, std::string>> env;
  for (std::string_view entry : SplitNul(proc_environ)) {
    const size_t eq = entry.find('=');
    if (eq == std::string_view::npos || eq == 0) continue;
    const std::string_view name = entry.substr(0, eq), value = entry.substr(eq + 1);
    env.emplace_back(std::string(name),
                     LooksLikeSecretName(name) ? std::string(kRedacted) : RedactUrlPasswords(value));
  }
  return env;
}

}  // namespace flightrec
