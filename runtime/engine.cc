#include "runtime/engine.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <limits>
#include <string_view>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ir/status_macros.h"
#include "kernels/ref/parallel.h"
#include "runtime/memory_check.h"

namespace ag::runtime {

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone:
      return "none";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kEos:
      return "eos";
    case FinishReason::kContext:
      return "context";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kCancelled:
      return "cancelled";
  }
  return "?";
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const compiler::Plan& plan, Backend& backend,
                                                       const WeightSource& weights, const EngineOptions& options) {
  std::unique_ptr<Engine> engine(new Engine(plan, backend, options));
  if (const char* mask = std::getenv("AUTOGLM_MASK_WHERE_LOGITS"); mask != nullptr && std::string_view(mask) == "0") {
    engine->options_.mask_where_logits_are = false;
  }
  if (options.max_context < 0 || options.kv_cache_tokens < 0) {
    return absl::InvalidArgumentError(absl::StrCat("max context (", options.max_context, ") and KV-cache tokens (",
                                                   options.kv_cache_tokens, ") must not be negative (0: default)"));
  }
  const SpeculativeOptions& spec = options.speculative;
  if (spec.num_tokens < 0 || spec.num_tokens > kMaxSpeculativeTokens || spec.disable_by_batch_size < 0 ||
      (spec.enabled() && (spec.lookup_min < 1 || spec.lookup_min > spec.lookup_max || spec.lookup_max > kMaxLookup))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "speculative decoding: ", spec.num_tokens, " drafts (at most ", kMaxSpeculativeTokens, "), n-grams of ",
        spec.lookup_min, " to ", spec.lookup_max, " tokens (1 <= min <= max <= ", kMaxLookup, ") and a batch limit of ",
        spec.disable_by_batch_size, " (0: none) are not a setting"));
  }
  const int64_t model_max = plan.model.max_position_embeddings;
  engine->max_context_ = options.max_context > 0 ? options.max_context : model_max;
  if (engine->max_context_ > model_max) {
    return absl::InvalidArgumentError(absl::StrCat("max context ", engine->max_context_,
                                                   " exceeds the model's max_position_embeddings (", model_max, ")"));
  }
  const int64_t block = plan.kv.block_size;
  engine->max_blocks_per_seq_ = (engine->max_context_ + block - 1) / block;
  int64_t tokens = options.kv_cache_tokens;
  if (tokens <= 0) {
    const int64_t budget = (int64_t{1} << 30) / plan.kv.BytesPerToken();
    tokens = std::max(std::min(plan.max_seqs * engine->max_context_, budget), engine->max_context_);
  }
  // Slots are int32 (block * block_size + offset) on every backend.
  const int64_t max_tokens = std::numeric_limits<int32_t>::max() / block * block;
  if (tokens > max_tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("a KV cache of ", tokens, " tokens is more than the ", max_tokens, " tokens slots can address"));
  }
  const int64_t blocks = (tokens + block - 1) / block;
  // The backend checks that everything fits before it allocates; the pool comes after.
  const compiler::Program& decoder = plan.decoder();
  const int positions = decoder.FindInput("positions");
  engine->mrope_ = positions >= 0 && decoder.inputs[positions].type.rank() == 2;
  if (const compiler::Program* vision = plan.FindProgram(compiler::kVisionProgram)) {
    engine->max_step_images_ = vision->bounds.at("I");
  }
  RETURN_IF_ERROR(backend.Load(plan, weights, blocks));
  engine->pool_ = std::make_unique<BlockPool>(static_cast<int32_t>(blocks));
  return engine;
}

int64_t Engine::MaxTokens(const Request& r) const {
  // Every position that is fed back gets a slot: the prompt and all new tokens
  // but the last, never past the context (clamped first: max_new_tokens may be huge).
  const int64_t prompt = static_cast<int64_t>(r.prompt.size());
  return std::min(prompt + std::min(r.max_new_tokens - 1, max_context_), max_context_);
}

