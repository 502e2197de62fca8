#!/usr/bin/env bash
# Makes a self-contained directory to run ndtrace and its GPU checks on another machine (a GPU
# machine with the CUDA driver, no network, no build tools): the stripped `ndtrace` with
# libndtrace.so beside it, the nvcc-built test programs, the digest kernel check, the benchmarks,
# the PyTorch scripts and gpu_suite.sh, which runs all of them there and writes the results.
#
#   tools/bundle.sh [--build DIR] [OUT_DIR]
#
# DIR: an existing build (default build/dev; configured with the dev preset and built if it has
# no ndtrace yet). OUT_DIR: default build/bundle (replaced). Then, on the GPU machine:
#   OUT_DIR/gpu_suite.sh RESULTS_DIR
# Layout (also written to OUT_DIR/BUNDLE.md):
#   bin/       ndtrace, libndtrace.so (ndtrace preloads the one beside itself)
#   programs/  tests/programs' binaries, vector_add_static (static cudart), gpu_probe and
#              tests/corpus/window_train, cg_solver, monte_carlo, amp_offload,
#              pagerank, cudnn_cnn, prefetch
#   checks/    digest_kernel_check (GPU digests against the CPU reference)
#   bench/     bench_hooks, bench_library_hooks, bench_digest, bench_digest_gpu, ...
#   pytorch/   tests/gpu/pytorch/*.py
#   lib/       this machine's copies of the non-glibc libraries the binaries need (Cap'n Proto,
#              zstd, xxHash, fmt, libstdc++); gpu_suite.sh puts them on LD_LIBRARY_PATH only
#              when the GPU machine lacks them
#   lib/cudart/ libcudart.so.13, for the shared-cudart programs when no CUDA toolkit is there
# cuDNN, cuBLAS, cuRAND and NCCL are not bundled (hundreds of MiB): the programs that use them
# find the GPU machine's through their RUNPATH (the toolkit's lib64) or LD_LIBRARY_PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
source_dir=$PWD

build=build/dev
if [ "${1:-}" = "--build" ]; then
  build=$2
  shift 2
