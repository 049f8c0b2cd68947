#include "passes/pipeline.h"

#include "passes/canonicalize.h"
#include "passes/fuse.h"
#include "passes/lower_kv_cache.h"
#include "passes/plan_memory.h"
#include "passes/shard.h"

namespace ag::passes {

std::unique_ptr<Pipeline> BuildStandardPipeline(PipelineOptions options, const StandardPassOptions& pass_options) {
  auto pipeline = std::make_unique<Pipeline>(std::move(options));
  pipeline->Add(std::make_unique<CanonicalizePass>());
  pipeline->Add(std::make_unique<DcePass>());
  pipeline->Add(std::make_unique<ShardPass>(pass_options.tp, pass_options.collectives_at_tp1));
  pipeline->Add(std::make_unique<LowerKvCachePass>(pass_options.kv_block_size));
  pipeline->Add(std::make_unique<FusePass>());
  if (!pass_options.quant.empty()) pipeline->Add(std::make_unique<QuantizePass>(pass_options.quant));
  pipeline->Add(std::make_unique<PlanMemoryPass>());
  return pipeline;
}

}  // namespace ag::passes
