// Tensor parallelism on the GPU: NCCL at tp = the number of visible GPUs (on
// a one-GPU machine a one-rank communicator, and plans that keep their
// collectives at tp 1, so that init, collectives captured in CUDA graphs and
// teardown all run). Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>
#include <tuple>

#include "kernels/cuda/allreduce.cuh"
#include "runtime/cuda_backend.h"
#include "runtime/nccl_communicator.h"
#include "runtime/tp_backend.h"
#include "tests/gpu/gpu_testing.h"
#include "tests/testing/engine_runner.h"

namespace ag {
namespace {

int VisibleGpus() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

std::shared_ptr<runtime::NcclGroup> Group(int ranks) {
  runtime::NcclGroupOptions o;
  for (int d = 0; d < ranks; ++d) o.devices.push_back(d);
  absl::StatusOr<std::unique_ptr<runtime::NcclGroup>> group = runtime::NcclGroup::Create(o);
  EXPECT_TRUE(group.ok()) << group.status();
  return group.ok() ? std::shared_ptr<runtime::NcclGroup>(std::move(*group)) : nullptr;
}

// Every rank all-reduces (rank + 1) and all-gathers its rank inside one captured graph, replayed twice.
TEST(GpuTensorParallel, NcclCollectivesInsideACapturedGraph) {
  SKIP_WITHOUT_GPU();
  const int n = VisibleGpus();
  std::shared_ptr<runtime::NcclGroup> group = Group(n);
  ASSERT_NE(group, nullptr);
  constexpr int64_t kCount = 4096;
  std::vector<absl::Status> results(n);
  std::vector<std::vector<float>> sums(n), gathered(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto fail = [&](const char* what) { results[r] = absl::InternalError(what); };
      if (cudaSetDevice(group->device(r)) != cudaSuccess) return fail("cudaSetDevice");
      cudaStream_t stream;
      float *data = nullptr, *send = nullptr, *recv = nullptr;
      cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
      cudaMalloc(&data, kCount * sizeof(float));
      cudaMalloc(&send, sizeof(float));
      cudaMalloc(&recv, n * sizeof(float));
      const std::vector<float> mine(kCount, static_cast<float>(r + 1));
      const float rank = static_cast<float>(r);
      cudaMemcpy(send, &rank, sizeof(float), cudaMemcpyHostToDevice);
      cudaGraph_t graph;
      cudaGraphExec_t exec;
      if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) return fail("capture");
      absl::Status ok = group->local(r).AllReduceSum(data, kCount, ir::DType::kF32, stream);
      if (ok.ok()) ok = group->local(r).AllGather(send, recv, 1, ir::DType::kF32, stream);
      if (cudaStreamEndCapture(stream, &graph) != cudaSuccess || !ok.ok()) {
        results[r] = ok.ok() ? absl::InternalError("end capture") : ok;
        return;
      }
      if (cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) return fail("instantiate");
      for (int replay = 0; replay < 2; ++replay) {  // the sum starts again from this rank's value each time
        cudaMemcpy(data, mine.data(), kCount * sizeof(float), cudaMemcpyHostToDevice);
        if (cudaGraphLaunch(exec, stream) != cudaSuccess || cudaStreamSynchronize(stream) != cudaSuccess) {
          return fail("replay");
        }
      }
      sums[r].resize(kCount);
      gathered[r].resize(n);
      cudaMemcpy(sums[r].data(), data, kCount * sizeof(float), cudaMemcpyDeviceToHost);
      cudaMemcpy(gathered[r].data(), recv, n * sizeof(float), cudaMemcpyDeviceToHost);
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
      cudaFree(data);
      cudaFree(send);
      cudaFree(recv);
      cudaStreamDestroy(stream);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
    for (float v : sums[r]) ASSERT_EQ(v, n * (n + 1) / 2.0f);
    for (int i = 0; i < n; ++i) EXPECT_EQ(gathered[r][i], static_cast<float>(i));
  }
}

// The one-shot all-reduce + residual (+ norm) kernel on every visible GPU at
// once, replayed in a CUDA graph, against the sum computed on the host in
// rank order; rows past the 64 blocks make blocks loop.
TEST(GpuTensorParallel, OneShotAllReduceMatchesTheHostSum) {
  SKIP_WITHOUT_GPU();
  const int n = VisibleGpus() > cuda::kMaxPeerRanks ? cuda::kMaxPeerRanks : VisibleGpus();
  std::shared_ptr<runtime::NcclGroup> group = Group(n);
  ASSERT_NE(group, nullptr);
  if (group->peer(0) == nullptr) GTEST_SKIP() << "no peer access between the GPUs";
  for (const auto& [rows, cols, norm] : {std::tuple{1, 4096, false}, std::tuple{1, 4096, true}, std::tuple{3, 96, true},
                                        std::tuple{100, 512, false}, std::tuple{64, 4096, true}}) {
    std::vector<std::vector<float>> x(n);
    for (int r = 0; r < n; ++r) x[r] = testing::RandomBf16(static_cast<size_t>(rows * cols), 100 + r);
    const std::vector<float> residual = testing::RandomBf16(static_cast<size_t>(rows * cols), 7);
    const std::vector<float> w = testing::RandomBf16(static_cast<size_t>(cols), 8, 0.2f);
    std::vector<std::vector<float>> got(n);
    std::vector<std::string> errors(n);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r, rows = rows, cols = cols, norm = norm] {
        cudaSetDevice(group->device(r));
        testing::DeviceArray<__nv_bfloat16> dx(x[r]), dres(residual), dw(w), dout(x[r].size());
        cudaStream_t stream;
        cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
        const cudaError_t launched = cuda::LaunchOneShotAllReduce(*group->peer(r), dx.get(), dres.get(),
                                                                  norm ? dw.get() : nullptr, 1e-5f, rows, cols,
                                                                  dout.get(), stream);
        cudaStreamEndCapture(stream, &graph);
        if (launched != cudaSuccess || cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) {
          errors[r] = "launch or capture failed";
          return;
        }
        for (int replay = 0; replay < 3; ++replay) cudaGraphLaunch(exec, stream);
        if (cudaStreamSynchronize(stream) != cudaSuccess) errors[r] = cudaGetErrorString(cudaGetLastError());
        got[r] = dout.Download();
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
        cudaStreamDestroy(stream);
      });
    }
    for (std::thread& t : threads) t.join();
    for (int r = 0; r < n; ++r) ASSERT_EQ(errors[r], "") << "rank " << r;
    std::vector<float> want(static_cast<size_t>(rows * cols));
    for (int row = 0; row < rows; ++row) {
      std::vector<float> sum(static_cast<size_t>(cols), 0.0f);
      double sq = 0.0;
      for (int c = 0; c < cols; ++c) {
        for (int r = 0; r < n; ++r) sum[c] += x[r][row * cols + c];
        sq += static_cast<double>(sum[c]) * sum[c];
      }
      const float scale = 1.0f / std::sqrt(static_cast<float>(sq / cols) + 1e-5f);
      for (int c = 0; c < cols; ++c) {
        want[row * cols + c] = residual[row * cols + c] + (norm ? w[c] * (sum[c] * scale) : sum[c]);
      }
    }
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(got[r], got[0]) << "every rank gets the same bits";
      EXPECT_LE(testing::RelativeError(got[r], want), 1e-2) << rows << "x" << cols << " norm " << norm;
    }
  }
}

