#include "runtime/multimodal.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ir/status_macros.h"
#include "models/glm4v/positions.h"

namespace ag::runtime {

absl::StatusOr<PromptImages> ExpandImages(const compiler::Plan& plan,
                                          const std::vector<std::shared_ptr<const image::Patches>>& images,
                                          std::vector<int32_t>& prompt) {
  const int64_t image_token = plan.model.image_token_id;
  const compiler::Program* vision = plan.FindProgram(compiler::kVisionProgram);
  if (vision == nullptr) {
    if (images.empty()) return PromptImages{};
    return absl::InvalidArgumentError("this model takes no images");
  }
  const int64_t per_token = plan.model.patches_per_token;
  const int64_t merge = per_token == 4 ? 2 : per_token == 9 ? 3 : per_token == 16 ? 4 : 1;
  PromptImages out;
  std::vector<int32_t> expanded;
  std::vector<glm4v::ImageGrid> grids;
  size_t next = 0;
  for (const int32_t id : prompt) {
    if (id != image_token) {
      expanded.push_back(id);
      continue;
    }
    if (next == images.size()) {
      return absl::InvalidArgumentError(absl::StrCat("the prompt has more image tokens (", image_token, ") than images (",
                                                     images.size(), ")"));
    }
    const std::shared_ptr<const image::Patches>& image = images[next++];
    if (image->rows() > vision->bounds.at("P")) {
      return absl::InvalidArgumentError(absl::StrCat("image ", next - 1, " has ", image->rows(),
                                                     " patches, more than the plan's vision program takes (",
                                                     vision->bounds.at("P"), "): compile with more vision patches"));
    }
    if (image->rows() % per_token != 0) return absl::InvalidArgumentError("an image's patches make no whole tokens");
    const int64_t rows = image->rows() / per_token;
    out.spans.push_back({static_cast<int64_t>(expanded.size()), rows, image});
    expanded.insert(expanded.end(), static_cast<size_t>(rows), static_cast<int32_t>(image_token));
    grids.push_back({image->grid_t, image->grid_h, image->grid_w});
  }
  if (next != images.size()) {
    return absl::InvalidArgumentError(absl::StrCat(images.size(), " images for ", next, " image tokens (", image_token,
                                                   ") in the prompt"));
  }
  ASSIGN_OR_RETURN(glm4v::RopeIndex index, glm4v::ComputeRopeIndex(expanded, static_cast<int32_t>(image_token), grids, merge));
  out.positions = std::move(index.positions);
  out.delta = index.delta;
  prompt = std::move(expanded);
  return out;
}

void AppendImageKey(const ImageHash& hash, int64_t first_row, std::vector<int32_t>* tokens) {
  // Negative words: no token id is negative, so a key never reads as tokens.
  tokens->push_back(-1 - static_cast<int32_t>(first_row));
  for (const uint64_t word : hash) {
    tokens->push_back(static_cast<int32_t>(static_cast<uint32_t>(word)));
    tokens->push_back(static_cast<int32_t>(static_cast<uint32_t>(word >> 32)));
  }
}

ImageRows EncoderCache::Find(const ImageHash& hash) {
  const auto it = index_.find(hash);
  if (it == index_.end()) {
    ++misses_;
    return nullptr;
  }
  ++hits_;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second;
}

void EncoderCache::Insert(const ImageHash& hash, ImageRows rows) {
  if (const auto it = index_.find(hash); it != index_.end()) {
    bytes_ -= static_cast<int64_t>(it->second->second->size() * sizeof(float));
    lru_.erase(it->second);
    index_.erase(it);
  }
  bytes_ += static_cast<int64_t>(rows->size() * sizeof(float));
  lru_.emplace_front(hash, std::move(rows));
  index_[hash] = lru_.begin();
  while (bytes_ > capacity_ && !lru_.empty()) {
    bytes_ -= static_cast<int64_t>(lru_.back().second->size() * sizeof(float));
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
}

absl::StatusOr<std::vector<ImageRows>> EncodeImages(Backend& backend, const compiler::Plan& plan,
                                                    const std::vector<const image::Patches*>& images) {
  const compiler::Program* vision = plan.FindProgram(compiler::kVisionProgram);
  if (vision == nullptr) return absl::FailedPreconditionError("the plan has no vision program");
  const int64_t max_patches = vision->bounds.at("P"), max_images = vision->bounds.at("I");
  const int64_t per_token = plan.model.patches_per_token;
  const int64_t merge = per_token == 4 ? 2 : per_token == 9 ? 3 : per_token == 16 ? 4 : 1;
  const int64_t hidden = plan.model.hidden_size;
  std::vector<ImageRows> out;
  size_t first = 0;
  while (first < images.size()) {
    // As many images as fit in one run of the program.
    StepBatch batch;
    batch.image_offsets = {0};
    size_t end = first;
    while (end < images.size() && static_cast<int64_t>(end - first) < max_images &&
           batch.image_offsets.back() + images[end]->rows() <= max_patches) {
      const image::Patches& p = *images[end];
      batch.pixels.Append(p.pixels.data(), static_cast<int64_t>(p.pixels.size()));  // read in place
      glm4v::AppendPatchPositions({p.grid_t, p.grid_h, p.grid_w}, merge, &batch.patch_pos);
      batch.image_offsets.push_back(static_cast<int32_t>(batch.image_offsets.back() + p.rows()));
      ++end;
    }
    if (end == first) return absl::InvalidArgumentError("an image is larger than the vision program takes");
    batch.num_patches = batch.image_offsets.back();
    batch.num_images = static_cast<int64_t>(end - first);
    batch.num_merged_rows = batch.num_patches / per_token;
    UninitializedVector<float> rows;
    RETURN_IF_ERROR(backend.RunProgram(compiler::kVisionProgram, batch, "image_embeds", &rows));
    if (rows.size() != static_cast<size_t>(batch.num_merged_rows * hidden)) {
      return absl::InternalError("the vision program gave the wrong number of rows");
    }
    if (end - first == 1) {  // the usual run, one screenshot: its rows are the output as it is
      out.push_back(std::make_shared<const UninitializedVector<float>>(std::move(rows)));
    } else {
      for (size_t i = first; i < end; ++i) {
        const int64_t begin = batch.image_offsets[i - first] / per_token * hidden;
        const int64_t count = images[i]->rows() / per_token * hidden;
        out.push_back(std::make_shared<const UninitializedVector<float>>(rows.begin() + begin, rows.begin() + begin + count));
      }
    }
    first = end;
  }
  return out;
}

}  // namespace ag::runtime
