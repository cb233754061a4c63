// Minimal reading of S3's XML response bodies: the text of the first element
// with a given name (Code, Message, UploadId, ServerTime, ...), entities
// decoded. S3 responses are flat and machine-written; this is not an XML
// parser and never needs to be one.
#pragma once
#include <string>
#include <string_view>

namespace flightrec::uploader {

// Text of the first <tag>...</tag> (attributes on the open tag allowed);
// false if absent. The five predefined entities and &#N; / &#xN; are decoded.
bool XmlElementText(std::string_view xml, std::string_view tag, std::string* text);

// Escapes text for an XML element body (&, <, >, ", ').
std::string XmlEscape(std::string_view text);

// Appends code point cp as UTF-8 (nothing for cp >= 0x110000): character
// references here, \u escapes in credential JSON (credential_json.cc).
void AppendUtf8(unsigned long cp, std::string* out);

}  // namespace flightrec::uploader
