#include "passes/pipeline.h"

namespace ag::passes {

std::unique_ptr<Pipeline> BuildStandardPipeline(PipelineOptions options, const StandardPassOptions&) {
  auto pipeline = std::make_unique<Pipeline>(std::move(options));
  return pipeline;
}

}  // namespace ag::passes
