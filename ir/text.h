// The IR's text form. Printing then parsing gives back the same graph:
//
//   graph glm (T<=256, S<=16, R<=256) {
//     param @model.norm.weight : f32[64]
//     input %tokens : i32[T]
//     state $kv.0 : f32[2,NB,16,2,16]
//     %x = embedding(%tokens, @model.embed_tokens.weight) : f32[T,64]
//     %h = rms_norm(%x, @model.layers.0.input_layernorm.weight) {eps=1e-05} : f32[T,64] loc(0)
//     output %logits
//   }
//
// `@` names a parameter, `$` state, `%` an input or a node result. A fused
// parameter reads `param @w : f32[128,64] = concat(@a, @b)`. After memory
// planning the header carries `arena=BYTES` and each result `at OFFSET`.
#ifndef AUTOGLM_IR_TEXT_H_
#define AUTOGLM_IR_TEXT_H_

#include <string>

#include "absl/strings/string_view.h"
#include "absl/status/statusor.h"
#include "ir/graph.h"

namespace ag::ir {

std::string PrintGraph(const Graph& graph);

// Parses and verifies. Errors name the line.
absl::StatusOr<Graph> ParseGraph(absl::string_view text);

}  // namespace ag::ir

#endif  // AUTOGLM_IR_TEXT_H_