absl::StatusOr<int> Engine::Submit(Request request) {
  if (request.prompt.empty()) {
    return absl::InvalidArgumentError("the prompt is empty (give --prompt TEXT or --prompt-ids IDS)");
  }
  ASSIGN_OR_RETURN(PromptImages images, ExpandImages(plan_, request.images, request.prompt));
  request.images.clear();  // the spans hold them now
  const int64_t n = static_cast<int64_t>(request.prompt.size());
  for (int64_t i = 0; i < n; ++i) {
    const int32_t id = request.prompt[i];
    if (id < 0 || id >= plan_.model.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("prompt token ", id, " at position ", i,
                                                     " is outside the vocabulary (0..", plan_.model.vocab_size - 1,
                                                     ")"));
    }
  }
  if (n > max_context_) {
    return absl::InvalidArgumentError(
        absl::StrCat("the prompt has ", n, " tokens, more than the maximum context of ", max_context_));
  }
  if (request.max_new_tokens < 1) return absl::InvalidArgumentError("max new tokens must be at least 1");
  if (request.logprobs > kMaxTopLogprobs) {
    return absl::InvalidArgumentError(absl::StrCat("at most ", kMaxTopLogprobs, " top logprobs, not ", request.logprobs));
  }
  if (request.min_new_tokens < 0 || request.min_new_tokens > request.max_new_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("min new tokens must be in [0, ", request.max_new_tokens,
                                                   "] (the max new tokens), got ", request.min_new_tokens));
  }
  RETURN_IF_ERROR(request.sampling.Validate());
  if (request.constraint && ((!request.stop_on_eos || plan_.model.eos_token_ids.empty()) && request.stop_ids.empty())) {
    return absl::InvalidArgumentError("a constrained request must be able to end (end-of-sequence or stop ids)");
  }
  if (request.constraint && request.min_new_tokens > 0) {
    return absl::InvalidArgumentError("a constrained request cannot also hold its end back (min new tokens)");
  }
  if (request.prompt_logits || request.keep_logits) {
    // Kept logits rows are host memory too: one vocabulary-wide float row per position.
    const int64_t rows = n + std::min(request.max_new_tokens, max_context_);
    const int64_t bytes = rows * plan_.model.vocab_size * 4;
    if (bytes > HostMemoryAvailable()) {
      return absl::ResourceExhaustedError(absl::StrCat("keeping the logits of ", rows, " positions needs ", bytes,
                                                       " bytes of host memory, more than is available"));
    }
  }
  auto seq = std::make_unique<Sequence>(plan_.kv.block_size);
  seq->id = next_id_++;
  seq->request = std::move(request);
  seq->images = std::move(images);
  if (seq->request.min_new_tokens > 0) {  // the ids that would end it are suppressed until then
    SamplingParams& sampling = seq->request.sampling;
    sampling.suppress_for = seq->request.min_new_tokens;
    sampling.suppressed_ids = seq->request.stop_ids;
    if (seq->request.stop_on_eos) {
      for (const int64_t id : plan_.model.eos_token_ids) sampling.suppressed_ids.push_back(static_cast<int32_t>(id));
    }
  }
  if (seq->request.constraint) {
    seq->constraint = seq->request.constraint();
    if (seq->constraint == nullptr) return absl::InvalidArgumentError("the request's constraint factory made none");
  }
  ChooseSampling(*seq);
  if (seq->request.sampling.HasPenalty()) seq->penalties.emplace(seq->request.sampling, seq->request.prompt);
  seq->logits_from = seq->request.prompt_logits ? 0 : n - 1;
  const int64_t blocks = BlocksFor(MaxTokens(seq->request));
  if (blocks > pool_->num_blocks()) {
    return absl::ResourceExhaustedError(absl::StrCat("the request needs ", blocks, " KV-cache blocks but the cache has ",
                                                     pool_->num_blocks(), "; raise the KV-cache size"));
  }
  const int id = seq->id;
  waiting_.push_back(seq.get());
  seqs_.emplace(id, std::move(seq));
  return id;
}

absl::StatusOr<std::vector<int>> Engine::SubmitChoices(Request request, int n) {
  if (n < 1) return absl::InvalidArgumentError(absl::StrCat("n must be at least 1, got ", n));
  if (n > plan_.max_seqs * 16) return absl::InvalidArgumentError(absl::StrCat("n of ", n, " is too many"));
  const uint64_t seed = request.sampling.seed;
  ASSIGN_OR_RETURN(const int leader_id, Submit(request));
  std::vector<int> ids = {leader_id};
  Sequence* leader = seqs_.at(leader_id).get();
  for (int i = 1; i < n; ++i) {
    request.sampling.seed = seed + static_cast<uint64_t>(i);
    ASSIGN_OR_RETURN(const int id, Submit(request));
    Sequence* follower = seqs_.at(id).get();
    waiting_.pop_back();  // parked with the leader until its prompt is in the cache
    if (options_.prefix_caching && !request.prompt_logits) {
      leader->followers.push_back(follower);
    } else {
      waiting_.push_back(follower);
    }
    ids.push_back(id);
  }
  return ids;
}

void Engine::ReleaseFollowers(Sequence& seq) {
  for (auto it = seq.followers.rbegin(); it != seq.followers.rend(); ++it) waiting_.push_front(*it);
  seq.followers.clear();
}

