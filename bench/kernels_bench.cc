// Kernel microbenchmarks on the GPU, at GLM-4-9B shapes, beside cuBLAS.
//
// Each case fills its operands with random bf16 values (never zeros), rotates
// between enough copies of the weights to defeat the 60 MB L2, times a batch
// of launches with CUDA events and reports the rate against the measured
// ceilings: 4.45 TB/s read bandwidth, 790 TFLOP/s bf16. cuBLAS is loaded with
// dlopen, so the benchmark still runs (without its rows) where it is absent.
#include <benchmark/benchmark.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <string>
#include <vector>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/linear.cuh"
#include "kernels/cuda/norm.cuh"
#include "kernels/cuda/vision.cuh"
#include "kernels/cuda/vocab.cuh"

namespace {

using bf16 = __nv_bfloat16;
constexpr double kBandwidth = 4.45e12;  // bytes/s, measured (../shared/DEVICE.md)
constexpr double kTensorRate = 790e12;  // bf16 FLOP/s, measured
constexpr int kLaunches = 20;           // per timed batch
constexpr int kIterations = 10;         // batches per case: 200 launches, well under a second for the largest

bool HaveGpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

bf16* RandomDevice(int64_t n, uint64_t seed, float half_width) {
  bf16* p = nullptr;
  if (cudaMalloc(&p, static_cast<size_t>(n) * 2) != cudaSuccess) return nullptr;
  ag::cuda::LaunchFillRandom(p, n, seed, 0, 0.0f, half_width, nullptr);
  return p;
}

// A copy of `v` on the device; the caller frees it.
int32_t* DeviceInts(const std::vector<int32_t>& v) {
  int32_t* d = nullptr;
  cudaMalloc(&d, v.size() * 4);
  cudaMemcpy(d, v.data(), v.size() * 4, cudaMemcpyHostToDevice);
  return d;
}

// Random copies of an n x k weight, enough (over 180 MB together) that cycling through them misses the 60 MB L2.
class RotatingWeights {
 public:
  RotatingWeights(int64_t n, int64_t k) {
    const int64_t bytes = n * k * 2;
    const int copies = static_cast<int>(std::max<int64_t>(1, (180LL << 20) / bytes + 1));
    for (int c = 0; c < copies; ++c) copies_.push_back(RandomDevice(n * k, 10 + c, 0.02f));
  }
  ~RotatingWeights() {
    for (bf16* w : copies_) cudaFree(w);
  }
  const bf16* operator[](int i) const { return copies_[static_cast<size_t>(i) % copies_.size()]; }

 private:
  std::vector<bf16*> copies_;
};

// Times `launch(i)` kLaunches times per iteration with CUDA events. The
// recorded (manual) time is the whole batch's, so Google Benchmark's time
// budget and the fixed iteration count (kIterations) bound the wall time;
// "us" is the time of one launch. The first failing launch (a bad status, or
// an error the device reports) skips the case with that error: no garbage rows.
template <typename F>
void TimeLaunches(benchmark::State& state, F launch, double bytes_per_launch, double flops_per_launch = 0) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaError_t error = cudaSuccess;
  for (int i = 0; i < 3 && error == cudaSuccess; ++i) error = launch(i);  // warm-up
  if (error == cudaSuccess) error = cudaDeviceSynchronize();
  int round = 0;
  double total_ms = 0;
  for (auto _ : state) {
    if (error != cudaSuccess) break;
    cudaEventRecord(start);
    for (int i = 0; i < kLaunches && error == cudaSuccess; ++i) error = launch(round * kLaunches + i);
    cudaEventRecord(stop);
    if (error == cudaSuccess) error = cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    state.SetIterationTime(ms / 1e3);
    total_ms += ms;
    ++round;
  }
  if (error == cudaSuccess) error = cudaGetLastError();
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (error != cudaSuccess || round == 0) {
    return state.SkipWithError(error != cudaSuccess ? cudaGetErrorString(error) : "no iteration ran");
  }
  // The rates and the floor: the slower of streaming the bytes and doing the FLOPs at the ceilings.
  const double us = total_ms * 1e3 / (round * kLaunches);
  state.counters["us"] = us;
  state.counters["GB/s"] = bytes_per_launch / (us * 1e-6) * 1e-9;
  if (flops_per_launch > 0) state.counters["TFLOP/s"] = flops_per_launch / (us * 1e-6) * 1e-12;
  state.counters["floor_us"] = std::max(bytes_per_launch / kBandwidth, flops_per_launch / kTensorRate) * 1e6;
}

