#include "replayer/diff_report.h"

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>

namespace ndt::replay {
namespace {

struct Style {
  bool color;
  std::string Bold(const std::string& s) const { return color ? "\x1b[1m" + s + "\x1b[0m" : s; }
  std::string Red(const std::string& s) const { return color ? "\x1b[1;31m" + s + "\x1b[0m" : s; }
  std::string Yellow(const std::string& s) const {
    return color ? "\x1b[1;33m" + s + "\x1b[0m" : s;
  }
  std::string Green(const std::string& s) const {
    return color ? "\x1b[1;32m" + s + "\x1b[0m" : s;
  }
  std::string Cyan(const std::string& s) const { return color ? "\x1b[1;36m" + s + "\x1b[0m" : s; }
};

std::string Where(const OpLocation& op) {
  return fmt::format("op {}, thread {}, stream {} (its op #{} there), {}", op.sequence,
                     format::ThreadLabel(op.thread_id), format::StreamLabel(op.stream_id),
                     op.lane_index, format::OpKindName(op.kind));
}

std::string Headline(const Divergence& d) {
  switch (d.klass) {
    case DivergenceClass::kNondeterministicOp:
      return fmt::format("op {} is nondeterministic", d.op.sequence);
    case DivergenceClass::kRngState:
      return fmt::format("op {} consumed different random state", d.op.sequence);
    case DivergenceClass::kAlgorithmSelection:
      return fmt::format("op {} ran a different algorithm", d.op.sequence);
    case DivergenceClass::kPropagated:
      return fmt::format("op {} received inputs that already differ", d.op.sequence);
    case DivergenceClass::kUncovered:
      return fmt::format("device memory diverged by op {}", d.op.sequence);
  }
  return "divergence";
}

std::string Summary(const DiffReport& r) {
  return fmt::format("{} ops in run A, {} in run B, {} compared, {} diverged, {} structural "
                     "difference{}",
                     r.ops_a, r.ops_b, r.ops_compared, r.divergent_ops, r.structural_differences,
                     r.structural_differences == 1 ? "" : "s");
}

// The stack under a report's op: the location first (the innermost frame in the user's own
// files), then every frame, innermost first, library frames marked.
std::string PythonStackText(const format::PythonStackRecord& stack, const std::string& label) {
  std::string out = fmt::format("   = {}: {}\n", label, format::PythonStackSummary(stack));
  for (const format::PythonFrame& frame : stack.frames) {
    out += fmt::format("       {}{}\n", format::PythonFrameText(frame),
                       format::IsLibraryPythonFile(frame.file) ? "  [library]" : "");
  }
  return out;
}

nlohmann::json PythonStackJson(const format::PythonStackRecord& stack, const std::string& trace) {
  nlohmann::json frames = nlohmann::json::array();
  for (const format::PythonFrame& frame : stack.frames) {
    frames.push_back({{"file", frame.file},
                      {"line", frame.line},
                      {"function", frame.function},
                      {"library", format::IsLibraryPythonFile(frame.file)}});
  }
  nlohmann::json j = {{"status", format::PythonStackStatusName(stack.status)},
                      {"summary", format::PythonStackSummary(stack)},
                      {"frames", std::move(frames)},
                      {"detail", stack.detail},
                      {"python", stack.python},
                      {"trace", trace}};
  const format::PythonFrame* frame = stack.status == format::PythonStackStatus::kCaptured
                                         ? format::UserPythonFrame(stack)
                                         : nullptr;
  j["location"] = frame != nullptr ? nlohmann::json{{"file", frame->file},
                                                    {"line", frame->line},
                                                    {"function", frame->function}}
                                   : nlohmann::json(nullptr);
  return j;
}

nlohmann::json OpJson(const OpLocation& op) {
  return {{"sequence", op.sequence},
          {"thread", op.thread_id},
          {"stream", op.stream_id},
          {"lane_index", op.lane_index},
          {"kind", format::OpKindName(op.kind)},
          {"name", op.name}};
}

}  // namespace

// "   = in: a > b > aten::x\n   = pytorch: aten::x in module Net.layer1\n" for the divergent op.
std::string RangesText(const Divergence& d) {
  if (!d.ranges) return "";
  const format::RangeContext& ranges = *d.ranges;
  std::string out = fmt::format("   = in: {}\n", format::JoinPath(ranges.path));
  if (!ranges.framework_op.empty() || !ranges.module.empty()) {
    out += "   = pytorch: ";
    out += ranges.framework_op.empty() ? std::string("an op") : ranges.framework_op;
    if (!ranges.module.empty()) out += " in module " + ranges.module;
    out += "\n";
  }
  return out;
}

// The "ranges" object of the JSON report, or null.
nlohmann::json RangesJson(const Divergence& d) {
  if (!d.ranges) return nullptr;
  return {{"path", d.ranges->path},
          {"framework_op", d.ranges->framework_op.empty() ? nlohmann::json(nullptr)
                                                          : nlohmann::json(d.ranges->framework_op)},
          {"module", d.ranges->module.empty() ? nlohmann::json(nullptr)
                                              : nlohmann::json(d.ranges->module)}};
}

std::string RenderDiffText(const DiffReport& r, bool color) {
  const Style s{color};
  std::string out;
  for (const auto& h : r.header) {
    out += fmt::format("{}: {} differs: {} (run A) vs {} (run B){}\n",
                       h.blocking ? s.Red("not comparable") : s.Yellow("warning"), h.field, h.a,
                       h.b, h.blocking ? "; bitwise-identical results are not expected" : "");
  }
  for (const auto& w : r.warnings) out += s.Yellow("warning") + ": " + w + "\n";
  if (r.first_divergence) {
    const Divergence& d = *r.first_divergence;
    out += fmt::format("{}: {}\n", s.Red(fmt::format("error[{}]", DivergenceClassName(d.klass))),
                       s.Bold(Headline(d)));
    if (d.klass == DivergenceClass::kUncovered) {
      out += fmt::format("  --> {}\n", d.op.name);
    } else {
      out += fmt::format("  --> {}\n", Where(d.op));
      out += fmt::format("      {}\n", d.op.name);
      if (d.sequence_b != d.op.sequence) {
        out += fmt::format("      (op {} in run B)\n", d.sequence_b);
      }
    }
    out += RangesText(d);
    out += fmt::format("   = {}\n", d.what);
    for (const auto& line : d.evidence) out += "   = " + line + "\n";
    if (d.size) {
      const auto& z = *d.size;
      out += fmt::format("   = size: `{}` sums to {:.9g} (A) and {:.9g} (B), |diff| {:.3g}; "
                         "largest |x| {:.9g} (A), {:.9g} (B)\n",
                         z.role, z.sum_a, z.sum_b, std::fabs(z.sum_a - z.sum_b), z.max_abs_a,
                         z.max_abs_b);
    }
    if (d.exact) {
      const ExactDifference& x = *d.exact;
      const bool bytes = x.dtype == format::DType::kUnknown;
      const char* unit = bytes ? "bytes" : "elements";
      out += fmt::format("   = exact (captured `{}`, {}): {} of {} {} differ, the first at [{}]: "
                         "{:.9g} (A) vs {:.9g} (B)",
                         x.role, bytes ? "bytes" : format::DTypeName(x.dtype), x.differing,
                         x.elements, unit, x.first_index, x.first_a, x.first_b);
      if (!bytes) {
        out += fmt::format("; largest |A-B| {:.3g} at [{}], relative {:.3g}", x.max_abs_diff,
                           x.max_abs_index, x.max_rel_diff);
      }
      if (x.bytes_a != x.bytes_b) out += fmt::format("; {} B (A) vs {} B (B)", x.bytes_a, x.bytes_b);
      out += "\n";
    }
    if (d.python_stack) {
      out += PythonStackText(*d.python_stack, "python");
    }
    if (d.root) {
      out += fmt::format("   = suspect: op {}, {}: {}\n", d.root->sequence,
                         format::OpKindName(d.root->kind), d.root->name);
      if (d.root_python_stack) out += PythonStackText(*d.root_python_stack, "suspect's python");
    }
    if ((d.python_stack || d.root_python_stack) && !d.python_stack_trace.empty()) {
      out += fmt::format("   = python stacks from {}\n", d.python_stack_trace);
    }
    if (d.window_begin && d.window_end) {
      out += fmt::format("   = window: the divergence arose in ops {}..{}; digesting each op "
                         "there would pinpoint it\n",
                         *d.window_begin, *d.window_end);
    }
    if (d.hint) {
      out += fmt::format("   = why: {}: {}\n", d.hint->framework_op, d.hint->mechanism);
      out += fmt::format("{}: {}\n", s.Cyan("help"), d.hint->fix);
    }
  }
  if (r.first_structural) {
    const auto& st = *r.first_structural;
    out += fmt::format("{}: the runs differ in structure: {}\n", s.Yellow("note"), st.what);
    if (st.a) out += fmt::format("  --> run A: {}: {}\n", Where(*st.a), st.a->name);
    if (st.b) out += fmt::format("  --> run B: {}: {}\n", Where(*st.b), st.b->name);
  }
  for (const auto& n : r.notes) out += s.Yellow("note") + ": " + n + "\n";
  const char* verdict = r.identical() ? "identical" : "diverged";
  out += fmt::format("{}: {} vs {}: {}\n",
                     r.identical() ? s.Green(verdict) : s.Red(verdict), r.path_a, r.path_b,
                     Summary(r));
  return out;
}

std::string RenderDiffJson(const DiffReport& r) {
  nlohmann::json j;
  j["schema"] = "ndtrace.diff/2";
  j["a"] = r.path_a;
  j["b"] = r.path_b;
  j["verdict"] = r.identical() ? "identical" : "diverged";
  j["comparable"] = r.comparable();
  j["header_differences"] = nlohmann::json::array();
  for (const auto& h : r.header) {
    j["header_differences"].push_back(
        {{"field", h.field}, {"a", h.a}, {"b", h.b}, {"blocking", h.blocking}});
  }
  j["first_divergence"] = nullptr;
  if (r.first_divergence) {
    const Divergence& d = *r.first_divergence;
    nlohmann::json v;
    v["class"] = DivergenceClassName(d.klass);
    v["op"] = OpJson(d.op);
    v["sequence_b"] = d.sequence_b;
    v["ranges"] = RangesJson(d);
    v["what"] = d.what;
    v["evidence"] = d.evidence;
    v["root"] = d.root ? nlohmann::json{{"sequence", d.root->sequence},
                                        {"kind", format::OpKindName(d.root->kind)},
                                        {"name", d.root->name}}
                       : nlohmann::json(nullptr);
    v["from_host"] = d.from_host;
    v["from_process"] =
        d.from_process.empty() ? nlohmann::json(nullptr) : nlohmann::json(d.from_process);
    v["bisect_window"] = d.window_begin && d.window_end
                             ? nlohmann::json::array({*d.window_begin, *d.window_end})
                             : nlohmann::json(nullptr);
    v["size"] = d.size ? nlohmann::json{{"role", d.size->role},
                                        {"dtype", format::DTypeName(d.size->dtype)},
                                        {"sum_a", d.size->sum_a},
                                        {"sum_b", d.size->sum_b},
                                        {"max_abs_a", d.size->max_abs_a},
                                        {"max_abs_b", d.size->max_abs_b}}
                       : nlohmann::json(nullptr);
    v["exact"] = d.exact ? nlohmann::json{{"role", d.exact->role},
                                          {"dtype", d.exact->dtype == format::DType::kUnknown
                                                        ? "bytes"
                                                        : format::DTypeName(d.exact->dtype)},
                                          {"elements", d.exact->elements},
                                          {"differing", d.exact->differing},
                                          {"first_index", d.exact->first_index},
                                          {"first_a", d.exact->first_a},
                                          {"first_b", d.exact->first_b},
                                          {"max_abs_diff", d.exact->max_abs_diff},
                                          {"max_abs_index", d.exact->max_abs_index},
                                          {"max_rel_diff", d.exact->max_rel_diff},
                                          {"bytes_a", d.exact->bytes_a},
                                          {"bytes_b", d.exact->bytes_b},
                                          {"histogram",
                                           {{"lowest_power", ExactDifference::kHistogramLowest},
                                            {"counts", d.exact->histogram},
                                            {"non_finite", d.exact->non_finite}}}}
                         : nlohmann::json(nullptr);
    v["hint"] = d.hint ? nlohmann::json{{"framework_op", d.hint->framework_op},
                                        {"mechanism", d.hint->mechanism},
                                        {"fix", d.hint->fix}}
                       : nlohmann::json(nullptr);
    v["python_stack"] = d.python_stack ? PythonStackJson(*d.python_stack, d.python_stack_trace)
                                       : nlohmann::json(nullptr);
    v["root_python_stack"] = d.root_python_stack
                                 ? PythonStackJson(*d.root_python_stack, d.python_stack_trace)
                                 : nlohmann::json(nullptr);
    j["first_divergence"] = std::move(v);
  }
  j["first_structural_difference"] = nullptr;
  if (r.first_structural) {
    const auto& st = *r.first_structural;
    j["first_structural_difference"] = {
        {"what", st.what},
        {"a", st.a ? OpJson(*st.a) : nlohmann::json(nullptr)},
        {"b", st.b ? OpJson(*st.b) : nlohmann::json(nullptr)}};
  }
  j["counts"] = {{"ops_a", r.ops_a},
                 {"ops_b", r.ops_b},
                 {"ops_compared", r.ops_compared},
                 {"divergent_ops", r.divergent_ops},
                 {"structural_differences", r.structural_differences},
                 {"lane_tail_ops", r.lane_tail_ops}};
  j["warnings"] = r.warnings;
  j["notes"] = r.notes;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace ndt::replay
