#!/usr/bin/env bash
# The main job's demo: installs what is needed, builds ndtrace and small CUDA programs, and
# runs `ndtrace check` on them: vector_add (deterministic); thread_streams (four host threads
# racing to the driver with a shared caching allocator and event pool: deterministic however
# they interleave); racy_sum (a kernel that adds floats with atomics in racing order: check
# narrows its first report down to the kernel itself); and conv_legacy (a cuDNN convolution
# whose backward-filter algorithm is nondeterministic), checked as it is and under
# `--deterministic`. On a machine
# with a GPU and driver the programs run on the GPU with the real libraries; otherwise on
# ndtrace's stand-in device (a CPU implementation of the CUDA driver, runtime and of the
# libraries' subsets used), and the output says "simulated device (no GPU found)".
set -euo pipefail
cd "$(dirname "$0")/.."

tools/install-deps.sh
cmake --preset dev >/dev/null
cmake --build --preset dev --target ndtrace ndt_tracer ndt_standin_cuda ndt_standin_cudart \
  ndt_standin_cudnn prog_vector_add prog_thread_streams prog_racy_sum prog_conv_legacy \
  prog_gpu_probe

build=build/dev
ndtrace=$build/tools/ndtrace
programs=$build/tests/programs
rm -rf build/demo
mkdir -p build/demo
echo
if "$programs/gpu_probe" >/dev/null 2>&1; then
  echo "== a GPU was found: the programs run on it"
else
  echo "== simulated device (no GPU found): the programs run on ndtrace's stand-in device"
  export LD_LIBRARY_PATH="$PWD/$build/tests/standin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

echo
echo "== ndtrace check -- vector_add            (deterministic: expect exit 0)"
status=0
"$ndtrace" check -o build/demo/vector_add -- "$programs/vector_add" || status=$?
echo "(exit $status)"

echo
echo "== ndtrace check -- thread_streams        (racing threads, deterministic results: expect exit 0)"
status=0
"$ndtrace" check -o build/demo/thread_streams -- "$programs/thread_streams" || status=$?
echo "(exit $status)"

echo
echo "== ndtrace check -- racy_sum              (atomics in racing order: expect exit 1)"
status=0
"$ndtrace" check -o build/demo/racy_sum -- "$programs/racy_sum" || status=$?
echo "(exit $status)"

echo
echo "== ndtrace check -- conv_legacy           (cuDNN bwd-filter algo 0 uses atomics: expect exit 1)"
status=0
"$ndtrace" check -o build/demo/conv -- "$programs/conv_legacy" || status=$?
echo "(exit $status)"

echo
echo "== ndtrace check --deterministic -- conv_legacy   (the policy replaces it: expect exit 0)"
status=0
"$ndtrace" check --deterministic -o build/demo/conv_deterministic -- "$programs/conv_legacy" ||
  status=$?
echo "(exit $status)"
"$ndtrace" show build/demo/conv_deterministic/run-1.ndt | grep "policy op" | grep -v " set " |
  head -3