struct Shape {
  const char* name;
  int64_t n, k;
  ag::cuda::Epilogue epilogue;
  bool norm;
};
// GLM-4-9B's decode projections, as the fused plan runs them.
const Shape kShapes[] = {
    {"qkv_4608x4096", 4608, 4096, ag::cuda::Epilogue::kQkvRope, true},
    {"o_proj_4096x4096", 4096, 4096, ag::cuda::Epilogue::kResidual, false},
    {"gate_up_27392x4096", 27392, 4096, ag::cuda::Epilogue::kSiluMul, true},
    {"down_4096x13696", 4096, 13696, ag::cuda::Epilogue::kResidual, false},
    {"lm_head_151552x4096", 151552, 4096, ag::cuda::Epilogue::kNone, true},
};

// Our linear kernel (GEMV at m = 1, skinny tensor-core kernel to 64, GEMM above: wgmma on Hopper,
// or the mma.sync GEMM when `mma_sync`) on shape `index`, m rows.
// kNarrow / k192 / kWide: the wgmma GEMM with 128-, 192- or 256-wide tiles, whichever the shape would choose;
// kSkinnyRegisters: the register-fed skinny kernel where LaunchLinear takes the staged one; kGemv: the
// GEMV where LaunchLinear takes the staged skinny kernel for one row (N <= kStagedOneRowMaxN).
enum class LinearMode { kOurs, kMmaSync, kNormApart, kWgmma, kNarrow, k192, kWide, kSkinnyRegisters, kGemv };

