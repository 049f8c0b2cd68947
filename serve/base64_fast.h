// Canonical base64 decoded 16 characters at a time (SSE2), for the screenshot's data URL.
//
// The phone agent's request carries a 1.2 MB base64 screenshot every step; absl's decoder reads
// it a character at a time (~1 ms here). This one classifies and decodes 16 characters with a few
// vector compares and packs their bits with shifts and masks. It takes only canonical base64 (RFC 4648:
// the standard alphabet, a length a multiple of 4, '=' padding only at the end and zero bits under
// it) and declines everything else -- whitespace, URL-safe letters, missing or odd padding --
// so that absl::Base64Unescape decides those exactly as before.
#ifndef AUTOGLM_SERVE_BASE64_FAST_H_
#define AUTOGLM_SERVE_BASE64_FAST_H_

#include <string>

#include "absl/strings/string_view.h"

namespace ag::serve {

// The bytes `in` encodes, into `out`; false (and `out` unspecified) if `in` is not canonical base64.
bool DecodeBase64Fast(absl::string_view in, std::string* out);

}  // namespace ag::serve

#endif  // AUTOGLM_SERVE_BASE64_FAST_H_
