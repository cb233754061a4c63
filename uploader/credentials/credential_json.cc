// A strict reader for flat JSON credential documents (see credential_json.h).
#include "uploader/credentials/credential_json.h"

#include <cctype>

#include "uploader/retry_policy.h"
#include "uploader/s3/header_text.h"
#include "uploader/s3/s3_xml.h"  // AppendUtf8

namespace flightrec::uploader {
namespace {

constexpr int kMaxDepth = 16;  // nested values are skipped; a hostile document cannot recurse us deep

struct Reader {
  std::string_view s;
  size_t i = 0;

  void Space() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) i++;
  }
  bool Eat(char c) {
    Space();
    if (i < s.size() && s[i] == c) {
      i++;
      return true;
    }
    return false;
  }
  static int Hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  bool Hex4(unsigned* out) {
    if (i + 4 > s.size()) return false;
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
      const int h = Hex(s[i + k]);
      if (h < 0) return false;
      v = v * 16 + static_cast<unsigned>(h);
    }
    i += 4;
    *out = v;
    return true;
  }
  // A string starting at the current '"'; out may be null (skip).
  bool String(std::string* out) {
    Space();
    if (i >= s.size() || s[i] != '"') return false;
    i++;
    while (i < s.size()) {
      const char c = s[i++];
      if (c == '"') return true;
      if (static_cast<unsigned char>(c) < 0x20) return false;
      if (c != '\\') {
        if (out) out->push_back(c);
        continue;
      }
      if (i >= s.size()) return false;
      const char esc = s[i++];
      char plain = 0;
      switch (esc) {
        case '"': plain = '"'; break;
        case '\\': plain = '\\'; break;
        case '/': plain = '/'; break;
        case 'b': plain = '\b'; break;
        case 'f': plain = '\f'; break;
        case 'n': plain = '\n'; break;
        case 'r': plain = '\r'; break;
        case 't': plain = '\t'; break;
        case 'u': {
          unsigned cp = 0;
          if (!Hex4(&cp)) return false;
          if (cp >= 0xD800 && cp <= 0xDBFF) {  // a surrogate pair
            unsigned lo = 0;
            if (i + 2 > s.size() || s[i] != '\\' || s[i + 1] != 'u') return false;
            i += 2;
            if (!Hex4(&lo) || lo < 0xDC00 || lo > 0xDFFF) return false;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return false;
          }
          if (out) AppendUtf8(cp, out);
          continue;
        }
        default: return false;
      }
      if (out) out->push_back(plain);
    }
    return false;
  }
  bool Literal(std::string_view word) {
    if (s.substr(i, word.size()) != word) return false;
    i += word.size();
    return true;
  }
  bool Number() {
    const size_t start = i;
    while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '-' || s[i] == '+' ||
                            s[i] == '.' || s[i] == 'e' || s[i] == 'E'))
      i++;
    return i > start;
  }
  bool Value(int depth) {
    if (depth > kMaxDepth) return false;
    Space();
    if (i >= s.size()) return false;
    const char c = s[i];
    if (c == '"') return String(nullptr);
    if (c == '{') {
      i++;
      if (Eat('}')) return true;
      do {
        if (!String(nullptr) || !Eat(':') || !Value(depth + 1)) return false;
      } while (Eat(','));
      return Eat('}');
    }
    if (c == '[') {
      i++;
      if (Eat(']')) return true;
      do {
        if (!Value(depth + 1)) return false;
      } while (Eat(','));
      return Eat(']');
    }
    if (c == 't') return Literal("true");
    if (c == 'f') return Literal("false");
    if (c == 'n') return Literal("null");
    return Number();
  }
};

}  // namespace

bool JsonStringMember(std::string_view json, std::string_view name, std::string* value) {
  Reader r{json};
  if (!r.Eat('{')) return false;
  bool found = false;
  std::string result;
  if (!r.Eat('}')) {
    do {
      std::string key;
      if (!r.String(&key) || !r.Eat(':')) return false;
      r.Space();
      if (key == name && !found && r.i < json.size() && json[r.i] == '"') {
        if (!r.String(&result)) return false;
        found = true;
      } else if (!r.Value(1)) {
        return false;
      }
    } while (r.Eat(','));
    if (!r.Eat('}')) return false;
  }
  r.Space();
  if (r.i != json.size()) return false;  // trailing junk: not one object
  if (found) *value = std::move(result);
  return found;
}

bool ParseCredentialDocument(std::string_view json, ExpiringCredentials* out, std::string* error) {
  std::string code;
  if (JsonStringMember(json, "Code", &code) && code != "Success") {
    *error = "the credential document reports Code '" + code.substr(0, 40) + "'";
    return false;
  }
  ExpiringCredentials c;
  std::string expiration;
  const bool have_key = JsonStringMember(json, "AccessKeyId", &c.credentials.access_key_id);
  const bool have_secret = JsonStringMember(json, "SecretAccessKey", &c.credentials.secret_access_key);
  JsonStringMember(json, "Token", &c.credentials.session_token);
  const bool have_expiration = JsonStringMember(json, "Expiration", &expiration);
  if (!have_key || !have_secret || c.credentials.access_key_id.empty() || c.credentials.secret_access_key.empty()) {
    c.Clear();
    *error = "the credential document is not JSON with AccessKeyId and SecretAccessKey";
    return false;
  }
  // A control character would become header text (a CR LF in Token, an
  // extra header line to S3): the whole document is refused (header_text.h).
  const char* bad = CredentialFieldWithControlChar(c.credentials);
  if (bad || HasControlChar(expiration)) {
    c.Clear();
    *error =
        std::string("refused: the credential document's ") + (bad ? bad : "Expiration") + " holds a control character";
    return false;
  }
  if (have_expiration && !ParseHttpDate(expiration, &c.expires_at)) {
    c.Clear();
    *error = "the credential document's Expiration is not an ISO 8601 time";
    return false;
  }
  *out = std::move(c);
  return true;
}

}  // namespace flightrec::uploader