void LinearBench(benchmark::State& state, LinearMode mode) {
  const bool mma_sync = mode == LinearMode::kMmaSync;
  if (!HaveGpu()) return state.SkipWithError("no GPU");
  const Shape& s = kShapes[state.range(0)];
  const int64_t m = state.range(1);
  const RotatingWeights weights(s.n, s.k);
  bf16* x = RandomDevice(m * s.k, 1, 1.0f);
  bf16* norm = RandomDevice(s.k, 2, 1.0f);
  bf16* bias = RandomDevice(s.n, 3, 0.1f);
  bf16* y = RandomDevice(m * s.n, 4, 1.0f);
  bf16* scratch = RandomDevice(m * s.k, 5, 1.0f);
  const int64_t kv_blocks = 64;
  bf16* kc = RandomDevice(kv_blocks * 16 * 256, 6, 1.0f);
  bf16* vc = RandomDevice(kv_blocks * 16 * 256, 7, 1.0f);
  std::vector<int32_t> host_pos(m), host_slots(m);
  for (int64_t i = 0; i < m; ++i) {
    host_pos[i] = static_cast<int32_t>(100 + i);
    host_slots[i] = static_cast<int32_t>(i % (kv_blocks * 16));
  }
  int32_t *pos = nullptr, *slots = nullptr;
  cudaMalloc(&pos, m * 4);
  cudaMalloc(&slots, m * 4);
  cudaMemcpy(pos, host_pos.data(), m * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(slots, host_slots.data(), m * 4, cudaMemcpyHostToDevice);
  ag::cuda::LinearParams p;
  p.x = x;
  p.m = m;
  p.n = s.n;
  p.k = s.k;
  p.y = y;
  p.residual = y;
  p.norm_w = s.norm ? norm : nullptr;
  p.eps = 1e-5f;
  p.epilogue = s.epilogue;
  p.scratch = scratch;
  if (s.epilogue == ag::cuda::Epilogue::kQkvRope) {
    p.bias = bias;
    p.qkv = {{pos, m}, slots, {kc, vc, 16, 2, 128}, 32, 2, 128,
             ag::cuda::RopeFrequencies::Of(64, 10000.0f)};
  }
  TimeLaunches(
      state,
      [&](int i) {
        p.w = weights[i];
        if (mode == LinearMode::kNormApart && p.norm_w != nullptr) {  // the norm's own launch, then no prologue
          const cudaError_t e = ag::cuda::LaunchRmsNorm(x, norm, m, s.k, p.eps, scratch, nullptr);
          if (e != cudaSuccess) return e;
          ag::cuda::LinearParams q = p;
          q.x = scratch;
          q.norm_w = nullptr;
          return ag::cuda::LaunchLinear(q, nullptr);
        }
        if (mode == LinearMode::kWgmma) return ag::cuda::LaunchGemm(p, nullptr);
        if (mode == LinearMode::kSkinnyRegisters) return ag::cuda::LaunchSkinnyRegisters(p, nullptr);
        if (mode == LinearMode::kGemv) return ag::cuda::LaunchGemv(p, nullptr);
        if (mode == LinearMode::kNarrow || mode == LinearMode::k192 || mode == LinearMode::kWide) {
          const int tile_n = mode == LinearMode::kNarrow ? 128 : mode == LinearMode::k192 ? 192 : 256;
          return ag::cuda::LaunchGemmTileColumns(p, tile_n, nullptr);
        }
        return mma_sync ? ag::cuda::LaunchGemmMmaSync(p, nullptr) : ag::cuda::LaunchLinear(p, nullptr);
      },
      static_cast<double>(s.n * s.k * 2 + m * s.k * 2 + m * s.n * 2), 2.0 * m * s.n * s.k);
  state.SetLabel(std::string(mma_sync                          ? "mma.sync "
                             : mode == LinearMode::kNormApart ? "norm apart "
                             : mode == LinearMode::kWgmma     ? "wgmma GEMM "
                             : mode == LinearMode::kNarrow    ? "128-wide tiles "
                             : mode == LinearMode::k192       ? "192-wide tiles "
                             : mode == LinearMode::kWide      ? "256-wide tiles "
                             : mode == LinearMode::kSkinnyRegisters ? "register-fed skinny "
                             : mode == LinearMode::kGemv      ? "GEMV "
                                                              : "") +
                 s.name);
  for (void* q : {static_cast<void*>(x), static_cast<void*>(norm), static_cast<void*>(bias), static_cast<void*>(y),
                  static_cast<void*>(scratch), static_cast<void*>(kc), static_cast<void*>(vc), static_cast<void*>(pos),
                  static_cast<void*>(slots)}) {
    cudaFree(q);
  }
}

// cuBLAS, the yardstick: the same product through cublasGemmEx.
struct Cublas {
  using CreateFn = cublasStatus_t (*)(cublasHandle_t*);
  using GemmExFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                      const void*, cudaDataType, int, const void*, cudaDataType, int, const void*,
                                      void*, cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
  CreateFn create = nullptr;
  GemmExFn gemm = nullptr;
  cublasHandle_t handle = nullptr;
  Cublas() {
    void* lib = dlopen("libcublas.so.13", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) lib = dlopen("libcublas.so", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return;
    create = reinterpret_cast<decltype(create)>(dlsym(lib, "cublasCreate_v2"));
    gemm = reinterpret_cast<decltype(gemm)>(dlsym(lib, "cublasGemmEx"));
    if (create == nullptr || gemm == nullptr || create(&handle) != CUBLAS_STATUS_SUCCESS) gemm = nullptr;
  }
};

void BM_Cublas(benchmark::State& state) {
  if (!HaveGpu()) return state.SkipWithError("no GPU");
  static Cublas cublas;
  if (cublas.gemm == nullptr) return state.SkipWithError("cuBLAS not found");
  const Shape& s = kShapes[state.range(0)];
  const int64_t m = state.range(1);
  const RotatingWeights weights(s.n, s.k);
  bf16* x = RandomDevice(m * s.k, 1, 1.0f);
  bf16* y = RandomDevice(m * s.n, 4, 1.0f);
  const float alpha = 1.0f, beta = 0.0f;
  TimeLaunches(
      state,
      [&](int i) {
        // Row-major y[m, n] = x[m, k] W[n, k]^T is column-major y^T = W x^T.
        const cublasStatus_t st = cublas.gemm(
            cublas.handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(s.n), static_cast<int>(m),
            static_cast<int>(s.k), &alpha, weights[i], CUDA_R_16BF, static_cast<int>(s.k), x, CUDA_R_16BF,
            static_cast<int>(s.k), &beta, y, CUDA_R_16BF, static_cast<int>(s.n), CUBLAS_COMPUTE_32F,
            CUBLAS_GEMM_DEFAULT);
        return st == CUBLAS_STATUS_SUCCESS ? cudaPeekAtLastError() : cudaErrorUnknown;
      },
      static_cast<double>(s.n * s.k * 2 + m * s.k * 2 + m * s.n * 2), 2.0 * m * s.n * s.k);
  state.SetLabel(std::string("cublas ") + s.name);
  cudaFree(x);
  cudaFree(y);
}

void BM_Linear(benchmark::State& state) { LinearBench(state, LinearMode::kOurs); }
void BM_GemmMmaSync(benchmark::State& state) { LinearBench(state, LinearMode::kMmaSync); }
// The projections with a norm prologue, the norm in a launch of its own instead: is folding it worth it?
void BM_LinearNormApart(benchmark::State& state) { LinearBench(state, LinearMode::kNormApart); }
// The wgmma GEMM at the skinny kernel's batches (16-64 rows): would it stream the weights faster?
void BM_GemmSmallM(benchmark::State& state) { LinearBench(state, LinearMode::kWgmma); }
// The register-fed skinny kernel at the staged one's batches (2-64 rows): does the pipeline stream
// the weights faster, as linear_skinny_staged.cuh predicts?
void BM_SkinnyRegisters(benchmark::State& state) { LinearBench(state, LinearMode::kSkinnyRegisters); }
// The GEMV at one row, beside BM_Linear's: is the staged kernel faster for the narrow weights?
void BM_Gemv(benchmark::State& state) { LinearBench(state, LinearMode::kGemv); }
// The wgmma GEMM's tile widths side by side (linear_split.h's WgmmaTileColumns predicts which wins
// per shape: are 192- and 256-wide k-tiles 1.3 and 1.6 narrow ones?).
void BM_GemmNarrowTiles(benchmark::State& state) { LinearBench(state, LinearMode::kNarrow); }
void BM_Gemm192Tiles(benchmark::State& state) { LinearBench(state, LinearMode::k192); }
void BM_GemmWideTiles(benchmark::State& state) { LinearBench(state, LinearMode::kWide); }

void LinearArgs(benchmark::internal::Benchmark* b) {
  for (int shape = 0; shape < 5; ++shape) {
    for (int m : {1, 2, 8, 16, 32, 64, 512}) b->Args({shape, m});  // GEMV, skinny (4 tile sizes), GEMM
  }
  for (int shape = 0; shape < 4; ++shape) b->Args({shape, 4096});  // a long prompt's GEMMs (not the LM head's)
}
// The two GEMMs side by side: a 512-token prompt and a 4096-token one.
void GemmArgs(benchmark::internal::Benchmark* b) {
  for (int shape = 0; shape < 4; ++shape) {
    for (int m : {512, 4096}) b->Args({shape, m});
  }
}
BENCHMARK(BM_Linear)->Apply(LinearArgs)->UseManualTime()->Iterations(kIterations)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Cublas)->Apply(LinearArgs)->UseManualTime()->Iterations(kIterations)->Unit(benchmark::kMicrosecond);
void NormApartArgs(benchmark::internal::Benchmark* b) {
  for (int shape : {0, 2, 4}) {  // qkv, gate_up, the LM head
    for (int m : {2, 8, 16, 32, 64, 512}) b->Args({shape, m});
  }
}
void SmallMArgs(benchmark::internal::Benchmark* b) {
  for (int shape = 0; shape < 5; ++shape) {
    for (int m : {16, 32, 64}) b->Args({shape, m});
  }
}
void StagedArgs(benchmark::internal::Benchmark* b) {
  for (int shape = 0; shape < 5; ++shape) {
    for (int m : {2, 8, 16, 32, 64}) b->Args({shape, m});
  }
}
void OneRowArgs(benchmark::internal::Benchmark* b) {
  for (int shape = 0; shape < 5; ++shape) b->Args({shape, 1});
}
BENCHMARK(BM_Gemv)->Apply(OneRowArgs)->UseManualTime()->Iterations(kIterations)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SkinnyRegisters)
    ->Apply(StagedArgs)
    ->UseManualTime()
    ->Iterations(kIterations)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_GemmSmallM)->Apply(SmallMArgs)->UseManualTime()->Iterations(kIterations)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_LinearNormApart)
    ->Apply(NormApartArgs)
    ->UseManualTime()
    ->Iterations(kIterations)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_GemmMmaSync)->Apply(GemmArgs)->UseManualTime()->Iterations(kIterations)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_GemmNarrowTiles)->Apply(GemmArgs)->UseManualTime()->Iterations(kIterations)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Gemm192Tiles)->Apply(GemmArgs)->UseManualTime()->Iterations(kIterations)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_GemmWideTiles)->Apply(GemmArgs)->UseManualTime()->Iterations(kIterations)->Unit(benchmark::kMicrosecond);

