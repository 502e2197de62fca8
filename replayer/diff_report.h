// How a DiffReport is shown: a text report in the style of a compiler error (what, where,
// why, evidence, fix) and a JSON document with a stable schema ("ndtrace.diff/2",
// documented in replayer/README.md).
#pragma once

#include <string>

#include "replayer/trace_diff.h"

namespace ndt::replay {

// The text report. `color` adds ANSI colours (for terminals).
std::string RenderDiffText(const DiffReport& report, bool color = false);

// The JSON document, one line, no trailing newline.
std::string RenderDiffJson(const DiffReport& report);

}  // namespace ndt::replay
