// The numeric keywords of a JSON Schema (minimum, maximum, exclusiveMinimum, exclusiveMaximum,
// multipleOf) compiled into an integer or number node's bounds (json_schema.h's Node: lo, hi, their
// openness, scale, multiple), for the automaton that keeps a value's digits within them
// (json_schema_state.cc). An error is an InvalidArgument naming the keyword; the caller adds the place.
#ifndef AUTOGLM_RUNTIME_JSON_SCHEMA_NUMBERS_H_
#define AUTOGLM_RUNTIME_JSON_SCHEMA_NUMBERS_H_

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "runtime/json_schema.h"

namespace ag::runtime {

// Whether the schema has any of those keywords (multipleOf bounds a value too: to its multiples).
bool HasNumericBounds(const nlohmann::ordered_json& schema);

// An integer's bounds: each a JSON number within +-kMaxBound, a fractional one rounded inward
// (minimum 2.5 is 3), the exclusive ones a step further; multipleOf as an integer step.
absl::Status CompileIntegerBounds(const nlohmann::ordered_json& schema, JsonSchema::Node& node);

// A number's bounds (pydantic's Field(ge=0, le=1), confloat(gt=0, lt=0.5), PositiveFloat), each
// within +-kMaxBound, the exclusive ones open (the tighter of two at one value). Bounds with decimals
// are kept as integers times 10^scale, scale the most decimals any bound or multipleOf has (at most
// kMaxScale), each so scaled within +-kMaxBound: the automaton counts the number's magnitude in
// those units (its integer digits, then `scale` digits of fraction, then whether any digit after is
// not 0).
absl::Status CompileNumberBounds(const nlohmann::ordered_json& schema, JsonSchema::Node& node);

}  // namespace ag::runtime

#endif  // AUTOGLM_RUNTIME_JSON_SCHEMA_NUMBERS_H_
