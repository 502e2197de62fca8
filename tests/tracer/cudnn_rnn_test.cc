// cuDNN's RNN API under the tracer, end to end on the stand-in device with
// tests/programs/lstm_train (torch.nn.LSTM-style training steps): what the RNN and dropout ops
// record, `check` naming the racing weight-gradient call of a persistent algorithm with its hint,
// --deterministic making the runs identical, a different dropout seed classed as rng_state,
// --pin forcing the recorded algorithm and seed, and capture + `replay --op`. Stand-in results
// only.
#include <catch2/catch.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "formats/records.h"
#include "support/temp_dir.h"
#include "support/traced_program.h"

namespace {

using namespace ndt::test;  // NOLINT(google-build-using-namespace): the shared test helpers
using ndt::format::BufferDigest;
using ndt::format::ChoiceSource;
using ndt::format::PolicyDecisionRecord;

const std::string kNdtrace = "'" NDTRACE_BIN "'";
const std::string kLstm = "'" PROG_LSTM_TRAIN "'";

RunResult RecordLstm(const std::string& trace, const std::string& args,
                     const std::string& options = "") {
  std::remove(trace.c_str());
  return Run(kNdtrace + " record " + options + " -o '" + trace + "' -- " + kLstm + " " + args);
}

std::vector<OpRecord> Named(const std::vector<Record>& records, const std::string& name) {
  std::vector<OpRecord> ops;
  for (const OpRecord& op : Ops(records)) {
    if (op.name == name) ops.push_back(op);
  }
  return ops;
}

std::string Text(const OpRecord& op, const std::string& name) {
  for (const Argument& argument : op.args) {
    if (argument.name != name) continue;
    if (const auto* text = std::get_if<std::string>(&argument.value)) return *text;
  }
  return "";
}

// The roles of `digests` with their sizes: "x:480 hx:256 ...".
std::string Roles(const std::vector<BufferDigest>& digests) {
  std::string text;
  for (const BufferDigest& digest : digests) {
    text += (text.empty() ? "" : " ") + digest.role + ":" + std::to_string(digest.bytes);
  }
  return text;
}

std::vector<PolicyDecisionRecord> Decisions(const std::vector<Record>& records) {
  std::vector<PolicyDecisionRecord> decisions;
  for (const Record& record : records) {
    const auto* decision = std::get_if<PolicyDecisionRecord>(&record);
    if (decision != nullptr && decision->library == "cudnn") decisions.push_back(*decision);
  }
  return decisions;
}

// The first op named `name` in the trace: its sequence as text.
std::string FirstSequence(const std::string& trace, const std::string& name) {
  const std::vector<OpRecord> ops = Named(ReadAll(trace), name);
  REQUIRE_FALSE(ops.empty());
  return std::to_string(ops.front().sequence);
}

}  // namespace

TEST_CASE("the stand-in cuDNN's RNN gradients agree with finite differences of its forward",
          "[tracer][cudnn_rnn]") {
  // (Not rnn_relu: finite differences across ReLU's kink are not its derivative.)
  for (const std::string mode : {"lstm", "gru", "rnn_tanh"}) {
    INFO(mode);
    const RunResult run = Run(kLstm + " --gradcheck --mode " + mode);
    INFO(run.err);
    REQUIRE(run.status == 0);
    for (const char* what : {"gradcheck w ", "gradcheck x "}) {
      const size_t at = run.out.find(what);
      REQUIRE(at != std::string::npos);
      double analytic = 0, numeric = 0;
      REQUIRE(std::sscanf(run.out.c_str() + at + 12, "%lf %lf", &analytic, &numeric) == 2);
      CHECK(std::abs(analytic) > 1e-3);
      CHECK(numeric == Approx(analytic).epsilon(2e-3));
    }
  }
}

