// Adapters from plan steps to the CUDA launchers, one per op, in a table
// indexed by OpId (a missing row fails to compile). Internal to the CUDA backend.
#ifndef AUTOGLM_RUNTIME_CUDA_STEP_H_
#define AUTOGLM_RUNTIME_CUDA_STEP_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "compiler/plan.h"
#include "kernels/cuda/allreduce.cuh"
#include "kernels/cuda/paged_kv.cuh"
#include "kernels/cuda/quant_linear.cuh"
#include "runtime/communicator.h"
#include "runtime/tensor_view.h"

namespace ag::runtime {

#define CUDA_RETURN_IF_ERROR(expr)                                                                   \
  do {                                                                                               \
    const cudaError_t ag_cuda_error_ = (expr);                                                       \
    if (ag_cuda_error_ != cudaSuccess) {                                                             \
      return absl::InternalError(absl::StrCat(#expr, ": ", cudaGetErrorString(ag_cuda_error_)));     \
    }                                                                                                \
  } while (false)

using CudaTensor = TensorView;

struct CudaStepArgs {
  const compiler::PlanStep* step = nullptr;
  std::vector<CudaTensor> operands, results;
  cuda::PagedKv kv;           // the step's KV state, when it has one
  float* kv_staging = nullptr;  // [T, 2 kv width] fp32, when the cache is 8-bit
  cuda::SeqBatch seqs;        // device pointers of the step's sequences
  const int32_t* slot_mapping = nullptr;
  int64_t max_context = 0;    // bound on the batch's context lengths (attention slicing)
  int64_t decode_seqs = 0;    // StepBatch::LeadingDecodeSeqs (attention: decode rows beside prefill)
  float* attention_workspace = nullptr;
  void* linear_scratch = nullptr;  // [T, max k] bf16, for the GEMM path's norm prologue
  void* gather_scratch = nullptr;  // [R, gathered width] bf16: all_gather's rank-major landing place
  // The step's matrix operand when it is stored quantized (its segments), else null; and the bf16
  // weight the prefill path dequantizes it into, when it has room.
  const std::vector<cuda::QuantSegment>* quant = nullptr;
  void* dequant_scratch = nullptr;
  size_t dequant_bytes = 0;
  void* order_scratch = nullptr;  // x in an act-order segment's input order, for the codes kernel
  size_t order_bytes = 0;
  // How the product rounds its input rows first (a W8A8 weight's input_activations), else none.
  ir::ActQuant input_quant = ir::ActQuant::kNone;
  Communicator* comm = nullptr;    // the tensor-parallel group, or null alone
  const cuda::PeerAllReduce* peer = nullptr;  // the one-shot all-reduce, when the group has one
  cudaStream_t stream = nullptr;

  int64_t Int(const char* name) const { return *ir::GetInt(step->attrs, name); }
  float Float(const char* name) const { return static_cast<float>(*ir::GetFloat(step->attrs, name)); }
  // The rotary positions operand `index` (M-RoPE's three streams when the step has mrope_section).
  cuda::RopePositions Positions(size_t index) const;
};

using CudaKernel = absl::Status (*)(const CudaStepArgs& args);
CudaKernel GetCudaKernel(ir::OpId op);

}  // namespace ag::runtime

#endif  // AUTOGLM_RUNTIME_CUDA_STEP_H_
