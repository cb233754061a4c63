// Flat-element text extraction and escaping for S3 XML bodies.
#include "uploader/s3/s3_xml.h"

#include <cstdlib>

namespace flightrec::uploader {
namespace {

std::string DecodeEntities(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); i++) {
    if (s[i] != '&') {
      out.push_back(s[i]);
      continue;
    }
    size_t semi = s.find(';', i);
    if (semi == std::string_view::npos || semi - i > 10) {
      out.push_back('&');
      continue;
    }
    std::string_view ent = s.substr(i + 1, semi - i - 1);
    if (ent == "amp") out.push_back('&');
    else if (ent == "lt") out.push_back('<');
    else if (ent == "gt") out.push_back('>');
    else if (ent == "quot") out.push_back('"');
    else if (ent == "apos") out.push_back('\'');
    else if (ent.size() > 1 && ent[0] == '#') {
      std::string num(ent.substr(1));
      int base = 10;
      if (!num.empty() && (num[0] == 'x' || num[0] == 'X')) {
        base = 16;
        num.erase(0, 1);
      }
      char* end = nullptr;
      unsigned long cp = strtoul(num.c_str(), &end, base);
      if (num.empty() || *end != '\0') {
        out.push_back('&');
        continue;
      }
      AppendUtf8(cp, &out);
    } else {
      out.push_back('&');
      continue;
    }
    i = semi;
  }
  return out;
}

}  // namespace

void AppendUtf8(unsigned long cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x110000) {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool XmlElementText(std::string_view xml, std::string_view tag, std::string* text) {
  const std::string open = "<" + std::string(tag);
  size_t pos = 0;
  while ((pos = xml.find(open, pos)) != std::string_view::npos) {
    size_t after = pos + open.size();
    if (after >= xml.size()) return false;
    char c = xml[after];
    if (c != '>' && c != ' ' && c != '\t' && c != '\n' && c != '\r' && c != '/') {
      pos = after;  // a longer tag name sharing the prefix, e.g. <CodeX>
      continue;
    }
    size_t gt = xml.find('>', after);
    if (gt == std::string_view::npos) return false;
    if (xml[gt - 1] == '/') {  // <Tag/>: present and empty
      text->clear();
      return true;
    }
    const std::string close = "</" + std::string(tag) + ">";
    size_t end = xml.find(close, gt + 1);
    if (end == std::string_view::npos) return false;
    *text = DecodeEntities(xml.substr(gt + 1, end - gt - 1));
    return true;
  }
  return false;
}

std::string XmlEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

}  // namespace flightrec::uploader