// Prefill attention on the tensor cores (flash_attention.cuh). Argument 0: GLM-4-9B's decoder
// (32 heads over 2 KV heads, causal over the paged cache) for a prompt of `rows` tokens; 1:
// GLM-4.1V's vision tower (12 heads, one image of `rows` patches, no mask). FLOPs: 4 rows keys d
// per head, halved when causal.
// Prefill attention at GLM-4-9B's and the GLM-4.1V vision tower's geometry. range(0): 0 a
// decoder prompt (causal over the paged cache), 1 the vision tower's segment (non-causal), 2 the
// phone agent's step: `rows` new tokens after 2,000 cached ones. AUTOGLM_WGMMA_FLASH=0 measures the
// mma.sync kernel instead of the wgmma one.
void BM_PrefillAttention(benchmark::State& state) {
  if (!HaveGpu()) return state.SkipWithError("no GPU");
  const bool vision = state.range(0) == 1;
  const int64_t rows = state.range(1), cached = state.range(0) == 2 ? 2000 : 0, context = rows + cached;
  const int64_t d = 128, heads = vision ? 12 : 32, kv_heads = vision ? 12 : 2, block = 16;
  const int64_t blocks = (context + block - 1) / block, width = heads * d, kv_width = kv_heads * d;
  const int64_t kv_rows = vision ? rows : blocks * block;
  bf16* q = RandomDevice(rows * width, 1, 1.0f);
  bf16* k = RandomDevice(kv_rows * kv_width, 2, 1.0f);
  bf16* v = RandomDevice(kv_rows * kv_width, 3, 1.0f);
  bf16* out = RandomDevice(rows * width, 4, 1.0f);
  std::vector<int32_t> offsets = {0, static_cast<int32_t>(rows)}, lens = {static_cast<int32_t>(context)},
                       tables(blocks);
  for (int64_t i = 0; i < blocks; ++i) tables[i] = static_cast<int32_t>((i * 7919) % blocks);
  int32_t* doff = DeviceInts(offsets);
  int32_t* dlen = DeviceInts(lens);
  int32_t* dtab = DeviceInts(tables);
  ag::cuda::PagedKv cache{k, v, block, kv_heads, d};
  cache.slots = kv_rows;
  const ag::cuda::SeqBatch batch{doff, dlen, dtab, 1, blocks};
  const ag::cuda::AttentionShape shape{rows, heads, context};
  // Causal: row i sees cached + i + 1 keys.
  const double pairs = vision ? 1.0 * rows * rows : 1.0 * rows * cached + 0.5 * rows * (rows + 1);
  const double flops = 4.0 * pairs * d * heads;
  TimeLaunches(
      state,
      [&](int) {
        return vision ? ag::cuda::LaunchSegmentAttention(q, k, v, doff, 1, rows, heads, d, out, nullptr)
                      : ag::cuda::LaunchPagedAttention(q, shape, cache, batch, nullptr, out, nullptr);
      },
      static_cast<double>((2 * rows * width + 2 * kv_rows * kv_width) * 2), flops);
  state.SetLabel(vision ? "vision segment, 12 heads" : cached > 0 ? "decoder causal after 2000 cached, 32/2 heads"
                                                                   : "decoder causal, 32/2 heads");
  for (void* p : {static_cast<void*>(q), static_cast<void*>(k), static_cast<void*>(v), static_cast<void*>(out),
                  static_cast<void*>(doff), static_cast<void*>(dlen), static_cast<void*>(dtab)}) {
    cudaFree(p);
  }
}
BENCHMARK(BM_PrefillAttention)
    ->Args({0, 512})
    ->Args({0, 4096})
    ->Args({2, 3655})
    ->Args({1, 13416})
    ->UseManualTime()
    ->Iterations(kIterations)
    ->Unit(benchmark::kMicrosecond);

