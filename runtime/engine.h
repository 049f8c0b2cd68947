// The engine: requests in, tokens out. It schedules requests into batched
// steps (continuous batching: decode tokens of running sequences first, then
// prefill chunks of new ones, within the plan's token and sequence limits),
// gives each sequence KV-cache blocks as it grows, runs the plan on a backend
// and picks the next tokens. When the cache runs out, the newest running
// sequence is preempted: its blocks are freed and it waits at the head of the
// queue, to be recomputed (prompt and tokens so far) when blocks come back —
// with the same tokens and logits it would have had.
#ifndef AUTOGLM_RUNTIME_ENGINE_H_
#define AUTOGLM_RUNTIME_ENGINE_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "compiler/plan.h"
#include "runtime/backend.h"
#include "image/preprocess.h"
#include "runtime/block_pool.h"
#include "runtime/constraint.h"
#include "runtime/multimodal.h"
#include "runtime/sampler.h"
#include "runtime/speculative.h"

namespace ag::runtime {

struct EngineOptions {
  int64_t max_context = 0;      // 0: the model's max_position_embeddings
  int64_t kv_cache_tokens = 0;  // KV-pool capacity in tokens; 0: a default (see Engine::Create)
  // Reuse the K/V of full blocks whose prefix another request computed
  // (requests that want prompt logits always compute their whole prompt).
  bool prefix_caching = true;
  // Image rows kept by content hash (GLM-4.1V), so that a screenshot sent
  // again is not encoded again; 0 keeps none past the step that needs them.
  int64_t encoder_cache_bytes = int64_t{512} << 20;
  // Prompt-lookup drafts for decoding sequences (runtime/speculative.h); off by default.
  SpeculativeOptions speculative;
  // A constrained sequence's row (structured output, a tool call) is masked and sampled where its
  // logits are, when the backend samples there and the row has no drafts: its mask goes down (19 KB
  // at GLM-4's vocabulary) instead of its row coming back (600 KB) to the host's sampler.
  // AUTOGLM_MASK_WHERE_LOGITS=0 turns it off.
  bool mask_where_logits_are = true;
};

struct Request {
  // GLM-4.1V: each image token (ModelInfo::image_token_id) in the prompt
  // stands for the next image; Submit expands it to the image's rows.
  std::vector<int32_t> prompt;
  std::vector<std::shared_ptr<const image::Patches>> images;
  int64_t max_new_tokens = 16;
  bool prompt_logits = false;  // keep the logits row of every prompt position
  bool keep_logits = false;    // keep the logits row that chose each new token
  // >= 0: for every new token, its log-probability and this many most likely alternatives
  // (at most kMaxTopLogprobs), computed where the logits are; TakeLogprobs hands them over.
  int32_t logprobs = -1;
  bool stop_on_eos = true;     // finish on any of the model's end-of-sequence ids
  std::vector<int32_t> stop_ids;  // finish on any of these too (the id is kept as the last new token)
  // vLLM's min_tokens: the end-of-sequence ids (with stop_on_eos) and stop_ids are not drawn (their
  // logits -inf) until this many new tokens exist. At most max_new_tokens.
  int64_t min_new_tokens = 0;
  SamplingParams sampling;
  // Structured output (OpenAI's response_format): each choice's tokens follow its constraint, and it
  // may end (eos with stop_on_eos, or a stop id) only once the constraint is complete -- then it must.
  // Needs an end (stop_on_eos or stop_ids) and no min_new_tokens. Sampled on the host.
  ConstraintFactory constraint;
};

enum class FinishReason { kNone, kLength, kEos, kContext, kStop, kCancelled };
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
  int64_t images_encoded = 0;  // vision-program runs' images (cache misses)
  double encoder_seconds = 0;  // those runs, rows read back
  double seconds = 0;  // vision and decoder execution plus output reads
  int64_t draft_tokens = 0;     // speculative rows the step ran
  int64_t accepted_tokens = 0;  // of those, the drafts it kept
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
  // `n` completions of one prompt (OpenAI's n): choice i samples with seed
  // `seed + i`. The first computes the prompt; the others join once it has,
  // taking its full blocks from the prefix cache. Returns the n ids.
  absl::StatusOr<std::vector<int>> SubmitChoices(Request request, int n);
  bool HasWork() const { return !waiting_.empty() || !running_.empty(); }
  // Runs one batched step; returns the tokens it produced.
  absl::StatusOr<std::vector<TokenEvent>> Step();