absl::Status Engine::Cancel(int id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return absl::NotFoundError(absl::StrCat("no request ", id));
  Sequence* seq = it->second.get();
  if (seq->finish != FinishReason::kNone) return absl::OkStatus();
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), seq), waiting_.end());
  running_.erase(std::remove(running_.begin(), running_.end(), seq), running_.end());
  for (auto& [other_id, other] : seqs_) {  // a parked choice leaves its leader
    auto& f = other->followers;
    f.erase(std::remove(f.begin(), f.end(), seq), f.end());
  }
  Finish(*seq, FinishReason::kCancelled);
  return absl::OkStatus();
}

absl::Status Engine::Release(int id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return absl::NotFoundError(absl::StrCat("no request ", id));
  if (it->second->finish == FinishReason::kNone) {
    return absl::FailedPreconditionError(absl::StrCat("request ", id, " is still running (cancel it first)"));
  }
  seqs_.erase(it);
  return absl::OkStatus();
}

void Engine::Admit() {
  // In arrival order (a preempted sequence is back at the head), while the
  // cache has room for everything the sequence already knows.
  while (!waiting_.empty() && static_cast<int64_t>(running_.size()) < plan_.max_seqs) {
    Sequence* seq = waiting_.front();
    if (BlocksFor(seq->length()) > pool_->num_free()) break;
    waiting_.pop_front();
    running_.push_back(seq);
    if (options_.prefix_caching && !seq->request.prompt_logits) LookupPrefix(*seq);
  }
}

uint64_t Engine::BlockHash(const Sequence& seq, size_t block, std::vector<int32_t>* tokens) const {
  const int64_t size = plan_.kv.block_size, first = static_cast<int64_t>(block) * size;
  tokens->resize(static_cast<size_t>(size));
  for (int64_t k = 0; k < size; ++k) (*tokens)[k] = seq.token(first + k);
  for (const ImageSpan& span : seq.images.spans) {  // every image token looks the same: add what it stands for
    if (span.begin < first + size && span.begin + span.rows > first) {
      AppendImageKey(span.image->hash, std::max<int64_t>(first - span.begin, 0), tokens);
    }
  }
  return PrefixHash(block == 0 ? 0 : seq.block_hashes[block - 1], *tokens);
}

void Engine::LookupPrefix(Sequence& seq) {
  // Whole blocks before the last known token, which is always computed: its logits choose the next one.
  const size_t usable = static_cast<size_t>((seq.length() - 1) / plan_.kv.block_size);
  prefix_queries_ += seq.length();
  std::vector<int32_t> tokens;
  for (size_t i = seq.block_hashes.size(); i < usable; ++i) {
    const uint64_t hash = BlockHash(seq, i, &tokens);
    const int32_t block = pool_->Lookup(hash, tokens);
    if (block < 0) break;
    seq.table.Append(block);
    seq.block_hashes.push_back(hash);
    seq.cached += plan_.kv.block_size;
    prefix_hits_ += plan_.kv.block_size;
  }
}

void Engine::RegisterFullBlocks(Sequence& seq) {
  std::vector<int32_t> tokens;
  for (size_t i = seq.block_hashes.size(); i < static_cast<size_t>(seq.cached / plan_.kv.block_size); ++i) {
    const uint64_t hash = BlockHash(seq, i, &tokens);
    pool_->Register(seq.table.blocks()[i], hash, tokens);
    seq.block_hashes.push_back(hash);
  }
}

void Engine::Finish(Sequence& seq, FinishReason reason) {
  seq.finish = reason;
  seq.images.spans.clear();  // the pixels and rows are not needed any more
  seq.table.ReleaseAll(*pool_);  // registered blocks stay cached for the followers
  ReleaseFollowers(seq);
}

void Engine::Preempt(Sequence& seq) {
  seq.table.ReleaseAll(*pool_);
  seq.block_hashes.clear();
  seq.cached = 0;  // recomputed from its prompt and the tokens it has when it runs again
  seq.drafts.clear();
  waiting_.push_front(&seq);
  ++preemptions_;
}

