// A JSON parser for request bodies, fast on what the phone agent's are mostly made of: one long
// string, the screenshot as a base64 data URL (~1.2 MB). nlohmann's lexer reads a character at
// a time (~15 ms for that body on the development machine); this one finds the runs of plain
// characters 16 bytes at a time and copies each run at once.
//
// It only ever declines. Anything it does not take -- invalid JSON, a byte-order mark, a number
// that strtod would round to zero or infinity, nesting deeper than `max_depth` -- gives nullopt,
// and the caller parses with nlohmann, whose verdict and message stand. What it takes, it gives as
// nlohmann would, types included (non-negative integers unsigned, negative ones signed, the last
// of a repeated key winning); the `json` fuzzer checks that on every input.
#ifndef AUTOGLM_SERVE_JSON_FAST_H_
#define AUTOGLM_SERVE_JSON_FAST_H_

#include <optional>
#include <string_view>

#include <nlohmann/json.hpp>

namespace ag::serve {

// `text` as one JSON value with optional whitespace around it, arrays and objects nested at most
// `max_depth` deep (the outermost counts one), or nullopt (then ask nlohmann).
std::optional<nlohmann::json> ParseJsonFast(std::string_view text, int max_depth);

// The text of the value of `key` in `object`, a JSON object's text already found valid (a request
// body once parsed), without parsing the rest: strings are skipped 16 bytes at a time, so a body
// holding a 1.2 MB screenshot costs ~0.1 ms instead of a second full parse. The last of a repeated
// key wins, as the parsers have it. nullopt when the key is absent, and whenever the text is not
// as expected or the key is written with escapes (then parse the whole body).
std::optional<std::string_view> FindMemberText(std::string_view object, std::string_view key);

}  // namespace ag::serve

#endif  // AUTOGLM_SERVE_JSON_FAST_H_
