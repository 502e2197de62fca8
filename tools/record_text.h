// The text form of a trace's header and records, as `ndtrace show` prints it: one compact
// line per record, columns aligned, fields named the way the schema names them.
//
// With TextOptions::stable, everything that differs between two identical runs or two
// machines is left out or printed as `<>`: times, host, pid, start time and raw
// addresses. Two runs of the same deterministic program then print the same text, which
// is what golden tests and a plain `diff` of two `show --stable` outputs rely on.
//
// All functions are pure and thread-safe. Text from the trace is untrusted: control
// characters are escaped, so one record is always one line (state digests: one line plus
// one indented line per allocation).
#pragma once

#include <string>
#include <string_view>

#include "formats/nvtx_paths.h"
#include "formats/records.h"

namespace ndt::tools {

struct TextOptions {
  bool stable = false;
};

// Digest as 32 lowercase hex characters: lo as 16 digits, then hi as 16 digits.
std::string DigestHex(const format::Digest& digest);
// Bytes as lowercase hex, two characters per byte.
std::string HexBytes(std::string_view bytes);
// `text` with control characters and backslashes escaped (\n, \t, \\, \xNN).
std::string EscapeControl(std::string_view text);
// `text` in double quotes, with quotes and control characters escaped.
std::string Quoted(std::string_view text);

// The schema's names of the enums records.h does not name itself ("allocate", "heuristic",
// ...); "unknown" also for values no schema version has.
const char* DeterminismName(format::Determinism determinism);
const char* ChoiceSourceName(format::ChoiceSource source);
const char* SeverityName(format::Severity severity);
const char* AllocationEventName(format::AllocationEvent event);

// "a3+4096", plus "@0x..." unless stable. An address in no allocation prints as "raw:0x..."
// ("raw:<>" when stable).
std::string PointerText(const format::DevicePointer& pointer, const TextOptions& options);
// "role@a3+0:4096B:f32:<digest>" ("a3+0:..." without a role) and, when summarised,
// "[min..max sum=S nan=N inf=N]". Never a raw address.
std::string BufferDigestText(const format::BufferDigest& buffer, const TextOptions& options);
// "cudnn:3 \"engine 3\" deterministic heuristic knobs=[0=2,3=1] opaque=64B#<fnv1a64>";
// unknown determinism and source are left out.
std::string AlgorithmText(const format::AlgorithmChoice& algorithm);
// "philox seed=S offset=O" plus subsequence, ordering and device dependence when set.
std::string RngText(const format::RngState& rng);
// "name=value"; pointers as PointerText, dims as [a,b,c], bytes as <NB:hex...>.
std::string ArgumentText(const format::Argument& argument, const TextOptions& options);
// The command line, shell-quoted where needed.
std::string CommandLineText(const std::vector<std::string>& command_line);

// The header block: one "key  value" line per fact, keys padded to one column.
void AppendHeaderText(const format::TraceHeader& header, const TextOptions& options,
                      std::string* out);
// One record, newline-terminated. Without stable, lines start with a time column (blank
// for records that carry no time).
void AppendRecordText(const format::Record& record, const TextOptions& options, std::string* out);
// The NVTX ranges that enclosed an op, as the indented line `show` prints under it:
// `in "a" > "b"  op=aten::x  module=Net.layer1`. Nothing when `context` is empty.
void AppendRangeContextText(const format::RangeContext& context, const TextOptions& options,
                            std::string* out);

}  // namespace ndt::tools