absl::StatusOr<std::vector<int64_t>> Engine::PlanStep() {
  std::vector<int64_t> tokens(running_.size(), 0);
  int64_t budget = plan_.max_batch_tokens;
  const compiler::Program* vision = plan_.FindProgram(compiler::kVisionProgram);
  int64_t encoder_budget = vision != nullptr ? vision->bounds.at("P") : 0;  // one vision run's patches
  absl::flat_hash_set<ImageHash, ImageHashOf> encoding;
  for (const bool decode : {true, false}) {
    for (size_t i = 0; i < running_.size(); ++i) {
      Sequence* seq = running_[i];
      if ((seq->pending() == 1) != decode || budget == 0 || tokens[i] > 0) continue;
      int64_t n = std::min(seq->pending(), budget);
      if (!decode) n = CutAtEncoderBudget(*seq, n, encoder_budget, encoding);
      if (n == 0) continue;
      bool preempted_self = false;
      while (!seq->table.Reserve(*pool_, seq->cached + n).ok()) {
        // The cache is full: the newest running sequence gives its blocks back.
        Sequence* victim = running_.back();
        budget += tokens.back();
        running_.pop_back();
        tokens.pop_back();
        Preempt(*victim);
        if (victim == seq) {
          preempted_self = true;
          break;
        }
      }
      if (preempted_self) break;  // it was the newest: nothing after it runs
      tokens[i] = n;
      budget -= n;
    }
    if (decode) AddDrafts(tokens, budget);
  }
  if (running_.empty() && !waiting_.empty() && BlocksFor(waiting_.front()->length()) > pool_->num_blocks()) {
    return absl::InternalError("a waiting request needs more KV-cache blocks than the cache has");
  }
  return tokens;
}

void Engine::AddDrafts(std::vector<int64_t>& tokens, int64_t& budget) {
  const SpeculativeOptions& spec = options_.speculative;
  if (!spec.enabled()) return;
  if (spec.disable_by_batch_size > 0 && static_cast<int64_t>(running_.size()) > spec.disable_by_batch_size) return;
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Sequence* seq = running_[i];
    if (tokens[i] != 1 || seq->pending() != 1) continue;
    // All drafts kept, the step emits one token more than it has drafts: within max_new_tokens, and
    // every row's position inside the context (the sequence finishes at its end first).
    const int64_t generated = static_cast<int64_t>(seq->generated.size());
    const int64_t room = std::min({static_cast<int64_t>(spec.num_tokens), budget,
                                   seq->request.max_new_tokens - generated - 1, max_context_ - seq->length()});
    if (room <= 0) continue;
    seq->drafts.clear();
    ProposeNgramDrafts(seq->request.prompt, seq->generated, spec.lookup_min, spec.lookup_max, room, &seq->drafts);
    const int64_t n = static_cast<int64_t>(seq->drafts.size());
    if (n == 0) continue;
    if (!seq->table.Reserve(*pool_, seq->cached + 1 + n).ok()) {
      seq->drafts.clear();
      continue;
    }
    tokens[i] += n;
    budget -= n;
  }
}

int64_t Engine::CutAtEncoderBudget(const Sequence& seq, int64_t n, int64_t& patches,
                                   absl::flat_hash_set<ImageHash, ImageHashOf>& encoding) {
  for (const ImageSpan& span : seq.images.spans) {
    if (span.encoded || span.begin >= seq.cached + n || span.begin + span.rows <= seq.cached) continue;
    const ImageHash& hash = span.image->hash;
    if (encoding.contains(hash) || encoder_cache_.Contains(hash)) continue;
    if (span.image->rows() > patches || static_cast<int64_t>(encoding.size()) == max_step_images_) {
      return std::max<int64_t>(span.begin - seq.cached, 0);  // this image waits for the next step's run
    }
    patches -= span.image->rows();
    encoding.insert(hash);
  }
  return n;
}

int64_t Engine::BlockTableWidth(const std::vector<int64_t>& tokens) const {
  size_t longest = 0;
  for (size_t i = 0; i < running_.size(); ++i) {
    if (tokens[i] > 0) longest = std::max(longest, running_[i]->table.blocks().size());
  }
  const int64_t width = static_cast<int64_t>(std::bit_ceil(std::max<size_t>(longest, kMinBlockTableWidth)));
  return std::min(width, max_blocks_per_seq_);
}