// A mixed step at GLM-4-9B's geometry: 31 decode rows at context 4,096 scheduled first, then a
// 512-token prompt. range(0) 1: the decode rows on the decode kernels (AttentionShape::decode_seqs,
// as the runtime passes it), 0: every sequence on flash (a 128-row block a decode row and head).
void BM_MixedAttention(benchmark::State& state) {
  if (!HaveGpu()) return state.SkipWithError("no GPU");
  const int64_t decode = 31, context = 4096, prompt = 512, d = 128, heads = 32, kv_heads = 2, block = 16;
  const int64_t rows = decode + prompt, seqs = decode + 1, max_blocks = context / block;
  const int64_t pool = decode * max_blocks + prompt / block, width = heads * d, kv_width = kv_heads * d;
  bf16* q = RandomDevice(rows * width, 1, 1.0f);
  bf16* k = RandomDevice(pool * block * kv_width, 2, 1.0f);
  bf16* v = RandomDevice(pool * block * kv_width, 3, 1.0f);
  bf16* out = RandomDevice(rows * width, 4, 1.0f);
  std::vector<int32_t> offsets(seqs + 1), lens(seqs), tables(seqs * max_blocks, 0);
  for (int64_t s = 0; s <= decode; ++s) offsets[s] = static_cast<int32_t>(s);
  offsets[seqs] = static_cast<int32_t>(rows);
  for (int64_t s = 0; s < seqs; ++s) {
    lens[s] = static_cast<int32_t>(s < decode ? context : prompt);
    for (int64_t b = 0; b < (lens[s] + block - 1) / block; ++b) {
      tables[s * max_blocks + b] = static_cast<int32_t>((s * max_blocks + b) * 7919 % pool);
    }
  }
  int32_t* doff = DeviceInts(offsets);
  int32_t* dlen = DeviceInts(lens);
  int32_t* dtab = DeviceInts(tables);
  ag::cuda::PagedKv cache{k, v, block, kv_heads, d};
  cache.slots = pool * block;
  const ag::cuda::SeqBatch batch{doff, dlen, dtab, seqs, max_blocks};
  const ag::cuda::AttentionShape shape{rows, heads, context, state.range(0) == 1 ? decode : 0};
  float* workspace = nullptr;
  cudaMalloc(&workspace, ag::cuda::PagedAttentionWorkspace(shape, kv_heads, d) * 4);
  TimeLaunches(
      state, [&](int) { return ag::cuda::LaunchPagedAttention(q, shape, cache, batch, workspace, out, nullptr); },
      static_cast<double>((decode * context + prompt) * kv_width * 2 * 2));
  state.SetLabel(state.range(0) == 1 ? "decode rows on the decode kernels" : "every row on flash");
  for (void* p : {static_cast<void*>(q), static_cast<void*>(k), static_cast<void*>(v), static_cast<void*>(out),
                  static_cast<void*>(doff), static_cast<void*>(dlen), static_cast<void*>(dtab),
                  static_cast<void*>(workspace)}) {
    cudaFree(p);
  }
}
BENCHMARK(BM_MixedAttention)->Arg(0)->Arg(1)->UseManualTime()->Iterations(kIterations)->Unit(benchmark::kMicrosecond);