TEST_CASE(
    "an LSTM training step records its cuDNN RNN calls with algorithm, extents and "
    "dropout state",
    "[tracer][cudnn_rnn]") {
  ndt::testing::TempDir dir;
  const std::string trace = (dir / "lstm.ndt").string();
  const RunResult run = RecordLstm(trace, "");
  INFO(run.err);
  REQUIRE(run.status == 0);
  const std::vector<Record> records = ReadAll(trace);

  const std::vector<OpRecord> set = Named(records, "cudnnSetDropoutDescriptor");
  REQUIRE(set.size() == 1);
  REQUIRE(set[0].rng);
  CHECK(set[0].rng->generator == "cudnn_dropout");
  CHECK(set[0].rng->seed == 42);
  CHECK(Roles(set[0].outputs) == "states:64");

  const std::vector<OpRecord> descriptors = Named(records, "cudnnSetRNNDescriptor_v8");
  REQUIRE(descriptors.size() == 4);  // one for the weight space size, one per step
  CHECK(Text(descriptors[0], "fingerprint") ==
        "cudnn rnn lstm unidirectional layers=2 input=5 hidden=8 proj=8 bias=double_bias "
        "input_mode=linear dtype=f32 math_prec=f32 math=0 dropout=0.25 aux=0");

  const std::vector<OpRecord> forwards = Named(records, "cudnnRNNForward");
  const std::vector<OpRecord> data = Named(records, "cudnnRNNBackwardData_v8");
  const std::vector<OpRecord> weights = Named(records, "cudnnRNNBackwardWeights_v8");
  REQUIRE(forwards.size() == 3);
  REQUIRE(data.size() == 3);
  REQUIRE(weights.size() == 3);
  for (const auto* ops : {&forwards, &data, &weights}) {
    for (const OpRecord& op : *ops) {
      REQUIRE(op.algorithm);
      CHECK(op.algorithm->library == "cudnn");
      CHECK(op.algorithm->name == "CUDNN_RNN_ALGO_PERSIST_STATIC");
      CHECK(op.algorithm->source == ChoiceSource::kRequested);
      CHECK(Contains(Text(op, "fingerprint"), "seq=6 batch=4 layout=seq_major_packed"));
      CHECK(op.status == 0);
    }
  }
  // Exact extents: x 6x4x5 floats, y 6x4x8, states 2x4x8, the weight space 4224 bytes.
  CHECK(Text(forwards[0], "call") == "forward-training");
  CHECK(Roles(forwards[0].inputs) == "x:480 hx:256 cx:256 weights:4224 dropout_states:64");
  CHECK(Roles(forwards[0].outputs) == "y:768 hy:256 cy:256");
  CHECK(Roles(data[0].inputs) == "y:768 dy:768 hx:256 dhy:256 cx:256 dcy:256 weights:4224");
  CHECK(Roles(data[0].outputs) == "dx:480 dhx:256 dcx:256");
  CHECK(Text(weights[0], "call") == "bwd-weights-add");
  CHECK(Roles(weights[0].inputs) == "x:480 hx:256 y:768 dweights:4224");
  CHECK(Roles(weights[0].outputs) == "dweights:4224");
  // Each training forward consumes the dropout states once more.
  for (size_t i = 0; i < forwards.size(); ++i) {
    REQUIRE(forwards[i].rng);
    CHECK(forwards[i].rng->seed == 42);
    CHECK(forwards[i].rng->offset == i);
  }
  CHECK_FALSE(data[0].rng);
  // The reserve space links the forward with its backward calls.
  const Argument* reserve = nullptr;
  for (const Argument& argument : weights[0].args) {
    if (argument.name == "reserve") reserve = &argument;
  }
  REQUIRE(reserve != nullptr);
  CHECK(Contains(Text(forwards[0], "fingerprint"), "dropout=0.25"));
}