// Decode tokens first (latency), then prefill chunks in arrival order, as PlanStep sized them.
std::vector<Engine::Slice> Engine::Schedule(const std::vector<int64_t>& tokens, StepStats& stats) {
  std::vector<Slice> slices;
  StepBatch& b = batch_;
  b.Clear();
  b.max_blocks = BlockTableWidth(tokens);
  std::vector<int32_t> streams[3];  // M-RoPE's positions, stream by stream
  const int64_t hidden = plan_.model.hidden_size;
  b.seq_offsets.push_back(0);
  for (const bool decode : {true, false}) {
    for (size_t i = 0; i < running_.size(); ++i) {
      Sequence* seq = running_[i];
      const int64_t n = tokens[i];
      if (n == 0 || (seq->pending() == 1) != decode) continue;
      const int64_t drafts = static_cast<int64_t>(seq->drafts.size()), known = seq->length();
      const bool completes = seq->cached + n - drafts == known;  // the step reaches the last known token
      Slice s{seq, b.num_tokens, n, b.num_logit_rows, {}, completes, drafts};
      for (int64_t k = 0; k < n; ++k) {
        const int64_t pos = seq->cached + k;
        b.tokens.push_back(pos < known ? seq->token(pos) : seq->drafts[pos - known]);
        if (mrope_) {
          for (int j = 0; j < 3; ++j) streams[j].push_back(seq->RopePosition(j, pos));
        } else {
          b.positions.push_back(static_cast<int32_t>(pos));
        }
        b.slot_mapping.push_back(seq->table.Slot(pos));
        if ((pos >= seq->logits_from && seq->KeepsLogits(pos)) || (completes && k >= n - 1 - drafts)) {
          b.logit_rows.push_back(static_cast<int32_t>(b.num_tokens + k));
          s.logit_positions.push_back(pos);
        }
      }
      for (const ImageSpan& span : seq->images.spans) {  // image rows replace their tokens' embeddings
        const int64_t from = std::max(span.begin, seq->cached), to = std::min(span.begin + span.rows, seq->cached + n);
        for (int64_t pos = from; pos < to; ++pos) {
          const float* row = span.encoded->data() + (pos - span.begin) * hidden;
          b.mm_embeds.Append(row, hidden);  // the cache's rows, not copied: one piece an image
          b.mm_rows.push_back(static_cast<int32_t>(b.num_tokens + pos - seq->cached));
        }
      }
      b.num_tokens += n;
      b.seq_offsets.push_back(static_cast<int32_t>(b.num_tokens));
      b.context_lens.push_back(static_cast<int32_t>(seq->cached + n));
      const std::vector<int32_t>& blocks = seq->table.blocks();
      b.block_tables.insert(b.block_tables.end(), blocks.begin(), blocks.end());
      b.block_tables.resize(b.block_tables.size() + static_cast<size_t>(b.max_blocks) - blocks.size(), 0);
      b.num_logit_rows += static_cast<int64_t>(s.logit_positions.size());
      ++b.num_seqs;
      (n - drafts > 1 || seq->cached < seq->prompt_size() ? stats.prefill_tokens : stats.decode_tokens) += n;
      stats.draft_tokens += drafts;
      slices.push_back(std::move(s));
    }
  }
  if (mrope_) {
    for (const std::vector<int32_t>& stream : streams) b.positions.insert(b.positions.end(), stream.begin(), stream.end());
  }
  b.num_mm_rows = static_cast<int64_t>(b.mm_rows.size());
  stats.sequences = b.num_seqs;
  return slices;
}

absl::Status Engine::StepImages(const std::vector<int64_t>& tokens, StepStats& stats) {
  std::vector<const image::Patches*> missing;
  std::vector<std::vector<ImageSpan*>> waiting_spans;  // per missing image, the spans it goes to
  absl::flat_hash_map<ImageHash, size_t, ImageHashOf> missing_index;
  for (size_t i = 0; i < running_.size(); ++i) {
    Sequence* seq = running_[i];
    for (ImageSpan& span : seq->images.spans) {
      if (span.encoded || span.begin >= seq->cached + tokens[i] || span.begin + span.rows <= seq->cached) continue;
      if (const auto it = missing_index.find(span.image->hash); it != missing_index.end()) {
        waiting_spans[it->second].push_back(&span);
      } else if ((span.encoded = encoder_cache_.Find(span.image->hash)) == nullptr) {
        missing_index.emplace(span.image->hash, missing.size());
        missing.push_back(span.image.get());
        waiting_spans.push_back({&span});
      }
    }
  }
  if (missing.empty()) return absl::OkStatus();
  const auto start = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(std::vector<ImageRows> rows, EncodeImages(backend_, plan_, missing));
  stats.encoder_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (size_t k = 0; k < missing.size(); ++k) {
    for (ImageSpan* span : waiting_spans[k]) span->encoded = rows[k];
    encoder_cache_.Insert(missing[k]->hash, rows[k]);
  }
  stats.images_encoded = static_cast<int64_t>(missing.size());
  return absl::OkStatus();
}

void Engine::ChooseSampling(Sequence& seq) const {
  if (seq.constraint != nullptr && seq.constraint->Released()) seq.constraint.reset();
  if (seq.request.sampling.IsPlainGreedy() && seq.constraint == nullptr) {
    seq.sampler.reset();  // the device's argmax
    seq.sample_where_logits_are = false;
    return;
  }
  if (!seq.sampler.has_value()) seq.sampler.emplace(seq.request.sampling);  // a released one keeps its draws
  // A constrained sequence's rows are masked where the logits are (MasksWhereLogitsAre, a step at a
  // time) or come back to the host's sampler.
  seq.sample_where_logits_are = backend_.SamplesWhereLogitsAre() && seq.constraint == nullptr;
}