// Decode attention at GLM-4-9B's geometry: one token per sequence against `context` cached tokens.
void BM_DecodeAttention(benchmark::State& state) {
  if (!HaveGpu()) return state.SkipWithError("no GPU");
  const int64_t seqs = state.range(0), context = state.range(1), block = 16, heads = 32, kv_heads = 2, d = 128;
  const int64_t blocks_per_seq = context / block, pool = seqs * blocks_per_seq;
  bf16* kc = RandomDevice(pool * block * kv_heads * d, 1, 1.0f);
  bf16* vc = RandomDevice(pool * block * kv_heads * d, 2, 1.0f);
  bf16* q = RandomDevice(seqs * heads * d, 3, 1.0f);
  bf16* out = RandomDevice(seqs * heads * d, 4, 1.0f);
  std::vector<int32_t> offsets(seqs + 1), lens(seqs, static_cast<int32_t>(context)), tables(pool);
  for (int64_t s = 0; s <= seqs; ++s) offsets[s] = static_cast<int32_t>(s);
  for (int64_t i = 0; i < pool; ++i) tables[i] = static_cast<int32_t>((i * 7919) % pool);
  int32_t* doff = DeviceInts(offsets);
  int32_t* dlen = DeviceInts(lens);
  int32_t* dtab = DeviceInts(tables);
  const ag::cuda::AttentionShape shape{seqs, heads, context};
  float* workspace = nullptr;
  cudaMalloc(&workspace, ag::cuda::PagedAttentionWorkspace(shape, kv_heads, d) * 4);
  const ag::cuda::PagedKv cache{kc, vc, block, kv_heads, d};
  const ag::cuda::SeqBatch batch{doff, dlen, dtab, seqs, blocks_per_seq};
  TimeLaunches(
      state, [&](int) { return ag::cuda::LaunchPagedAttention(q, shape, cache, batch, workspace, out, nullptr); },
      static_cast<double>(seqs * context * kv_heads * d * 2 * 2));
  for (void* p : {static_cast<void*>(kc), static_cast<void*>(vc), static_cast<void*>(q), static_cast<void*>(out),
                  static_cast<void*>(doff), static_cast<void*>(dlen), static_cast<void*>(dtab),
                  static_cast<void*>(workspace)}) {
    cudaFree(p);
  }
}
BENCHMARK(BM_DecodeAttention)
    ->Args({1, 512})
    ->Args({1, 1024})
    ->Args({1, 4096})
    ->Args({1, 32768})
    ->Args({8, 4096})
    ->Args({32, 512})
    ->UseManualTime()
    ->Iterations(kIterations)
    ->Unit(benchmark::kMicrosecond);