// The largest degree up to the visible GPUs that tiny-glm's 4 heads allow.
int FixtureDegree() {
  const int n = VisibleGpus();
  return n >= 4 ? 4 : n >= 2 ? 2 : 1;
}

std::unique_ptr<runtime::Backend> NcclBackend(int tp, bool graphs, bool one_shot) {
  std::shared_ptr<runtime::NcclGroup> group = Group(tp);
  if (group == nullptr) return nullptr;
  std::vector<std::unique_ptr<runtime::Backend>> ranks;
  for (int r = 0; r < tp; ++r) {
    runtime::CudaBackendOptions o;
    o.device = group->device(r);
    o.comm = &group->local(r);
    o.peer = one_shot ? group->peer(r) : nullptr;
    o.use_graphs = graphs;
    ranks.push_back(std::move(*runtime::CreateCudaBackend(o)));
  }
  return std::make_unique<runtime::MultiRankBackend>(std::move(ranks), std::move(group));
}

// tiny-glm in bf16 over NCCL (decode steps in captured graphs, prefill eager),
// batched with staggered arrivals: the same tokens as one GPU without
// collectives, logits within bf16 noise of it.
TEST(GpuTensorParallel, FixtureOverNcclMatchesOneGpu) {
  SKIP_WITHOUT_GPU();
  const int tp = FixtureDegree();
  std::vector<testing::GoldenCase> cases = testing::LoadGolden(testing::TestDataDir() + "/tiny-glm");
  const std::vector<testing::GoldenCase> once = cases;
  cases.insert(cases.end(), once.begin(), once.end());
  compiler::CompileOptions options;
  options.build.dtype = ir::DType::kBF16;
  options.build.max_batch_tokens = 128;
  runtime::CudaBackendOptions single_options;
  testing::FixtureRunner single("tiny-glm", options, std::move(*runtime::CreateCudaBackend(single_options)));
  const std::vector<testing::Generation> expected = single.Run(cases, /*stagger=*/true);
  options.tp = tp;
  options.collectives_at_tp1 = true;
  for (const auto& [graphs, one_shot] : {std::pair{true, true}, std::pair{false, true}, std::pair{true, false}}) {
    std::unique_ptr<runtime::Backend> backend = NcclBackend(tp, graphs, one_shot);
    ASSERT_NE(backend, nullptr);
    testing::FixtureRunner sharded("tiny-glm", options, std::move(backend));
    ASSERT_GT(sharded.plan().decoder().steps.size(), single.plan().decoder().steps.size()) << "the plan carries its collectives";
    const std::vector<testing::Generation> got = sharded.Run(cases, /*stagger=*/true);
    for (size_t i = 0; i < cases.size(); ++i) {
      // The sums round differently (a partial product is stored in bf16 before the
      // all-reduce), so a token may differ only where golden's top-2 gap is tiny.
      const size_t same = testing::CommonPrefix(got[i].tokens, expected[i].tokens);
      const size_t p = cases[i].input_ids.size();
      const std::vector<float> a = testing::Rows(got[i].logits, p + same), b = testing::Rows(expected[i].logits, p + same),
                               golden = testing::Rows(cases[i].logits, p + same);
      if (same < cases[i].new_tokens.size()) {
        EXPECT_LE(cases[i].top1_top2_gap[p - 1 + same], testing::SureGap(testing::RelativeError(a, golden), cases[i], p + same))
            << "tp " << tp << " request " << i << " token " << same;
      }
      EXPECT_LE(testing::RelativeError(a, b), 2e-2)
          << "tp " << tp << " request " << i << " graphs " << graphs << " one-shot " << one_shot;
    }
  }
}

}  // namespace
}  // namespace ag