  // A request's results, until Release(id). `id` must be one Submit returned.
  const std::vector<int32_t>& new_tokens(int id) const { return seqs_.at(id)->generated; }
  // Rows kept for the request: prompt rows first (if asked), then one per new token (if asked).
  const std::vector<std::vector<float>>& logits(int id) const { return seqs_.at(id)->logits; }
  FinishReason finish_reason(int id) const { return seqs_.at(id)->finish; }
  // Moves out the logprobs of the request's tokens since the last call (Request::logprobs).
  std::vector<TokenLogprobs> TakeLogprobs(int id) { return std::exchange(seqs_.at(id)->logprobs, {}); }
  // Ends a request now (a client that went away): its blocks are free for the next step.
  absl::Status Cancel(int id);
  // Forgets a finished request and its results, so that a long-running
  // engine's memory stays flat however many requests it serves.
  absl::Status Release(int id);
  // Requests submitted and not yet released.
  int64_t num_requests() const { return static_cast<int64_t>(seqs_.size()); }
  const StepStats& last_step() const { return last_step_; }
  int64_t max_context() const { return max_context_; }
  int64_t kv_blocks() const { return pool_->num_blocks(); }
  int64_t kv_blocks_free() const { return pool_->num_free(); }
  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  int64_t num_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t preemptions() const { return preemptions_; }
  // Known tokens of admitted sequences looked up in the prefix cache, and those found there.
  int64_t prefix_cache_queries() const { return prefix_queries_; }
  int64_t prefix_cache_hits() const { return prefix_hits_; }
  // Speculative decoding: steps of a sequence with drafts, drafts run, and drafts kept (vLLM's counters).
  int64_t spec_drafts() const { return spec_drafts_; }
  int64_t spec_draft_tokens() const { return spec_draft_tokens_; }
  int64_t spec_accepted_tokens() const { return spec_accepted_tokens_; }
  // Images looked up in the encoder cache (one per image a prefill step reaches), and those found.
  int64_t encoder_cache_queries() const { return encoder_cache_.hits() + encoder_cache_.misses(); }
  int64_t encoder_cache_hits() const { return encoder_cache_.hits(); }
  // A request's prompt as the model sees it: image tokens expanded.
  const std::vector<int32_t>& prompt(int id) const { return seqs_.at(id)->request.prompt; }

 private:
  struct Sequence {
    int id = 0;
    Request request;
    std::vector<int32_t> generated;
    std::vector<std::vector<float>> logits;
    std::vector<TokenLogprobs> logprobs;  // of new tokens not yet taken
    int64_t cached = 0;       // tokens whose K/V are in the cache
    int64_t logits_from = 0;  // positions below this have had their logits row kept (or passed over)
    BlockTable table;
    std::vector<uint64_t> block_hashes;  // PrefixHash of each full block at the head of the table
    std::vector<Sequence*> followers;    // choices that wait for this one's prompt (SubmitChoices)
    PromptImages images;  // the prompt's image spans and M-RoPE positions
    std::optional<Sampler> sampler;
    std::optional<PenaltyTracker> penalties;  // with any penalty: kept up to date as tokens come
    bool sample_where_logits_are = false;     // through Backend::SampleRows
    std::vector<int32_t> drafts;  // this step's speculative tokens after the last known one (PlanStep to Advance)
    std::unique_ptr<TokenConstraint> constraint;  // Request::constraint's, this sequence's own
    FinishReason finish = FinishReason::kNone;

