#include "kernels/cuda/linear_impl.cuh"
#include "kernels/cuda/norm.cuh"

namespace ag::cuda {

cudaError_t NormRowsInto(const LinearParams& p, cudaStream_t stream) {
  return LaunchRmsNorm(p.x, p.norm_w, p.m, p.k, p.eps, p.scratch, stream);
}

// AUTOGLM_SKINNY_STAGED=0 keeps one row on the GEMV, 2..32 rows on the register-fed skinny kernel and
// 33..64 on the wgmma GEMM (on Hopper; elsewhere on the register-fed kernel too).
bool StagedSkinnyEnabled() {
  static const bool enabled = SwitchedOn("AUTOGLM_SKINNY_STAGED");
  return enabled;
}

// AUTOGLM_SANDWICH_FOLD=0: a folded sandwich norm runs as rms_norm_residual's kernel, then the linear.
bool GemvFoldsPreNorm(const LinearParams& p) {
  static const bool enabled = SwitchedOn("AUTOGLM_SANDWICH_FOLD");
  return enabled && p.m == 1 && p.norm_w != nullptr && p.k <= kGemvSmemFloats;
}

namespace {

cudaError_t Dispatch(const LinearParams& p, cudaStream_t stream, LinearPath path) {
  if (p.m == 0 || p.n == 0) return cudaSuccess;
  if (p.k % 8 != 0) return cudaErrorInvalidValue;
  if (p.pre.y != nullptr && (path != LinearPath::kGemv || p.norm_w == nullptr || p.k > kGemvSmemFloats)) {
    return cudaErrorInvalidValue;
  }
  const bool pairs = p.epilogue == Epilogue::kSiluMul || p.epilogue == Epilogue::kQkvRope;
  if (pairs && p.n % 2 != 0) return cudaErrorInvalidValue;
  if (p.epilogue == Epilogue::kQkvRope && !QkvRopeValid(p)) return cudaErrorInvalidValue;
  switch (p.epilogue) {
    case Epilogue::kNone:
      return LaunchLinearFor<Epilogue::kNone>(p, stream, path);
    case Epilogue::kBias:
      return LaunchLinearFor<Epilogue::kBias>(p, stream, path);
    case Epilogue::kResidual:
      return LaunchLinearFor<Epilogue::kResidual>(p, stream, path);
    case Epilogue::kSiluMul:
      return LaunchLinearFor<Epilogue::kSiluMul>(p, stream, path);
    case Epilogue::kQkvRope:
      return LaunchLinearFor<Epilogue::kQkvRope>(p, stream, path);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t LaunchLinear(const LinearParams& p, cudaStream_t stream) {
  if (p.pre.y != nullptr) return Dispatch(p, stream, LinearPath::kGemv);
  LinearPath path = p.m <= kGemvMaxRows    ? LinearPath::kGemv
                    : p.m <= kSkinnyMaxRows ? LinearPath::kSkinny
                                            : LinearPath::kGemm;
  // One row over a narrow weight: the staged skinny kernel (linear_split.h, kStagedOneRowMaxN).
  if (path == LinearPath::kGemv && p.n <= kStagedOneRowMaxN && StagedSkinnyEnabled()) path = LinearPath::kSkinny;
  // 33-64 rows without the staged skinny kernel: the wgmma GEMM where it runs (linear_split.h's
  // measurements); the mma.sync one is not measured against the skinny kernel there.
  if (path == LinearPath::kSkinny && p.m > kSkinnyPreferredMaxRows && !StagedSkinnyEnabled() &&
      WgmmaGemmUsable(p, p.norm_w != nullptr ? p.scratch : p.x)) {
    path = LinearPath::kGemm;
  }
  return Dispatch(p, stream, path);
}
cudaError_t LaunchGemv(const LinearParams& p, cudaStream_t stream) { return Dispatch(p, stream, LinearPath::kGemv); }
cudaError_t LaunchSkinny(const LinearParams& p, cudaStream_t stream) {
  return Dispatch(p, stream, LinearPath::kSkinny);
}
cudaError_t LaunchSkinnyRegisters(const LinearParams& p, cudaStream_t stream) {
  return Dispatch(p, stream, LinearPath::kSkinnyRegisters);
}
cudaError_t LaunchGemm(const LinearParams& p, cudaStream_t stream) { return Dispatch(p, stream, LinearPath::kGemm); }
cudaError_t LaunchGemmMmaSync(const LinearParams& p, cudaStream_t stream) {
  return Dispatch(p, stream, LinearPath::kGemmMmaSync);
}
cudaError_t LaunchGemmTileColumns(const LinearParams& p, int tile_n, cudaStream_t stream) {
  switch (tile_n) {
    case 128:
      return Dispatch(p, stream, LinearPath::kGemmNarrow);
    case 192:
      return Dispatch(p, stream, LinearPath::kGemm192);
    case 256:
      return Dispatch(p, stream, LinearPath::kGemmWide);
  }
  return cudaErrorInvalidValue;
}

}  // namespace ag::cuda
