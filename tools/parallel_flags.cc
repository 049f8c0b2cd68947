#include "tools/parallel_flags.h"

#include "absl/flags/flag.h"

ABSL_FLAG(int64_t, tp, 0,
          "tensor-parallel degree: ranks that split the model (cpu: threads; cuda: GPUs). With --model the plan is "
          "compiled at this degree; with --plan the plan's degree is used (default: 1, or the plan's)");
ABSL_FLAG(std::string, devices, "", "cuda: this process's GPUs, one rank each, e.g. 0,1,2,3 (default: 0 .. ranks-1)");
ABSL_FLAG(int64_t, nnodes, 1, "cuda: nodes the ranks span (every node runs the same command with its --node-rank)");
ABSL_FLAG(int64_t, node_rank, 0, "cuda: this node's index in [0, --nnodes)");
ABSL_FLAG(std::string, master, "", "cuda, --nnodes > 1: ADDR:PORT where node 0 hands out the NCCL id");
ABSL_FLAG(bool, embedding_on_host, false,
          "cuda: keep the token-embedding table in pinned host memory, read by the GPU over the bus (GLM-4-9B: "
          "1.24 GB less GPU memory; a step reads one row a token)");

namespace ag::tools {

ParallelOptions ParallelFlags() {
  ParallelOptions p;
  p.tp = absl::GetFlag(FLAGS_tp);
  p.devices = absl::GetFlag(FLAGS_devices);
  p.nnodes = absl::GetFlag(FLAGS_nnodes);
  p.node_rank = absl::GetFlag(FLAGS_node_rank);
  p.master = absl::GetFlag(FLAGS_master);
  p.embedding_on_host = absl::GetFlag(FLAGS_embedding_on_host);
  return p;
}

}  // namespace ag::tools
