// What determinism costs (replayer/determinism_cost.h): GPU time of the replaced ops matched by
// their place in their lane between a plain run and a policy run, and of each whole run.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "formats/trace_writer.h"
#include "replayer/determinism_cost.h"
#include "support/sample_records.h"
#include "support/temp_dir.h"

namespace ndt::replay {
namespace {

using format::GpuActivityKind;
using format::GpuActivityRecord;
using format::OpKind;
using format::OpRecord;
using format::Record;
using testing::TempDir;

OpRecord Op(uint64_t sequence, uint32_t thread, OpKind kind, const std::string& name) {
  OpRecord op;
  op.sequence = sequence;
  op.thread_id = thread;
  op.stream_id = 1;
  op.kind = kind;
  op.name = name;
  return op;
}

// A library op's kernel (timed as the library op) or a launch's own kernel.
GpuActivityRecord Kernel(std::optional<uint64_t> op, std::optional<uint64_t> library, uint64_t ns) {
  return {GpuActivityKind::kKernel, op, library, 1000, 1000 + ns, 7};
}

format::PolicyDecisionRecord Replaced(uint64_t op) {
  format::AlgorithmChoice to;
  to.library = "cudnn";
  to.id = 1;
  return {op, "cudnn", "replaced bwd-filter algo 0 (nondeterministic) by 1", std::nullopt, to, true};
}

TEST_CASE("the replaced ops' GPU time is compared at their place in the plain run", "[replayer]") {
  TempDir dir;
  // Plain run: thread 1 runs a launch and two backward-filter convolutions; thread 2 one more.
  // In the policy run thread 2's op comes first (another interleaving): places, not sequences,
  // pair them.
  const std::vector<Record> plain = {
      Op(0, 1, OpKind::kKernelLaunch, "scale"), Kernel(0, std::nullopt, 100),
      Op(1, 1, OpKind::kCudnnConvolution, "cudnnConvolutionBackwardFilter"),
      Kernel(std::nullopt, 1, 1000),
      Op(2, 2, OpKind::kCudnnConvolution, "cudnnConvolutionBackwardFilter"),
      Kernel(std::nullopt, 2, 1000),
      Op(3, 1, OpKind::kCudnnConvolution, "cudnnConvolutionBackwardFilter"),
      Kernel(std::nullopt, 3, 1000)};
  const std::vector<Record> policy = {
      Op(0, 2, OpKind::kCudnnConvolution, "cudnnConvolutionBackwardFilter"), Replaced(0),
      Kernel(std::nullopt, 0, 1500),
      Op(1, 1, OpKind::kKernelLaunch, "scale"), Kernel(1, std::nullopt, 100),
      Op(2, 1, OpKind::kCudnnConvolution, "cudnnConvolutionBackwardFilter"), Replaced(2),
      Kernel(std::nullopt, 2, 1200), Kernel(std::nullopt, 2, 300),  // two kernels now
      Op(3, 1, OpKind::kCudnnConvolution, "cudnnConvolutionBackwardFilter"),  // not replaced
      Kernel(std::nullopt, 3, 1000)};
  StatusOr<DeterminismCost> cost =
      MeasureDeterminismCost(testing::WriteTrace(dir, "policy.ndt", policy), testing::WriteTrace(dir, "plain.ndt", plain));
  REQUIRE(cost.ok());
  REQUIRE(cost->measured);
  REQUIRE(cost->replaced.size() == 1);
  CHECK(cost->replaced[0].name == "cudnnConvolutionBackwardFilter");
  CHECK(cost->replaced[0].ops == 2);
  CHECK(cost->replaced[0].plain_ns == 2000);
  CHECK(cost->replaced[0].policy_ns == 3000);
  CHECK(cost->unmatched == 0);
  CHECK(cost->plain_total_ns == 3100);
  CHECK(cost->policy_total_ns == 4100);
  const std::string text = RenderCostText(*cost);
  CHECK(text.find("cudnnConvolutionBackwardFilter (2 replaced ops): 0.002 ms -> 0.003 ms (+50 %)") !=
        std::string::npos);
  CHECK(text.find("whole run: 0.003 ms -> 0.004 ms (+32 %)") != std::string::npos);
}

TEST_CASE("without GPU times the cost is not measured, and says why", "[replayer]") {
  TempDir dir;
  const std::vector<Record> run = {Op(0, 1, OpKind::kCudnnConvolution, "cudnnConvolutionForward"),
                                   Replaced(0)};
  StatusOr<DeterminismCost> cost =
      MeasureDeterminismCost(testing::WriteTrace(dir, "policy.ndt", run), testing::WriteTrace(dir, "plain.ndt", run));
  REQUIRE(cost.ok());
  CHECK_FALSE(cost->measured);
  CHECK(RenderCostText(*cost).find("not measured: the runs have no GPU times") != std::string::npos);
  CHECK(ChangeText(0, 5) == "n/a");
  CHECK(ChangeText(1000, 1004) == "±0 %");
  CHECK(ChangeText(100, 59) == "-41 %");
}

}  // namespace
}  // namespace ndt::replay
