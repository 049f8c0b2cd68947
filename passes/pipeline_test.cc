#include "passes/pipeline.h"

#include <gtest/gtest.h>

#include "ir/text.h"
#include "passes/fuse.h"

namespace ag::passes {
namespace {

constexpr char kGraph[] = R"(graph t (R<=4, T<=4) {
  param @norm : f32[8]
  param @head : f32[10,8]
  input %x : f32[T,8]
  input %rows : i32[R]
  %last = gather_rows(%x, %rows) : f32[R,8]
  %n = rms_norm(%last, @norm) {eps=1e-05} : f32[R,8]
  %logits = linear(%n, @head) : f32[R,10]
  %next = argmax(%logits) : i32[R]
  output %logits, %next
}
)";

ir::Graph Parse(const char* text) { return *ir::ParseGraph(text); }

TEST(Pipeline, RunsPassesInOrderAndDumpsAfterANamedPass) {
  std::vector<std::string> dumped;
  PipelineOptions options;
  options.verify_each = true;
  options.dump_after = "fuse";
  options.dump = [&](absl::string_view pass, const ir::Graph& g) { dumped.push_back(std::string(pass) + ":" + ir::PrintGraph(g)); };
  std::unique_ptr<Pipeline> p = BuildStandardPipeline(options, {});
  EXPECT_EQ(p->Names(),
            (std::vector<std::string>{"canonicalize", "dce", "shard", "lower-kv-cache", "fuse", "plan-memory"}));
  ir::Graph g = Parse(kGraph);
  absl::StatusOr<std::vector<PassRecord>> ran = p->Run(g);
  ASSERT_TRUE(ran.ok()) << ran.status();
  ASSERT_EQ(ran->size(), 6u);
  EXPECT_FALSE((*ran)[2].changed) << "tp 1: shard has nothing to do";
  EXPECT_TRUE((*ran)[4].changed);
  ASSERT_EQ(dumped.size(), 1u);
  EXPECT_NE(dumped[0].find("fuse:"), std::string::npos);
  EXPECT_NE(dumped[0].find("norm_linear"), std::string::npos);
  EXPECT_GE(g.arena_bytes(), 0) << "plan-memory ran";
}

TEST(Pipeline, DisablesPassesByName) {
  PipelineOptions options;
  options.disabled = {"fuse", "plan-memory"};
  ir::Graph g = Parse(kGraph);
  absl::StatusOr<std::vector<PassRecord>> ran = BuildStandardPipeline(options, {})->Run(g);
  ASSERT_TRUE(ran.ok());
  EXPECT_EQ(ran->size(), 4u);
  EXPECT_EQ(ir::PrintGraph(g).find("norm_linear"), std::string::npos);
  EXPECT_LT(g.arena_bytes(), 0);
}

TEST(Pipeline, UnknownPassNamesAreErrors) {
  PipelineOptions options;
  options.disabled = {"fusion"};
  ir::Graph g = Parse(kGraph);
  absl::StatusOr<std::vector<PassRecord>> ran = BuildStandardPipeline(options, {})->Run(g);
  ASSERT_FALSE(ran.ok());
  EXPECT_NE(ran.status().message().find("unknown pass 'fusion'"), std::string::npos);
  options.disabled.clear();
  options.dump_after = "nope";
  EXPECT_FALSE(BuildStandardPipeline(options, {})->Run(g).ok());
}

// A pass that breaks the graph: the verifier after it must say so.
class BreakingPass : public Pass {
 public:
  absl::string_view name() const override { return "break"; }
  absl::StatusOr<bool> Run(ir::Graph& g) override {
    g.mutable_value(g.FindValue("logits")).type.shape[1] = ir::Dim(11);
    return true;
  }
};

TEST(Pipeline, VerifiesAfterEveryPass) {
  PipelineOptions options;
  options.verify_each = true;
  Pipeline p(options);
  p.Add(std::make_unique<BreakingPass>());
  ir::Graph g = Parse(kGraph);
  absl::StatusOr<std::vector<PassRecord>> ran = p.Run(g);
  ASSERT_FALSE(ran.ok());
  EXPECT_NE(ran.status().message().find("after pass break"), std::string::npos) << ran.status();
}

}  // namespace
}  // namespace ag::passes
