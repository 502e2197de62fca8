#!/bin/sh
# Checks the ELF facts the stand-in libraries rely on (tests/standin/README.md):
# - the stand-in libcudart.so.13 defines the version node libcudart.so.13 and exports its
#   functions under it; it neither links libcuda nor imports any cu* symbol (it reaches the
#   driver only through dlopen + cuGetProcAddress_v2);
# - the stand-in libcuda.so.1 has no symbol versions, like the real one;
# - each nvcc-built PROGRAM references libcudart.so.13 with that version, and resolves it to the
#   stand-in when the stand-in directory is first on LD_LIBRARY_PATH.
#
# usage: check_elf.sh LIBCUDA LIBCUDART PROGRAM...      (exit 77: readelf or nm missing)
set -u

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

command -v readelf >/dev/null 2>&1 || { echo "readelf not found"; exit 77; }
command -v nm >/dev/null 2>&1 || { echo "nm not found"; exit 77; }

libcuda=$1
libcudart=$2
shift 2

readelf -V "$libcudart" | sed -n '/Version definition/,/Version needs/p' |
  grep -q 'Name: libcudart.so.13' || fail "$libcudart defines no version node libcudart.so.13"
readelf --dyn-syms -W "$libcudart" | grep -q ' cudaMalloc@@libcudart.so.13$' ||
  fail "$libcudart does not export cudaMalloc@@libcudart.so.13"
readelf -d "$libcudart" | grep NEEDED | grep -q 'libcuda\.so' && fail "$libcudart links libcuda"
nm -D --undefined-only "$libcudart" | grep -E ' cu[A-Z]' &&
  fail "$libcudart imports driver symbols"
echo "ok: $libcudart defines libcudart.so.13 and imports no driver symbol"

readelf -V "$libcuda" | grep -q 'Version definition' && fail "$libcuda has symbol versions"
readelf --dyn-syms -W "$libcuda" | grep -q ' cuGetProcAddress_v2$' ||
  fail "$libcuda does not export an unversioned cuGetProcAddress_v2"
echo "ok: $libcuda exports unversioned symbols"

standin_dir=$(dirname "$libcudart")
for program in "$@"; do
  readelf -V "$program" | sed -n '/Version needs/,$p' | grep -A3 'File: libcudart.so.13' |
    grep -q 'Name: libcudart.so.13' || fail "$program does not reference libcudart.so.13"
  resolved=$(LD_LIBRARY_PATH=$standin_dir ldd "$program" |
    sed -n 's/^\s*libcudart.so.13 => \(\S*\).*/\1/p')
  [ "$(dirname "$resolved")" = "$standin_dir" ] ||
    fail "$program loads libcudart.so.13 from '$resolved', not from $standin_dir"
  echo "ok: $program references libcudart.so.13@libcudart.so.13 and loads the stand-in"
done
echo "PASS"