TEST_CASE(
    "check names the racing cuDNN RNN weight-gradient call with its algorithm and hint, "
    "and --deterministic makes the runs identical",
    "[tracer][cudnn_rnn]") {
  ndt::testing::TempDir dir;
  const RunResult check =
      Run(kNdtrace + " check -n 3 -o '" + (dir / "planted").string() + "' -- " + kLstm);
  INFO(check.out << check.err);
  CHECK(check.status == 1);
  const std::string report = check.out + check.err;
  CHECK(Contains(report, "error[nondeterministic_op]"));
  CHECK(Contains(report, "cudnnRNNBackwardWeights_v8"));
  CHECK(Contains(report, "algorithm (same in both runs): cudnn CUDNN_RNN_ALGO_PERSIST_STATIC"));
  CHECK(Contains(report, "torch.nn.LSTM / GRU / RNN on CUDA (cuDNN RNN)"));
  CHECK(Contains(report, "CUBLAS_WORKSPACE_CONFIG=:4096:8"));
  CHECK(Contains(report, "ndtrace run --deterministic"));

  // The hint works: --deterministic, for the LSTM and for a GRU.
  for (const std::string args : {"", "--mode gru --algo persist_dynamic"}) {
    INFO(args);
    const RunResult fixed = Run(kNdtrace + " check -n 3 --deterministic -o '" +
                                (dir / "fixed").string() + "' -- " + kLstm + " " + args);
    INFO(fixed.out << fixed.err);
    CHECK(fixed.status == 0);
  }
  const std::string trace = (dir / "deterministic.ndt").string();
  REQUIRE(RecordLstm(trace, "", "--deterministic").status == 0);
  const std::vector<Record> records = ReadAll(trace);
  for (const OpRecord& op : Named(records, "cudnnRNNBackwardWeights_v8")) {
    REQUIRE(op.algorithm);
    CHECK(op.algorithm->name == "CUDNN_RNN_ALGO_STANDARD");
    CHECK(op.algorithm->source == ChoiceSource::kEnforced);
    CHECK(op.algorithm->determinism == ndt::format::Determinism::kDeterministic);
  }
  const std::vector<PolicyDecisionRecord> decisions = Decisions(records);
  REQUIRE_FALSE(decisions.empty());
  CHECK(Contains(decisions[0].action, "replaced RNN algo CUDNN_RNN_ALGO_PERSIST_STATIC"));
  CHECK(Contains(decisions[0].action, "by CUDNN_RNN_ALGO_STANDARD"));
}

TEST_CASE(
    "a program whose cuBLAS workspace has two sizes hears that --deterministic cannot fix "
    "its RNN calls",
    "[tracer][cudnn_rnn]") {
  ndt::testing::TempDir dir;
  const std::string trace = (dir / "two_sizes.ndt").string();
  std::remove(trace.c_str());
  REQUIRE(Run("CUBLAS_WORKSPACE_CONFIG=:16:8:4096:2 " + kNdtrace + " record --deterministic -o '" +
              trace + "' -- " + kLstm)
              .status == 0);
  size_t unapplied = 0;
  for (const PolicyDecisionRecord& decision : Decisions(ReadAll(trace))) {
    if (decision.applied) continue;
    ++unapplied;
    CHECK(Contains(decision.action, "CUBLAS_WORKSPACE_CONFIG=:16:8:4096:2"));
  }
  CHECK(unapplied == 1);  // said once
}

TEST_CASE("a cuDNN dropout seeded differently is an rng_state divergence", "[tracer][cudnn_rnn]") {
  ndt::testing::TempDir dir;
  const std::string a = (dir / "seed1.ndt").string(), b = (dir / "seed2.ndt").string();
  REQUIRE(RecordLstm(a, "--algo standard --seed 1").status == 0);
  REQUIRE(RecordLstm(b, "--algo standard --seed 2").status == 0);
  // Another command line: diff compares them only when told to.
  CHECK(Run(kNdtrace + " diff '" + a + "' '" + b + "'").status == 2);
  const RunResult diff = Run(kNdtrace + " diff --force '" + a + "' '" + b + "'");
  INFO(diff.out << diff.err);
  CHECK(diff.status == 1);
  CHECK(Contains(diff.out, "error[rng_state]"));
  CHECK(Contains(diff.out, "cudnnSetDropoutDescriptor"));
  CHECK(Contains(diff.out, "cudnn_dropout seed 1 offset 0"));
  CHECK(Contains(diff.out, "cudnn_dropout seed 2 offset 0"));
  CHECK(Contains(diff.out, "torch.manual_seed"));
  // The same seed with the deterministic algorithm: identical.
  const std::string c = (dir / "seed1b.ndt").string();
  REQUIRE(RecordLstm(c, "--algo standard --seed 1").status == 0);
  CHECK(Run(kNdtrace + " diff '" + a + "' '" + c + "'").status == 0);
}

