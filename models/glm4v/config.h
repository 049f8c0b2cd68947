// GLM-4.1V (Glm4vForConditionalGeneration: GLM-4.1V-9B, AutoGLM-Phone-9B): its
// config.json, with the text decoder's settings nested in text_config and the
// vision tower's in vision_config (../shared/GLM4V_SPEC.md section 1). The
// text decoder is glm4's (models/glm), with M-RoPE.
#ifndef AUTOGLM_MODELS_GLM4V_CONFIG_H_
#define AUTOGLM_MODELS_GLM4V_CONFIG_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "models/glm/config.h"

namespace ag::glm4v {

struct VisionConfig {
  int64_t depth = 0;
  int64_t hidden_size = 0;
  int64_t num_heads = 0;
  int64_t patch_size = 14;
  int64_t temporal_patch_size = 2;
  int64_t merge_size = 2;  // spatial_merge_size: merge x merge patches become one token
  int64_t image_size = 336;
  int64_t out_hidden_size = 0;    // the decoder's hidden size; also the blocks' MLP width
  int64_t intermediate_size = 0;  // the merger's SwiGLU width
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;

  int64_t head_dim() const { return hidden_size / num_heads; }
  // The learned position table is side x side (image_size / patch_size).
  int64_t side() const { return image_size / patch_size; }
  // Values of one patch row: 3 channels x temporal x patch x patch.
  int64_t patch_values() const { return 3 * temporal_patch_size * patch_size * patch_size; }
  int64_t patches_per_token() const { return merge_size * merge_size; }
};

struct Config {
  glm::ModelConfig text;  // layout kGlm4v
  VisionConfig vision;
  int64_t image_token_id = -1;  // <|image|>: each is expanded to an image's rows
  int64_t image_start_token_id = -1;
  int64_t image_end_token_id = -1;
  int64_t video_token_id = -1;
};

// Whether `path` (a checkpoint directory or its config.json) holds a GLM-4.1V config.
bool IsGlm4vCheckpoint(const std::string& path);

// Parses config.json text; `source` names the file in error messages.
absl::StatusOr<Config> ParseConfig(absl::string_view json_text, absl::string_view source);
// Reads DIR/config.json and DIR/generation_config.json's end-of-sequence ids.
absl::StatusOr<Config> LoadConfig(const std::string& dir);

// Every value a compiled plan depends on: the decoder's and the vision tower's.
std::string ConfigFingerprint(const Config& config);

}  // namespace ag::glm4v

#endif  // AUTOGLM_MODELS_GLM4V_CONFIG_H_