    explicit Sequence(int64_t block_size) : table(block_size) {}
    int64_t prompt_size() const { return static_cast<int64_t>(request.prompt.size()); }
    int64_t length() const { return prompt_size() + static_cast<int64_t>(generated.size()); }
    // Tokens known but not yet in the cache: 1 when decoding; more in a prefill or a recompute.
    int64_t pending() const { return length() - cached; }
    int32_t token(int64_t pos) const {
      return pos < prompt_size() ? request.prompt[pos] : generated[pos - prompt_size()];
    }
    // The rotary position of `pos` in M-RoPE stream `stream` (0: time, 1: height, 2: width).
    int32_t RopePosition(int stream, int64_t pos) const {
      const int64_t known = static_cast<int64_t>(images.positions.size()) / 3;
      return static_cast<int32_t>(pos < known ? images.positions[stream * known + pos] : pos + images.delta);
    }
    // Whether the caller asked for the logits row at `pos` (the one predicting pos + 1).
    bool KeepsLogits(int64_t pos) const {
      return (request.prompt_logits && pos < prompt_size()) || (request.keep_logits && pos >= prompt_size() - 1);
    }
  };
  // One sequence's part of a step.
  struct Slice {
    Sequence* seq;
    int64_t first_row, rows;              // rows of the step's tokens
    int64_t first_logit;                  // its first row of the step's logits
    std::vector<int64_t> logit_positions;  // the positions those logits rows are for
    bool emits_token;                     // its last known token's row chooses the next token
    int64_t drafts = 0;                   // rows after that one, each fed a draft: each may choose one more
    // The step's logits row of the last known position (the one that chooses the next token).
    int64_t choice_row() const { return first_logit + static_cast<int64_t>(logit_positions.size()) - 1 - drafts; }
  };
  // A token Advance emitted and the step's logits row that chose it.
  struct Emitted {
    TokenEvent event;
    int64_t row;
  };