void BM_RmsNormResidual(benchmark::State& state) {
  if (!HaveGpu()) return state.SkipWithError("no GPU");
  const int64_t rows = state.range(0), n = 4096;
  bf16* x = RandomDevice(rows * n, 1, 1.0f);
  bf16* r = RandomDevice(rows * n, 2, 1.0f);
  bf16* w = RandomDevice(n, 3, 1.0f);
  TimeLaunches(
      state, [&](int) { return ag::cuda::LaunchRmsNormResidual(x, w, r, rows, n, 1e-5f, r, nullptr); },
      static_cast<double>(rows * n * 2 * 3));
  cudaFree(x);
  cudaFree(r);
  cudaFree(w);
}
BENCHMARK(BM_RmsNormResidual)->Arg(1)->Arg(512)->UseManualTime()->Iterations(kIterations)->Unit(benchmark::kMicrosecond);

// The sandwich norm after attention and the gate/up projection at one row (GLM-4.1V's and
// GLM-4-0414's decode, GLM-4-9B's shape): /0 apart (rms_norm_residual's kernel, then the GEMV with
// its norm prologue), /1 folded into the GEMV's prologue (residual_norm_gate_up_silu). The
// difference is what the fold saves a layer; weights rotate as BM_Gemv's do.
void BM_SandwichNormGateUp(benchmark::State& state) {
  if (!HaveGpu()) return state.SkipWithError("no GPU");
  const bool folded = state.range(0) == 1;
  const Shape& s = kShapes[2];
  const RotatingWeights weights(s.n, s.k);
  bf16* y_attn = RandomDevice(s.k, 1, 1.0f);
  bf16* residual = RandomDevice(s.k, 2, 1.0f);
  bf16* post_w = RandomDevice(s.k, 3, 1.0f);
  bf16* norm_w = RandomDevice(s.k, 4, 1.0f);
  bf16* h = RandomDevice(s.k, 5, 1.0f);
  bf16* out = RandomDevice(s.n / 2, 6, 1.0f);
  ag::cuda::LinearParams p;
  p.m = 1;
  p.n = s.n;
  p.k = s.k;
  p.norm_w = norm_w;
  p.eps = 1e-5f;
  p.epilogue = s.epilogue;
  p.y = out;
  TimeLaunches(
      state,
      [&](int i) {
        p.w = weights[i];
        if (folded) {
          p.pre = {y_attn, post_w, residual, 1e-5f, h};
          return ag::cuda::LaunchGemv(p, nullptr);
        }
        const cudaError_t e = ag::cuda::LaunchRmsNormResidual(y_attn, post_w, residual, 1, s.k, 1e-5f, h, nullptr);
        if (e != cudaSuccess) return e;
        p.x = h;
        return ag::cuda::LaunchGemv(p, nullptr);
      },
      static_cast<double>(s.n * s.k * 2 + s.k * 2 * 5 + s.n), 2.0 * s.n * s.k);
  state.SetLabel(folded ? "folded into the GEMV" : "rms_norm_residual, then the GEMV");
  for (bf16* q : {y_attn, residual, post_w, norm_w, h, out}) cudaFree(q);
}
BENCHMARK(BM_SandwichNormGateUp)->Arg(0)->Arg(1)->UseManualTime()->Iterations(kIterations)->Unit(benchmark::kMicrosecond);

void BM_Argmax(benchmark::State& state) {
  if (!HaveGpu()) return state.SkipWithError("no GPU");
  const int64_t rows = state.range(0), vocab = 151552;
  bf16* logits = RandomDevice(rows * vocab, 1, 3.0f);
  int32_t* out = nullptr;
  cudaMalloc(&out, rows * 4);
  TimeLaunches(
      state, [&](int) { return ag::cuda::LaunchArgmax(logits, rows, vocab, out, nullptr); },
      static_cast<double>(rows * vocab * 2));
  cudaFree(logits);
  cudaFree(out);
}
BENCHMARK(BM_Argmax)->Arg(1)->Arg(32)->UseManualTime()->Iterations(kIterations)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