TEST_CASE("a pinned run (--pin) gets the RNN algorithm and dropout seed the reference recorded",
          "[tracer][cudnn_rnn]") {
  ndt::testing::TempDir dir;
  const std::string reference = (dir / "reference.ndt").string();
  REQUIRE(RecordLstm(reference, "--algo persist_static_small_h --seed 5").status == 0);
  const std::string pinned = (dir / "pinned.ndt").string();
  const RunResult run = RecordLstm(pinned, "--algo standard --seed 9", "--pin '" + reference + "'");
  INFO(run.err);
  REQUIRE(run.status == 0);
  const std::vector<Record> records = ReadAll(pinned);
  size_t calls = 0;
  for (const char* name :
       {"cudnnRNNForward", "cudnnRNNBackwardData_v8", "cudnnRNNBackwardWeights_v8"}) {
    for (const OpRecord& op : Named(records, name)) {
      REQUIRE(op.algorithm);
      CHECK(op.algorithm->name == "CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL_H");
      CHECK(op.algorithm->source == ChoiceSource::kPinned);
      ++calls;
    }
  }
  CHECK(calls == 9);
  const std::vector<OpRecord> set = Named(records, "cudnnSetDropoutDescriptor");
  REQUIRE(set.size() == 1);
  REQUIRE(set[0].rng);
  CHECK(set[0].rng->seed == 5);
}

TEST_CASE(
    "replay --op re-runs a captured cuDNN RNN call alone: the persistent algorithm's "
    "weight gradients vary, the standard algorithm's do not",
    "[tracer][cudnn_rnn][op_replay]") {
  ndt::testing::TempDir dir;
  const std::string planted = (dir / "planted.ndt").string();
  REQUIRE(RecordLstm(planted, "", "--capture cudnnRNNForward,cudnnRNNBackwardWeights_v8").status ==
          0);
  const std::string op = FirstSequence(planted, "cudnnRNNBackwardWeights_v8");
  const RunResult varies = Run(kNdtrace + " replay '" + planted + "' --op " + op + " --repeat 8");
  INFO(varies.out << varies.err);
  CHECK(varies.status == 1);
  CHECK(Contains(varies.out, "CUDNN_RNN_ALGO_PERSIST_STATIC (recorded)"));
  CHECK(Contains(varies.out, "VARIES"));

  // The training forward (dropout included) is stable and reproduces its recorded outputs;
  // its deterministic alternative runs too.
  const std::string forward = FirstSequence(planted, "cudnnRNNForward");
  const RunResult stable = Run(kNdtrace + " replay '" + planted + "' --op " + forward +
                               " --repeat 4 --try-deterministic");
  INFO(stable.out << stable.err);
  CHECK(stable.status == 0);
  CHECK(Contains(stable.out, "y+hy+cy"));
  CHECK(Contains(stable.out, "4/4"));
  CHECK(Contains(stable.out, "CUDNN_RNN_ALGO_STANDARD"));

  const std::string standard = (dir / "standard.ndt").string();
  REQUIRE(RecordLstm(standard, "--algo standard --mode gru", "--capture cudnnRNNBackwardWeights_v8")
              .status == 0);
  const RunResult same = Run(kNdtrace + " replay '" + standard + "' --op " +
                             FirstSequence(standard, "cudnnRNNBackwardWeights_v8") + " --repeat 8");
  INFO(same.out << same.err);
  CHECK(same.status == 0);
  CHECK(Contains(same.out, "stable"));
  CHECK(Contains(same.out, "8/8"));  // and equal to what was recorded
}
