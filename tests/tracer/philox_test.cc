// PyTorch's RNG state in kernel arguments: a launch whose kernel takes an at::PhiloxCudaState
// records its seed and offset as the op's RNG state, and a forgotten seed is classified as an RNG
// state divergence. philox_dropout runs on the stand-in device.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "support/temp_dir.h"
#include "support/traced_program.h"

namespace {

using namespace ndt::test;  // NOLINT(google-build-using-namespace): the shared test helpers

}  // namespace

TEST_CASE("a PhiloxCudaState argument is recorded as the launch's RNG state", "[philox]") {
  ndt::testing::TempDir dir;
  const std::string trace = (dir / "p.ndt").string();
  REQUIRE(RecordRun(trace, PROG_PHILOX_DROPOUT).status == 0);
  std::vector<OpRecord> launches;
  for (const OpRecord& op : Ops(ReadAll(trace))) {
    if (op.name.rfind("DropoutLike(", 0) == 0) launches.push_back(op);
  }
  REQUIRE(launches.size() == 2);
  CHECK(launches[0].name == "DropoutLike(at::PhiloxCudaState, float const*, float*, int)");
  for (size_t step = 0; step < launches.size(); ++step) {
    INFO("launch " << step);
    REQUIRE(launches[step].rng.has_value());
    CHECK(launches[step].rng->generator == "philox");
    CHECK(launches[step].rng->seed == 1234);
    CHECK(launches[step].rng->offset == step * 4096);
  }
}

TEST_CASE("check names a forgotten seed as an RNG state divergence at the kernel", "[philox]") {
  ndt::testing::TempDir dir;
  const RunResult seeded = Run("'" NDTRACE_BIN "' check -o '" + (dir / "seeded").string() +
                               "' -- '" PROG_PHILOX_DROPOUT "'");
  CHECK(seeded.status == 0);
  const RunResult unseeded = Run("'" NDTRACE_BIN "' check -o '" + (dir / "unseeded").string() +
                                 "' -- '" PROG_PHILOX_DROPOUT "' --unseeded");
  CHECK(unseeded.status == 1);
  CHECK(unseeded.out.find("error[rng_state]") != std::string::npos);
  CHECK(unseeded.out.find("DropoutLike") != std::string::npos);
}
