// A test input shared by the pass tests: one GLM layer as the builder makes it
// (IR text), before any pass.
#ifndef AUTOGLM_PASSES_TEST_LAYER_H_
#define AUTOGLM_PASSES_TEST_LAYER_H_

namespace ag::passes::testing {

// One GLM layer as the builder makes it: 4 query heads, 2 KV heads of 8,
// hidden 32, FFN 16, vocabulary 40, q/k/v bias.
inline constexpr char kLayer[] = R"(graph glm (R<=8, S<=2, T<=8) {
  param @model.embed_tokens.weight : f32[40,32]
  param @model.layers.0.input_layernorm.weight : f32[32]
  param @model.layers.0.self_attn.q_proj.weight : f32[32,32]
  param @model.layers.0.self_attn.q_proj.bias : f32[32]
  param @model.layers.0.self_attn.k_proj.weight : f32[16,32]
  param @model.layers.0.self_attn.k_proj.bias : f32[16]
  param @model.layers.0.self_attn.v_proj.weight : f32[16,32]
  param @model.layers.0.self_attn.v_proj.bias : f32[16]
  param @model.layers.0.self_attn.o_proj.weight : f32[32,32]
  param @model.layers.0.post_attention_layernorm.weight : f32[32]
  param @model.layers.0.mlp.gate_up_proj.weight : f32[32,32]
  param @model.layers.0.mlp.down_proj.weight : f32[32,16]
  param @model.norm.weight : f32[32]
  param @lm_head.weight : f32[40,32]
  input %tokens : i32[T]
  input %positions : i32[T]
  input %logit_rows : i32[R]
  state $kv.0 : f32[2,NB,16,2,8]
  %x = embedding(%tokens, @model.embed_tokens.weight) : f32[T,32]
  %l0.h = rms_norm(%x, @model.layers.0.input_layernorm.weight) {eps=1e-05} : f32[T,32] loc(0)
  %l0.q = linear(%l0.h, @model.layers.0.self_attn.q_proj.weight, @model.layers.0.self_attn.q_proj.bias) : f32[T,32] loc(0)
  %l0.k = linear(%l0.h, @model.layers.0.self_attn.k_proj.weight, @model.layers.0.self_attn.k_proj.bias) : f32[T,16] loc(0)
  %l0.v = linear(%l0.h, @model.layers.0.self_attn.v_proj.weight, @model.layers.0.self_attn.v_proj.bias) : f32[T,16] loc(0)
  %l0.q_rot = rotary(%l0.q, %positions) {head_dim=8, heads=4, rot=4, theta=10000.0} : f32[T,32] loc(0)
  %l0.k_rot = rotary(%l0.k, %positions) {head_dim=8, heads=2, rot=4, theta=10000.0} : f32[T,16] loc(0)
  %l0.attn = attention(%l0.q_rot, %l0.k_rot, %l0.v, $kv.0) {head_dim=8, heads=4, kv_heads=2} : f32[T,32] loc(0)
  %l0.o = linear(%l0.attn, @model.layers.0.self_attn.o_proj.weight) : f32[T,32] loc(0)
  %l0.x1 = add(%x, %l0.o) : f32[T,32] loc(0)
  %l0.h1 = rms_norm(%l0.x1, @model.layers.0.post_attention_layernorm.weight) {eps=1e-05} : f32[T,32] loc(0)
  %l0.gate_up = linear(%l0.h1, @model.layers.0.mlp.gate_up_proj.weight) : f32[T,32] loc(0)
  %l0.gate = slice(%l0.gate_up) {axis=1, size=16, start=0} : f32[T,16] loc(0)
  %l0.up = slice(%l0.gate_up) {axis=1, size=16, start=16} : f32[T,16] loc(0)
  %l0.act = silu(%l0.gate) : f32[T,16] loc(0)
  %l0.m = mul(%l0.act, %l0.up) : f32[T,16] loc(0)
  %l0.down = linear(%l0.m, @model.layers.0.mlp.down_proj.weight) : f32[T,32] loc(0)
  %l0.x2 = add(%l0.x1, %l0.down) : f32[T,32] loc(0)
  %last = gather_rows(%l0.x2, %logit_rows) : f32[R,32]
  %final_norm = rms_norm(%last, @model.norm.weight) {eps=1e-05} : f32[R,32]
  %logits = linear(%final_norm, @lm_head.weight) : f32[R,40]
  %next_tokens = argmax(%logits) : i32[R]
  output %logits, %next_tokens
}
)";

}  // namespace ag::passes::testing

#endif  // AUTOGLM_PASSES_TEST_LAYER_H_