void Engine::Constrain(const Sequence& seq, std::vector<float>& logits) const {
  std::vector<std::pair<int32_t, float>> ends;
  auto end = [&](int64_t id) {
    if (id >= 0 && id < static_cast<int64_t>(logits.size())) ends.emplace_back(static_cast<int32_t>(id), logits[id]);
  };
  if (seq.request.stop_on_eos) {
    for (const int64_t id : plan_.model.eos_token_ids) end(id);
  }
  for (const int32_t id : seq.request.stop_ids) end(id);
  const bool complete = seq.constraint->Complete();
  seq.constraint->Mask(logits.data(), static_cast<int64_t>(logits.size()));
  for (const auto& [id, logit] : ends) logits[id] = complete ? logit : -INFINITY;
}

bool Engine::MasksWhereLogitsAre(const Slice& s) const {
  return s.seq->constraint != nullptr && (s.drafts == 0 || s.seq->constraint->KeepsDraftStates()) &&
         options_.mask_where_logits_are && backend_.SamplesWhereLogitsAre();
}

bool Engine::DrawsWhereLogitsAre(const Slice& s) const {
  return s.seq->sample_where_logits_are || MasksWhereLogitsAre(s);
}

void Engine::ConstraintBits(const Sequence& seq, size_t drafts_taken, std::vector<uint64_t>* bits) const {
  const int64_t vocab = plan_.model.vocab_size;
  bool complete = false;
  if (drafts_taken == 0) {
    seq.constraint->Allowed(bits, vocab);
    complete = seq.constraint->Complete();
  } else {
    seq.constraint->AllowedAfter(drafts_taken, bits, vocab, &complete);
  }
  auto end = [&](int64_t id) {
    if (id < 0 || id >= vocab) return;
    uint64_t& word = (*bits)[static_cast<size_t>(id) / 64];
    const uint64_t bit = uint64_t{1} << (id % 64);
    word = complete ? word | bit : word & ~bit;
  };
  if (seq.request.stop_on_eos) {
    for (const int64_t id : plan_.model.eos_token_ids) end(id);
  }
  for (const int32_t id : seq.request.stop_ids) end(id);
}

void Engine::PrepareConstraints(const std::vector<Slice>& slices) {
  for (const Slice& s : slices) {
    if (!s.emits_token || s.seq->constraint == nullptr) continue;
    s.seq->constraint->Prepare(absl::MakeConstSpan(s.seq->drafts).first(static_cast<size_t>(s.drafts)));
  }
}

int32_t Engine::SampleOnHost(Sequence& seq, int64_t logit_row, std::vector<float>& scratch) const {
  const int64_t vocab = plan_.model.vocab_size;
  const float* row = logits_buffer_.data() + logit_row * vocab;
  scratch.assign(row, row + vocab);
  if (seq.constraint != nullptr) Constrain(seq, scratch);
  return seq.sampler->Sample(scratch, seq.penalties.has_value() ? seq.penalties->entries() : std::span<const ref::Penalty>());
}

void Engine::ChooseOnHost(const std::vector<Slice>& slices, std::vector<std::vector<int32_t>>& chosen) {
  std::vector<size_t> host;
  for (size_t i = 0; i < slices.size(); ++i) {
    const Slice& s = slices[i];
    if (s.emits_token && s.drafts == 0 && s.seq->sampler.has_value() && !DrawsWhereLogitsAre(s)) {
      host.push_back(i);
    }
  }
  const int64_t n = static_cast<int64_t>(host.size());
  // Two rows a thread at least: ~0.8 ms of work beside the ~30 us a thread takes to start.
  ParallelParts(n, ThreadsFor(n, 2), [&](int64_t begin, int64_t end, int64_t) {
    std::vector<float> scratch;
    for (int64_t k = begin; k < end; ++k) {
      const Slice& s = slices[host[static_cast<size_t>(k)]];
      chosen[host[static_cast<size_t>(k)]] = {SampleOnHost(*s.seq, s.choice_row(), scratch)};
    }
  });
}