fi
out=${1:-build/bundle}
case "$out" in
  /*) ;;
  *) out=$source_dir/$out ;;
esac

die() {
  echo "error: bundle: $*" >&2
  exit 2
}

if [ ! -x "$build/tools/ndtrace" ]; then
  [ "$build" = build/dev ] || die "$build has no tools/ndtrace: build it first"
  echo "bundle: no ndtrace in $build: building it with the dev preset" >&2
  cmake --preset dev >/dev/null
  cmake --build "$build" -j2
fi
[ -f "$build/tracer/libndtrace.so" ] || die "$build has no tracer/libndtrace.so"

rm -rf "$out"
mkdir -p "$out"/{bin,programs,checks,bench,pytorch,lib/cudart}

# copy_stripped FILE DEST_DIR: the binary without symbols (its RUNPATH stays).
copy_stripped() {
  cp "$1" "$2/"
  strip --strip-unneeded "$2/$(basename "$1")"
}

copy_stripped "$build/tools/ndtrace" "$out/bin"
copy_stripped "$build/tracer/libndtrace.so" "$out/bin"
mkdir -p "$out/bin/python"  # the Python shim, where ndtrace looks for it: beside itself
cp tools/python/sitecustomize.py "$out/bin/python/"

programs=(vector_add vector_add_static racy_sum driver_only conv_legacy conv_backend gemm
  dlopen_cublas curand_sample philox_dropout streams_graphs many_ops workers allreduce
  thread_streams lstm_train gpu_probe nvtx_ranges cupti_client cupti_correlation cupti_loader)
missing=()
for name in "${programs[@]}"; do
  if [ -x "$build/tests/programs/$name" ]; then
    copy_stripped "$build/tests/programs/$name" "$out/programs"
  else
    missing+=("programs/$name")
  fi
done
# The CUPTI client module cupti_loader loads with dlopen(RTLD_LOCAL).
if [ -f "$build/tests/programs/libcupti_module.so" ]; then
  cp "$build/tests/programs/libcupti_module.so" "$out/programs/"
else
  missing+=("programs/libcupti_module.so")
fi
# Corpus programs that launch no kernel of their own (library calls only), so that they run on a
# GPU as they are: window_train for the window replay step of gpu_suite.sh, cg_solver (cuBLAS in
# double precision), monte_carlo (cuRAND doubles), amp_offload (half and bfloat16 GEMMs),
# pagerank (cuBLAS's level-1 calls, geam and its host/device helpers), cudnn_cnn (cuDNN's
# activation, pooling, softmax, bias and batch norm; max pooling backward) and prefetch (a race
# between a copy stream and a compute stream) for its samples and op replay steps.
for name in window_train cg_solver monte_carlo amp_offload pagerank cudnn_cnn prefetch; do
  if [ -x "$build/tests/corpus/$name" ]; then
    copy_stripped "$build/tests/corpus/$name" "$out/programs"
  else
    missing+=("programs/$name")
  fi
done
if [ -x "$build/tests/digest_kernel_check" ]; then
  copy_stripped "$build/tests/digest_kernel_check" "$out/checks"
else
  missing+=("checks/digest_kernel_check")
fi
for bench in bench_hooks bench_library_hooks bench_digest bench_digest_gpu bench_trace_io \
  bench_diff; do
  if [ -x "$build/bench/$bench" ]; then
    copy_stripped "$build/bench/$bench" "$out/bench"
  else
    missing+=("bench/$bench")
  fi
done
# The end-to-end benchmark: its script and its training-shaped program.
if [ -x "$build/bench/programs/train_e2e" ]; then
  copy_stripped "$build/bench/programs/train_e2e" "$out/bench"
  cp bench/bench_e2e.sh "$out/bench/"
else
  missing+=("bench/train_e2e")
fi
cp tests/gpu/pytorch/*.py "$out/pytorch/"
cp tools/gpu_suite.sh "$out/"

# The shared libraries outside glibc and CUDA that the bundled binaries load, as resolved here.
libraries=$(for file in "$out"/{bin,programs,checks,bench}/*; do
  ldd "$file" 2>/dev/null || true
done | awk '$2 == "=>" && $3 ~ /^\// { print $1 " " $3 }' |
  grep -v -E '^lib(c|m|dl|pthread|rt)\.so' |
  grep -v -E '^lib(cuda|cudart|cudnn|cublas|cublasLt|curand|nccl)[._]' | sort -u)
while read -r name path; do
  [ -n "$name" ] && cp -L "$path" "$out/lib/$name"
done <<<"$libraries"
cudart=$(ldd "$build/tests/programs/vector_add" | awk '$1 == "libcudart.so.13" { print $3 }')
[ -n "$cudart" ] && cp -L "$cudart" "$out/lib/cudart/"

# The newest glibc symbol version any bundled binary needs: the GPU machine's glibc must be as new.
glibc=$(for file in "$out"/{bin,programs,checks,bench}/* "$out"/lib/*.so*; do
  objdump -T "$file" 2>/dev/null || true
done | grep -o 'GLIBC_[0-9.]*' | sort -u -V | tail -1)

commit=$(git -C "$source_dir" rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=
if [ -n "$(git -C "$source_dir" status --porcelain 2>/dev/null)" ]; then
  dirty=" (with uncommitted changes)"
fi
{
  echo "# ndtrace GPU bundle"
  echo
  echo "Made $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n) from commit $commit$dirty, build $build."
  echo "Needs glibc >= ${glibc#GLIBC_} and an x86-64 Linux with the CUDA driver (libcuda.so.1)."
  echo
  echo "Run: \`./gpu_suite.sh RESULTS_DIR\` (\`--help\` for options); it writes"
  echo "RESULTS_DIR/results-<date>.md and RESULTS_DIR/logs-<date>/."
  echo
  echo "| path | what |"
  echo "|---|---|"
  echo "| bin/ | ndtrace and libndtrace.so (ndtrace preloads the one beside itself) |"
  echo "| programs/ | tests/programs' CUDA programs; vector_add_static has cudart linked in |"
  echo "| checks/ | digest_kernel_check: GPU digest kernels against the CPU reference |"
  echo "| bench/ | the benchmarks (bench/README.md) |"
  echo "| pytorch/ | the PyTorch scripts (tests/gpu/pytorch/) |"
  echo "| lib/ | non-glibc libraries from the bundling machine, used only when missing there |"
  echo "| lib/cudart/ | libcudart.so.13, used only when the programs cannot find one |"
  echo "| gpu_suite.sh | runs everything and writes the results |"
  echo
  echo "Not bundled: cuDNN, cuBLAS(Lt), cuRAND, NCCL (the GPU machine's own are used)."
  if [ ${#missing[@]} -gt 0 ]; then
    echo "Not built, so not bundled: ${missing[*]}."
  fi
} >"$out/BUNDLE.md"

for item in "${missing[@]}"; do echo "bundle: warning: not built, left out: $item" >&2; done
size=$(du -sb "$out" | cut -f1)
files=$(find "$out" -type f | wc -l)
echo "bundle: $out: $((size / 1024)) KiB in $files files; needs glibc >= ${glibc#GLIBC_}"
