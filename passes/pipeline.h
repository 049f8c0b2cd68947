// The standard pass pipeline, in DESIGN.md's order (quantize, when asked for, after fuse:
// it annotates the fused weights' parts).
#ifndef AUTOGLM_PASSES_PIPELINE_H_
#define AUTOGLM_PASSES_PIPELINE_H_

#include <memory>

#include "passes/pass.h"
#include "passes/quantize.h"

namespace ag::passes {

struct StandardPassOptions {
  int64_t kv_block_size = 16;
  int32_t tp = 1;  // tensor-parallel degree (the shard pass)
  bool collectives_at_tp1 = false;  // tests: shard even at tp 1 (ShardPass's even_alone)
  QuantPolicy quant;  // weight formats; the quantize pass runs (after fuse) when this is not empty
};

std::unique_ptr<Pipeline> BuildStandardPipeline(PipelineOptions options, const StandardPassOptions& pass_options);

}  // namespace ag::passes

#endif  // AUTOGLM_PASSES_PIPELINE_H_