  Engine(const compiler::Plan& plan, Backend& backend, const EngineOptions& options)
      : plan_(plan), backend_(backend), options_(options), encoder_cache_(options.encoder_cache_bytes) {}
  void Admit();
  // Tokens each running sequence processes this step (decode first, then
  // prefill chunks, within the token budget), with blocks reserved for them,
  // preempting the newest sequences when the cache is full.
  absl::StatusOr<std::vector<int64_t>> PlanStep();
  // Gives every image span the step computes tokens of its rows: from the
  // encoder cache, or from one vision run over all that are missing.
  absl::Status StepImages(const std::vector<int64_t>& tokens, StepStats& stats);
  // Drafts for the decoding sequences (tokens[i] == 1) while the token budget lasts and blocks
  // are free (a draft never preempts anything): their tokens, and each sequence's `drafts`.
  void AddDrafts(std::vector<int64_t>& tokens, int64_t& budget);
  std::vector<Slice> Schedule(const std::vector<int64_t>& tokens, StepStats& stats);  // fills batch_
  // The step's block-table width (StepBatch::max_blocks): its longest table rounded up to a power of
  // two, at least kMinBlockTableWidth, at most max_blocks_per_seq_. Not the model's whole context:
  // 8,192 columns at GLM-4's 131,072 tokens made each step copy, and upload, 32 KB a sequence (2 MB
  // at 64, and most of a batch-64 step's host time: engine_bench); a power of two keeps the widths,
  // and the CUDA graphs keyed by them, few.
  int64_t BlockTableWidth(const std::vector<int64_t>& tokens) const;
  static constexpr size_t kMinBlockTableWidth = 16;
  // The encoder budget: `n` prefill tokens of `seq`, or fewer, so that the
  // images this step must encode fit one run of the vision program (`patches`
  // left, the images in `encoding`); an image that does not fit waits, and the tokens from it.
  int64_t CutAtEncoderBudget(const Sequence& seq, int64_t n, int64_t& patches,
                             absl::flat_hash_set<ImageHash, ImageHashOf>& encoding);
  // Moves a sequence past its part of the step. `chosen`: the tokens Backend::SampleRows picked for
  // the slice's choice row and draft rows, or empty. Appends the tokens it emits.
  absl::Status Advance(const Slice& slice, absl::Span<const int32_t> chosen, std::vector<Emitted>* emitted);
  // A constrained sequence's logits row before it samples: the constraint's mask, and the ends
  // (end-of-sequence ids, stop ids) let through exactly when the constraint is complete.
  void Constrain(const Sequence& seq, std::vector<float>& logits) const;
  // The token the host samples for `seq` from the step's logits row `logit_row` (copied into
  // `scratch`, masked by the sequence's constraint, with its penalties).
  // How the sequence chooses its tokens: the device's argmax (plain greedy, no constraint), a draw
  // where the logits are (Backend::SampleRows), or on the host; drops a released constraint.
  void ChooseSampling(Sequence& seq) const;
  // Whether the slice's token is masked and sampled where the logits are (EngineOptions), and
  // whether it is drawn there at all (masked, or an unconstrained draw).
  bool MasksWhereLogitsAre(const Slice& s) const;
  bool DrawsWhereLogitsAre(const Slice& s) const;
  // A constrained sequence's mask as RowSampling::allowed bits over the logits row, after the first
  // `drafts_taken` of its drafts: the constraint's, and the end ids exactly when the text is whole
  // there (Constrain's rule).
  void ConstraintBits(const Sequence& seq, size_t drafts_taken, std::vector<uint64_t>* bits) const;
  int32_t SampleOnHost(Sequence& seq, int64_t logit_row, std::vector<float>& scratch) const;
  // The constraints' masks for this step's rows, worked out while the device runs it.
  void PrepareConstraints(const std::vector<Slice>& slices);
  // The token of each slice the host samples that has no drafts, the slices in parallel (a
  // constrained row at temperature 1 is ~0.4 ms of host time; each touches only its own sequence).
  // A slice with drafts is Advance's: each of its rows waits on the token before it.
  void ChooseOnHost(const std::vector<Slice>& slices, std::vector<std::vector<int32_t>>& chosen);
  void Finish(Sequence& seq, FinishReason reason);
  void Preempt(Sequence& seq);
  void ReleaseFollowers(Sequence& seq);  // its waiting choices go to the head of the queue
  // Prefix cache: takes the cached blocks that match the sequence's head; registers its newly full blocks.
  void LookupPrefix(Sequence& seq);
  void RegisterFullBlocks(Sequence& seq);
  // PrefixHash of the sequence's block `block` (whose predecessors' hashes it has); its tokens in `tokens`.
  uint64_t BlockHash(const Sequence& seq, size_t block, std::vector<int32_t>* tokens) const;
  int64_t BlocksFor(int64_t tokens) const { return (tokens + plan_.kv.block_size - 1) / plan_.kv.block_size; }
  // The most cache a request can need: the prompt and all new tokens but the last, within the context.
  int64_t MaxTokens(const Request& r) const;

  const compiler::Plan& plan_;
  Backend& backend_;
  EngineOptions options_;
  int64_t max_context_ = 0;
  int64_t max_blocks_per_seq_ = 0;
  std::unique_ptr<BlockPool> pool_;
  absl::flat_hash_map<int, std::unique_ptr<Sequence>> seqs_;
  int next_id_ = 0;
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;
  StepBatch batch_;
  std::vector<float> logits_buffer_;
  std::vector<int32_t> next_buffer_;
  StepStats last_step_;
  int64_t preemptions_ = 0;
  int64_t prefix_queries_ = 0, prefix_hits_ = 0;
  int64_t spec_drafts_ = 0, spec_draft_tokens_ = 0, spec_accepted_tokens_ = 0;
  bool mrope_ = false;  // the decoder takes three position streams
  int64_t max_step_images_ = 0;  // images one vision run takes
  EncoderCache encoder_cache_;
};

}  // namespace ag::runtime

#endif  // AUTOGLM_RUNTIME_ENGINE_H_