// Keeps the logits rows the sequence asked for, picks its next token when the step reached its last
// known token (and one more for each draft the token before it equals), and finishes it on eos,
// a stop id, length or context.
absl::Status Engine::Advance(const Slice& s, absl::Span<const int32_t> chosen, std::vector<Emitted>* emitted) {
  Sequence& seq = *s.seq;
  const int64_t vocab = plan_.model.vocab_size;
  auto row = [&](int64_t r) {
    const float* p = logits_buffer_.data() + (s.first_logit + r) * vocab;
    return std::vector<float>(p, p + vocab);
  };
  // Rows asked for and not kept before (a recompute after preemption passes over those); a draft's
  // row only once it is known to choose a token (below).
  const int64_t known = seq.length();
  for (size_t r = 0; r < s.logit_positions.size(); ++r) {
    const int64_t pos = s.logit_positions[r];
    if (pos < known && pos >= seq.logits_from && seq.KeepsLogits(pos)) seq.logits.push_back(row(static_cast<int64_t>(r)));
  }
  seq.cached += s.rows - s.drafts;
  seq.logits_from = std::max(seq.logits_from, seq.cached);
  if (options_.prefix_caching) RegisterFullBlocks(seq);
  if (seq.cached >= seq.prompt_size()) {
    ReleaseFollowers(seq);  // its prompt's full blocks are cached now
    for (ImageSpan& span : seq.images.spans) span.encoded.reset();  // in the KV cache now (and maybe the encoder cache)
  }
  if (!s.emits_token) return absl::OkStatus();
  const int64_t first = static_cast<int64_t>(s.logit_positions.size()) - 1 - s.drafts;  // the slice's choice row
  int64_t emits = 0;
  for (int64_t r = 0; r <= s.drafts; ++r) {
    if (r > 0) {  // row r was fed draft r - 1, which the token before it equals: its K/V stand
      ++seq.cached;
      seq.logits_from = seq.cached;
      if (options_.prefix_caching) RegisterFullBlocks(seq);
      if (seq.KeepsLogits(seq.cached - 1)) seq.logits.push_back(row(first + r));
    }
    int32_t token;
    if (!chosen.empty()) {
      token = chosen[static_cast<size_t>(r)];
    } else if (seq.sampler.has_value()) {
      std::vector<float> scratch;  // the penalties have every token before this one
      token = SampleOnHost(seq, s.first_logit + first + r, scratch);
    } else {
      token = next_buffer_[s.first_logit + first + r];
    }
    const std::vector<int64_t>& eos = plan_.model.eos_token_ids;
    const std::vector<int32_t>& stop = seq.request.stop_ids;
    const bool eos_token = seq.request.stop_on_eos && std::find(eos.begin(), eos.end(), token) != eos.end();
    const bool stop_token = std::find(stop.begin(), stop.end(), token) != stop.end();
    if (seq.constraint != nullptr && !eos_token && !stop_token && !seq.constraint->Accept(token)) {
      return absl::InternalError(absl::StrCat("request ", seq.id, ": token ", token, " is outside its constraint"));
    }
    seq.generated.push_back(token);
    ++emits;
    if (seq.penalties.has_value()) seq.penalties->Add(token);
    if (eos_token) {
      Finish(seq, FinishReason::kEos);
    } else if (stop_token) {
      Finish(seq, FinishReason::kStop);
    } else if (static_cast<int64_t>(seq.generated.size()) >= seq.request.max_new_tokens) {
      Finish(seq, FinishReason::kLength);
    } else if (seq.length() >= max_context_) {
      Finish(seq, FinishReason::kContext);
    }
    emitted->push_back({TokenEvent{seq.id, token, seq.finish != FinishReason::kNone}, s.first_logit + first + r});
    if (seq.finish != FinishReason::kNone || (r < s.drafts && token != seq.drafts[static_cast<size_t>(r)])) break;
  }
  if (s.drafts > 0) {
    // Draws where the logits are were peeked for every row: the stream moves on by the tokens used.
    if (!chosen.empty() && seq.sampler.has_value()) seq.sampler->SkipUniforms(emits);
    ++spec_drafts_;
    spec_draft_tokens_ += s.drafts;
    spec_accepted_tokens_ += emits - 1;
    last_step_.accepted_tokens += emits - 1;
    seq.drafts.clear();
  }
  // Once the constraint lets every token through for good it goes, and the next step chooses as an
  // unconstrained sequence would (its rows no longer come back).
  if (seq.constraint != nullptr && seq.constraint->Released()) ChooseSampling(seq);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<TokenEvent>> Engine::Step() {
  last_step_ = StepStats{};  // a step with nothing to run reports nothing
  Admit();
  std::vector<TokenEvent> events;
  ASSIGN_OR_RETURN(const std::vector<int64_t> tokens, PlanStep());
  if (running_.empty()) return events;
  StepStats stats;
  const auto start = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(StepImages(tokens, stats));
  const std::vector<Slice> slices = Schedule(tokens, stats);

  // Logits rows come back only for those who need them (kept rows: all of the slice's; sampling on
  // the host: the rows that choose); greedy tokens come from the device's argmax.
  std::vector<int64_t> logit_rows;
  bool need_next = false;
  for (const Slice& s : slices) {
    if (s.logit_positions.empty()) continue;
    const Request& r = s.seq->request;
    const int64_t count = static_cast<int64_t>(s.logit_positions.size());
    if (r.prompt_logits || r.keep_logits) {
      for (int64_t i = 0; i < count; ++i) logit_rows.push_back(s.first_logit + i);
    } else if (s.emits_token && s.seq->sampler.has_value() && !DrawsWhereLogitsAre(s)) {
      for (int64_t i = 0; i <= s.drafts; ++i) logit_rows.push_back(s.choice_row() + i);
    }
    need_next = need_next || (s.emits_token && !s.seq->sampler.has_value());
  }
  RETURN_IF_ERROR(backend_.Execute(batch_));
  PrepareConstraints(slices);  // the device runs the step meanwhile
  if (!logit_rows.empty()) {
    std::sort(logit_rows.begin(), logit_rows.end());  // slices take rows in order already; cheap either way
    RETURN_IF_ERROR(backend_.ReadLogitRows(batch_.num_logit_rows, logit_rows, &logits_buffer_));
  }
  if (need_next) RETURN_IF_ERROR(backend_.ReadNextTokens(batch_.num_logit_rows, &next_buffer_));
  // Sampling where the logits are: each sequence's next draw goes down with each row it chooses from
  // (a draft row's penalties count the drafts before it), only the ids come back.
  std::vector<std::vector<int32_t>> chosen(slices.size());
  std::vector<RowSampling> rows;
  std::vector<size_t> row_slice;
  std::deque<std::vector<ref::Penalty>> draft_penalties;  // alive through SampleRows
  std::deque<std::vector<uint64_t>> masks;                 // likewise
  std::vector<float> uniforms;
  for (size_t i = 0; i < slices.size(); ++i) {
    const Slice& s = slices[i];
    if (!s.emits_token || !DrawsWhereLogitsAre(s)) continue;
    Sequence& seq = *s.seq;
    const SamplingParams& p = seq.request.sampling;
    uniforms.clear();
    if (s.drafts == 0) {
      uniforms.push_back(seq.sampler->NextUniform());
    } else {
      seq.sampler->PeekUniforms(s.drafts + 1, &uniforms);  // Advance takes those it uses
    }
    for (int64_t r = 0; r <= s.drafts; ++r) {
      RowSampling row;
      row.row = s.choice_row() + r;
      row.params = {p.temperature, p.top_k, p.top_p, p.vocab_limit, uniforms[static_cast<size_t>(r)], p.min_p};
      // The sequence's penalties go down with the row: one entry per id that has any (the tracker's own).
      if (seq.penalties.has_value()) {
        if (r == 0) {
          row.penalties = seq.penalties->entries();
        } else {
          std::vector<ref::Penalty>& entries = draft_penalties.emplace_back();
          seq.penalties->EntriesAfter(absl::MakeConstSpan(seq.drafts).first(static_cast<size_t>(r)), &entries);
          row.penalties = entries;
        }
      }
      if (MasksWhereLogitsAre(s)) {  // row r's mask: the state drafts 0 .. r-1 lead to
        ConstraintBits(seq, static_cast<size_t>(r), &masks.emplace_back());
        row.allowed = masks.back();
      }
      rows.push_back(row);
      row_slice.push_back(i);
    }
  }
  if (!rows.empty()) {
    std::vector<int32_t> ids;
    RETURN_IF_ERROR(backend_.SampleRows(rows, &ids));
    for (size_t j = 0; j < ids.size(); ++j) chosen[row_slice[j]].push_back(ids[j]);
  }
  ChooseOnHost(slices, chosen);
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  last_step_ = stats;

  std::vector<LogprobRequest> logprob_rows;
  std::vector<Sequence*> logprob_seqs;
  std::vector<Emitted> emitted;
  for (size_t i = 0; i < slices.size(); ++i) {
    const Slice& s = slices[i];
    emitted.clear();
    RETURN_IF_ERROR(Advance(s, chosen[i], &emitted));
    for (const Emitted& e : emitted) {
      events.push_back(e.event);
      if (s.seq->request.logprobs < 0) continue;
      LogprobRequest r;
      r.row = e.row;
      r.token = e.event.token;
      r.top = s.seq->request.logprobs;
      r.vocab_limit = s.seq->request.sampling.vocab_limit;
      logprob_rows.push_back(r);
      logprob_seqs.push_back(s.seq);
    }
  }
  if (!logprob_rows.empty()) {  // only these numbers leave the device
    std::vector<TokenLogprobs> logprobs;
    RETURN_IF_ERROR(backend_.RowLogprobs(logprob_rows, &logprobs));
    for (size_t j = 0; j < logprobs.size(); ++j) logprob_seqs[j]->logprobs.push_back(std::move(logprobs[j]));
  }
  running_.erase(std::remove_if(running_.begin(), running_.end(),
                                [](const Sequence* s) { return s->finish != FinishReason::kNone; }),
                 running_.end());
  return events;
}

}  // namespace ag::runtime
