// JSON Schema's "format" on a string, enforced for the formats OpenAI's structured outputs enforce
// (date-time, time, date, duration, email, hostname, ipv4, ipv6, uuid): each is a regular expression
// of runtime/json_pattern.h's subset, matched whole, and the string is then written as a pattern's.
// Each expression is narrower than its RFC, never wider, where a DFA cannot count or the RFC
// is loose: February has 28 days (no leap-year arithmetic), no leap second, fractions of a second
// have at most 9 digits, offsets and the "T" and "Z" are upper case; a hostname has at most 6
// labels of at most 41 characters (so it stays within the RFC's 253), an email's local part is
// dot-separated atoms and its domain such a hostname of 2 labels or more, no IP literal; IPv6 has no
// embedded IPv4 and no zone. Beside a pattern, a string is one both take (PatternDfa::Intersect).
// Any other format ("uri", "regex", ...) stays an annotation, as JSON Schema's default vocabulary
// has it.
#ifndef AUTOGLM_RUNTIME_STRING_FORMATS_H_
#define AUTOGLM_RUNTIME_STRING_FORMATS_H_

#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace ag::runtime {

// The expression a string of `format` matches whole, or none for a format left unenforced.
std::optional<std::string> FormatExpression(absl::string_view format);

}  // namespace ag::runtime

#endif  // AUTOGLM_RUNTIME_STRING_FORMATS_H_
