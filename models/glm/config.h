// ModelConfig: the GLM-4 family's hyperparameters, read from a checkpoint's
// config.json in any of the three layouts (HF `glm`, HF `glm4`, THUDM
// original `chatglm`). See ../shared/GLM_SPEC.md.
#ifndef AUTOGLM_MODELS_GLM_CONFIG_H_
#define AUTOGLM_MODELS_GLM_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ag::glm {

// kGlm4v: the text decoder of GLM-4.1V (models/glm4v parses its config): glm4's
// layers, its tensors under `model.language_model.`, M-RoPE positions.
enum class Layout { kGlm, kGlm4, kChatGlm, kGlm4v };

// Upper bounds on a config's sizes: far above any GLM model (GLM-4-9B: hidden
// 4096, FFN 13696, 40 layers, 32 heads of 128, 151552 tokens, 131072
// positions), low enough that no size derived from them overflows an int64.
inline constexpr int64_t kMaxHiddenSize = int64_t{1} << 16;
inline constexpr int64_t kMaxIntermediateSize = int64_t{1} << 20;
inline constexpr int64_t kMaxLayers = int64_t{1} << 10;
inline constexpr int64_t kMaxHeads = int64_t{1} << 10;
inline constexpr int64_t kMaxHeadDim = int64_t{1} << 10;
inline constexpr int64_t kMaxVocabSize = int64_t{1} << 24;
inline constexpr int64_t kMaxPositions = int64_t{1} << 24;
absl::string_view LayoutName(Layout layout);

struct ModelConfig {
  Layout layout = Layout::kGlm;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t vocab_size = 0;
  double rms_norm_eps = 1e-5;
  bool attention_bias = false;
  int64_t max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  double rope_theta = 10000.0;
  double partial_rotary_factor = 0.5;
  int64_t rotary_dim = 0;  // int(head_dim * partial_rotary_factor), even
  // M-RoPE (GLM-4.1V): how many rotary pairs take the temporal, height and
  // width position streams (they add up to rotary_dim / 2); empty for one stream.
  std::vector<int64_t> mrope_section;
  std::vector<int64_t> eos_token_ids;
  int64_t pad_token_id = -1;
  // How the checkpoint stores its linears when it is pre-quantized (GPTQ, AWQ,
  // compressed-tensors): config.json's quantization_config, or a GPTQ
  // quantize_config.json, as compact JSON; empty for a dense checkpoint.
  // models/quant interprets it.
  std::string quantization;

  // glm4's sandwich norms: one more RMSNorm after each sublayer.
  bool sandwich_norms() const { return layout == Layout::kGlm4 || layout == Layout::kGlm4v; }
  int64_t q_size() const { return num_heads * head_dim; }
  int64_t kv_size() const { return num_kv_heads * head_dim; }
  // Parameter count, everything included.
  int64_t NumParameters() const;
};

// Every value a compiled plan depends on, as "key=value" lines in a fixed
// order: plans record it, and a plan runs only with a config that gives the same.
std::string ConfigFingerprint(const ModelConfig& config);

// Parses config.json text; `source` names the file in error messages.
absl::StatusOr<ModelConfig> ParseModelConfig(absl::string_view json_text, absl::string_view source);
// Reads DIR/config.json, or FILE when `path` is a file.
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& path);
// Adds the end-of-sequence ids of DIR/generation_config.json, when it exists,
// to the config's (it may list more than config.json does).
absl::Status AddGenerationConfigEos(const std::string& dir, ModelConfig& config);

}  // namespace ag::glm

#endif  // AUTOGLM_MODELS_GLM_CONFIG_H_
