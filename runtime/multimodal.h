// Images in the engine (GLM-4.1V): a request's prompt with its image tokens
// expanded and its M-RoPE positions, the vision program run over a batch of
// images, and the encoder cache that keeps their rows by content hash (the
// same screenshot twice is encoded once).
#ifndef AUTOGLM_RUNTIME_MULTIMODAL_H_
#define AUTOGLM_RUNTIME_MULTIMODAL_H_

#include <array>
#include <cstdint>
#include <list>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "compiler/plan.h"
#include "image/preprocess.h"
#include "runtime/backend.h"

namespace ag::runtime {

using ImageHash = std::array<uint64_t, 2>;
struct ImageHashOf {
  size_t operator()(const ImageHash& h) const { return static_cast<size_t>(h[0] ^ (h[1] * 0x9e3779b97f4a7c15ull)); }
};

// An image's rows [rows, hidden] as float: what the vision program gave, shared by the cache and
// the sequences that use it.
using ImageRows = std::shared_ptr<const UninitializedVector<float>>;

// Where an image's rows go in a prompt.
struct ImageSpan {
  int64_t begin = 0;  // the first prompt position of its tokens
  int64_t rows = 0;   // its tokens: rows of the vision program's output
  std::shared_ptr<const image::Patches> image;
  // Its rows [rows, hidden] while the prompt is being computed (the engine drops them after).
  ImageRows encoded;
};

// A prompt with images: the spans and the three position streams [3, P]; a
// token at position p >= P (generated) sits at p + delta in every stream.
struct PromptImages {
  std::vector<ImageSpan> spans;
  std::vector<int32_t> positions;
  int64_t delta = 0;
};

// Expands each image token of `prompt` (the plan's image_token_id) to the
// next image's rows, in order, and computes the positions (models/glm4v
// get_rope_index). Errors: a plan without a vision program, images and image
// tokens that do not pair up, an image over the vision program's patch bound.
absl::StatusOr<PromptImages> ExpandImages(const compiler::Plan& plan,
                                          const std::vector<std::shared_ptr<const image::Patches>>& images,
                                          std::vector<int32_t>& prompt);

// What a prefix-cache block that holds rows of an image adds to its tokens
// (the same image token stands for every row of every image): the image's
// content hash and the first of its rows the block holds, as four words.
void AppendImageKey(const ImageHash& hash, int64_t first_row, std::vector<int32_t>* tokens);


// Image rows by content hash, least recently used evicted past a byte budget
// (rows a step holds stay alive with it even when evicted).
class EncoderCache {
 public:
  explicit EncoderCache(int64_t capacity_bytes) : capacity_(capacity_bytes) {}
  // The image's rows [rows, hidden] as float, or null; a hit refreshes it.
  ImageRows Find(const ImageHash& hash);
  void Insert(const ImageHash& hash, ImageRows rows);
  bool Contains(const ImageHash& hash) const { return index_.contains(hash); }
  int64_t entries() const { return static_cast<int64_t>(lru_.size()); }
  int64_t hits() const { return hits_; }
  int64_t misses() const { return misses_; }
  int64_t bytes() const { return bytes_; }

 private:
  using Lru = std::list<std::pair<ImageHash, ImageRows>>;
  int64_t capacity_;
  int64_t bytes_ = 0, hits_ = 0, misses_ = 0;
  Lru lru_;  // most recent first
  absl::flat_hash_map<ImageHash, Lru::iterator, ImageHashOf> index_;
};

// Runs the vision program over `images` (as many runs as its patch and image
// bounds need) and returns each one's rows [rows, hidden], in order.
absl::StatusOr<std::vector<ImageRows>> EncodeImages(Backend& backend, const compiler::Plan& plan,
                                                    const std::vector<const image::Patches*>& images);

}  // namespace ag::runtime

#endif  // AUTOGLM_RUNTIME_MULTIMODAL_H_
