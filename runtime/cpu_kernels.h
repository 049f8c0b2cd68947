// Adapters from plan steps to the reference kernels, one per op, in a table
// indexed by OpId (a missing row fails to compile).
#ifndef AUTOGLM_RUNTIME_CPU_KERNELS_H_
#define AUTOGLM_RUNTIME_CPU_KERNELS_H_

#include <cstdint>
#include <vector>

#include "compiler/plan.h"
#include "kernels/ref/ref.h"
#include "runtime/communicator.h"
#include "runtime/tensor_view.h"

namespace ag::runtime {

using CpuTensor = TensorView;

struct CpuStepArgs {
  const compiler::PlanStep* step = nullptr;
  std::vector<CpuTensor> operands;
  std::vector<CpuTensor> results;
  ref::KvCache kv;     // the step's KV state, when it has one
  ref::SeqBatch seqs;  // the step's sequences
  const int32_t* slot_mapping = nullptr;
  Communicator* comm = nullptr;        // the tensor-parallel group, for collectives
  ref::InputQuant input_quant = ref::InputQuant::kNone;  // a W8A8 weight's: how the product's input is rounded
  bool bf16_storage = false;  // a bf16 plan: what a step stores is rounded (a fused step's inner values too)
  mutable absl::Status status;         // a collective's failure (the others cannot fail)

  int64_t Int(const char* name) const;
  float Float(const char* name) const;
  // The rotary positions operand `index` of the step (M-RoPE's three streams when it has mrope_section).
  ref::RotaryPositions Positions(size_t index) const;
  // Optional trailing operand (a bias), or null.
  const float* Optional(size_t index) const {
    return index < operands.size() ? operands[index].f() : nullptr;
  }
};

using CpuKernel = void (*)(const CpuStepArgs& args);

CpuKernel GetCpuKernel(ir::OpId op);

}  // namespace ag::runtime

#endif  // AUTOGLM_RUNTIME_CPU_KERNELS_H_
