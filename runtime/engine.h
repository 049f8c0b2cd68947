// The engine: requests in, tokens out. It schedules requests into batched
// steps (continuous batching: decode tokens of running sequences first, then
// prefill chunks of new ones, within the plan's token and sequence limits),
// keeps each sequence's KV-cache blocks, runs the plan on a backend and
// picks the next tokens.
#ifndef AUTOGLM_RUNTIME_ENGINE_H_
#define AUTOGLM_RUNTIME_ENGINE_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/plan.h"
#include "runtime/backend.h"
#include "runtime/block_pool.h"
#include "runtime/sampler.h"

namespace ag::runtime {

struct EngineOptions {
  int64_t max_context = 0;      // 0: the model's max_position_embeddings
  int64_t kv_cache_tokens = 0;  // KV-pool capacity in tokens; 0: a default (see Engine::Create)
};

struct Request {
  std::vector<int32_t> prompt;
  int64_t max_new_tokens = 16;
  bool prompt_logits = false;  // keep the logits row of every prompt position
  bool keep_logits = false;    // keep the logits row that chose each new token
  bool stop_on_eos = true;     // finish on any of the model's end-of-sequence ids
  SamplingParams sampling;
};

enum class FinishReason { kNone, kLength, kEos, kContext };
const char* FinishReasonName(FinishReason reason);

struct TokenEvent {
  int request = 0;
  int32_t token = 0;
  bool finished = false;
};

struct StepStats {
  int64_t prefill_tokens = 0;
  int64_t decode_tokens = 0;
  int64_t sequences = 0;
  double seconds = 0;  // backend execution plus output reads
};

class Engine {
 public:
  // Loads the plan's weights on the backend. The KV pool holds
  // `kv_cache_tokens` tokens, by default enough for max_seqs sequences of
  // max_context tokens up to a 1 GiB cache (but always one full-length sequence).
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const compiler::Plan& plan, Backend& backend,
                                                        const WeightSource& weights, const EngineOptions& options);

  // Validates and queues a request; returns its id.
  absl::StatusOr<int> Submit(Request request);
  bool HasWork() const { return !waiting_.empty() || !running_.empty(); }
  // Runs one batched step; returns the tokens it produced.
  absl::StatusOr<std::vector<TokenEvent>> Step();

  const std::vector<int32_t>& new_tokens(int id) const { return seqs_[id]->generated; }
  // Rows kept for the request: prompt rows first (if asked), then one per new token (if asked).
  const std::vector<std::vector<float>>& logits(int id) const { return seqs_[id]->logits; }
  FinishReason finish_reason(int id) const { return seqs_[id]->finish; }
  const StepStats& last_step() const { return last_step_; }
  int64_t max_context() const { return max_context_; }
  int64_t kv_blocks() const { return pool_->num_blocks(); }

 private:
  struct Sequence {
    int id = 0;
    Request request;
    std::vector<int32_t> generated;
    std::vector<std::vector<float>> logits;
    int64_t cached = 0;  // tokens whose K/V are in the cache
    BlockTable table;
    std::optional<Sampler> sampler;
    FinishReason finish = FinishReason::kNone;

    explicit Sequence(int64_t block_size) : table(block_size) {}
    int64_t length() const { return static_cast<int64_t>(request.prompt.size() + generated.size()); }
    bool prefilling() const { return cached < static_cast<int64_t>(request.prompt.size()); }
  };
  // One sequence's part of a step.
  struct Slice {
    Sequence* seq;
    int64_t first_row, rows;     // rows of the step's tokens
    int64_t first_logit, logits;  // rows of the step's logits
    bool emits_token;            // its last logits row chooses a new token
  };

  Engine(const compiler::Plan& plan, Backend& backend) : plan_(plan), backend_(backend) {}
  absl::Status Admit();
  std::vector<Slice> Schedule(StepStats& stats);  // fills batch_
  std::optional<TokenEvent> Advance(const Slice& slice);
  void Finish(Sequence& seq, FinishReason reason);
  int64_t ReserveTokens(const Sequence& seq) const;

  const compiler::Plan& plan_;
  Backend& backend_;
  int64_t max_context_ = 0;
  int64_t max_blocks_per_seq_ = 0;
  std::unique_ptr<BlockPool> pool_;
  std::vector<std::unique_ptr<Sequence>> seqs_;
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;
  StepBatch batch_;
  std::vector<float> logits_buffer_;
  std::vector<int32_t> next_buffer_;
  StepStats last_step_;
};

}  // namespace ag::runtime

#endif  // AUTOGLM_RUNTIME_ENGINE_H_
