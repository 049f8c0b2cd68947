// Kernels over the vocabulary and over weights: greedy argmax, sampling with
// temperature, top-k and top-p, and the seeded random weight generator.
#ifndef AUTOGLM_KERNELS_CUDA_VOCAB_CUH_
#define AUTOGLM_KERNELS_CUDA_VOCAB_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ag::cuda {

// out[r] = index of the largest logit of row r (the first on ties). One block per row.
cudaError_t LaunchArgmax(const __nv_bfloat16* logits, int64_t rows, int64_t vocab, int32_t* out, cudaStream_t stream);

// One row to sample, and how (ref::SampleParams, plus the logits row and its penalties).
struct SampleRow {
  int32_t row = 0;  // of the logits
  int32_t top_k = 0;
  int32_t vocab_limit = 0;
  float temperature = 1.0f;
  float top_p = 1.0f;
  float uniform = 0.0f;
  int32_t penalty_begin = 0, penalty_count = 0;  // its entries of `penalties`
  float min_p = 0.0f;  // 0: off
  int64_t mask_begin = -1;  // its mask's first word in `masks` ((vocab + 63) / 64 words); -1: none
  // True when the row goes through the workspace (penalties, or a mask).
  __host__ __device__ bool Rewritten() const { return penalty_count > 0 || mask_begin >= 0; }
};
// ref::Penalty: the logit of `id` plus `bias`, divided (positive) or multiplied (negative) by
// `scale`, less `delta`. A row's entries have distinct ids.
struct SamplePenalty {
  int32_t id = 0;
  float delta = 0.0f;
  float scale = 1.0f;
  float bias = 0.0f;
};

// out[i] = ref::SampleFiltered of logits row rows[i].row with rows[i]'s
// parameters, after ref::ApplyPenalties with its penalty entries and with
// the ids its mask leaves out (a bit an id of `masks`, from mask_begin) at
// -inf (a row with either is copied to workspace row i, as float, and
// rewritten there; the logits stay as they are for logprobs): thresholds by
// radix select (no sort), then an inverse CDF in id order, all on the
// device. One block per entry; `rows`, `penalties`, `masks` and `workspace`
// are device memory. `workspace` ([count, vocab] floats) must be given when
// some row is Rewritten(), and null otherwise (it costs a kernel: the
// rewrite's own).
cudaError_t LaunchSampleRows(const __nv_bfloat16* logits, int64_t vocab, const SampleRow* rows, int64_t count,
                             const SamplePenalty* penalties, const uint64_t* masks, float* workspace, int32_t* out,
                             cudaStream_t stream);

// out[i] = center + half_width * (2u - 1) with u the i-th value of the
// counter-based generator (splitmix64) for (seed, stream): the same values
// as runtime::RandomWeights on the host, rounded to bf16.
// ref::LogProbs for each entry: the chosen token's log-probability and the
// `top` (<= kMaxTop) most likely ids with theirs, from logits row `row` over
// ids below vocab_limit (0: all). logprob[i]; top_ids / top_logprobs[i * kMaxTop + j].
struct LogprobRow {
  int32_t row = 0;
  int32_t token = 0;
  int32_t top = 0;
  int32_t vocab_limit = 0;
};
inline constexpr int kMaxTopLogprobs = 20;
cudaError_t LaunchLogprobs(const __nv_bfloat16* logits, int64_t vocab, const LogprobRow* rows, int64_t count,
                           float* logprob, int32_t* top_ids, float* top_logprobs, cudaStream_t stream);

cudaError_t LaunchFillRandom(__nv_bfloat16* out, int64_t n, uint64_t seed, uint64_t stream_id, float center,
                             float half_width, cudaStream_t stream);

}  // namespace ag::cuda

#endif  // AUTOGLM_KERNELS_CUDA_VOCAB_CUH_
