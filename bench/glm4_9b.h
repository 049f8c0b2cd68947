// GLM-4-9B's config.json (../shared/GLM_SPEC.md), built into the benchmarks that need its shapes
// without its checkpoint.
#ifndef AUTOGLM_BENCH_GLM4_9B_H_
#define AUTOGLM_BENCH_GLM4_9B_H_

namespace ag::bench {

inline constexpr char kGlm4_9BConfig[] = R"({"model_type":"glm","hidden_size":4096,"intermediate_size":13696,
  "num_hidden_layers":40,"num_attention_heads":32,"num_key_value_heads":2,"head_dim":128,"vocab_size":151552,
  "rms_norm_eps":1.5625e-07,"attention_bias":true,"max_position_embeddings":131072,"partial_rotary_factor":0.5,
  "rope_theta":10000.0,"tie_word_embeddings":false,"eos_token_id":[151329,151336,151338],"dtype":"bfloat16"})";

}  // namespace ag::bench

#endif  // AUTOGLM_BENCH_GLM4_9B_H_
