#!/usr/bin/env bash
# The main job's demo: installs what is needed, builds ndtrace, writes a trace and shows it.
# Until the tracer lands, the trace is a synthetic training loop written through the trace
# writer (no GPU and no traced program involved); `ndtrace check` replaces this later.
set -euo pipefail
cd "$(dirname "$0")/.."

tools/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release --target ndtrace ndtrace-synth

bin=build/release/tools
trace=build/demo/synthetic.ndt
mkdir -p build/demo
echo
echo "== writing a synthetic 4-thread training loop through the trace writer (no GPU involved)"
"$bin/ndtrace-synth" -o "$trace" --steps 200 --threads 4 --streams 2
echo
echo "== ndtrace stats $trace"
"$bin/ndtrace" stats "$trace"
echo
echo "== ndtrace show $trace --limit 30"
"$bin/ndtrace" show "$trace" --limit 30
echo
echo "== ndtrace export $trace --format perfetto -o build/demo/synthetic.perfetto.json"
"$bin/ndtrace" export "$trace" --format perfetto -o build/demo/synthetic.perfetto.json
echo "open build/demo/synthetic.perfetto.json in https://ui.perfetto.dev to see one track per stream"
