#!/bin/sh
# Traces recorded on an NVIDIA H200 (driver 580.159, cuDNN 9.19, cuBLAS 13.1, PyTorch 2.11 from
# pip) by gpu_suite.sh on 2026-11-27 (tests/gpu/results/), diffed here without a GPU: the
# verdicts real libraries' kernel arguments must give. "first-*" were recorded by the tracer
# before the fixes that run prompted (by-value struct arguments as bytes only), "second-*" after
# (device pointers inside structs recorded as arguments of their own).
#
# usage: h200_traces_test.sh NDTRACE DATA_DIR   (DATA_DIR: tests/data/h200)
set -u
ndtrace=${1:?usage: h200_traces_test.sh NDTRACE DATA_DIR}
data=${2:?}
failed=0

# expect NAME EXIT PATTERN A B: `ndtrace diff A B` exits EXIT and prints a line matching PATTERN.
expect() {
  out=$("$ndtrace" diff "$data/$4" "$data/$5" 2>&1)
  status=$?
  if [ "$status" -ne "$2" ] || ! printf '%s\n' "$out" | grep -q -E -- "$3"; then
    echo "FAIL: $1: exit $status (expected $2), no line matching '$3':"
    printf '%s\n' "$out" | tail -n 15
    failed=1
  else
    echo "ok: $1"
  fi
}

# Deterministic programs: real kernels' by-value Params (CUTLASS, cuDNN's engines, PyTorch's
# TensorInfo and reduce kernels) hold addresses and uninitialized bytes that differ run to run.
expect "conv_backend (cuDNN backend engine) is identical in two runs" 0 \
  "^identical: .* 0 structural differences" first-conv_backend-1.ndt first-conv_backend-2.ndt
expect "gemm --lt (cuBLASLt, CUTLASS kernels) is identical in two runs" 0 \
  "^identical: .* 0 structural differences" first-gemm_lt-1.ndt first-gemm_lt-2.ndt
expect "index_add.py --deterministic is identical (recorded before the fixes)" 0 \
  "^identical: .* 0 structural differences" first-index_add_det-1.ndt first-index_add_det-2.ndt
expect "index_add.py --deterministic is identical (recorded after them)" 0 \
  "^identical: .* 0 structural differences" second-index_add_det-1.ndt second-index_add_det-2.ndt
# The same GEMMs recorded with library digests and without (the raw path): the same records,
# though cuBLAS launches its kernels from inside the call and hands the split-K reduction &alpha.
expect "gemm with and without library digests records the same ops" 0 \
  "^identical: .* 0 structural differences" second-gemm-digests.ndt second-gemm-metadata.ndt
# index_add_ with atomics: the suspect is the index_add kernel (its TensorInfo's data pointer
# is what it writes), not the fill before it.
expect "index_add.py diverges, suspect the index_add kernel" 1 \
  "suspect: op 7, kernel_launch: void at::native::indexFuncLargeIndex" \
  second-index_add-1.ndt second-index_add-2.ndt
expect "index_add.py's runs differ in no argument" 1 "2 diverged, 0 structural differences" \
  second-index_add-1.ndt second-index_add-2.ndt
exit "$failed"
