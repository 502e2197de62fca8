#!/usr/bin/env bash
# `cmake --install` gives a relocatable ndtrace: installed to one prefix, moved to another, it
# records a program with the libndtrace.so beside it (not the build's) and checks it.
# usage: install_test.sh BUILD_DIR PROGRAM STANDIN_LIB_DIR
set -uo pipefail
build=$1 program=$2 standin=$3
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/first" >"$tmp/install.log" 2>&1 || fail "cmake --install: $(tail -3 "$tmp/install.log")"
for file in bin/ndtrace bin/libndtrace.so bin/python/sitecustomize.py; do
  [ -e "$tmp/first/$file" ] || fail "$file not installed"
done
mv "$tmp/first" "$tmp/moved"
ndtrace=$tmp/moved/bin/ndtrace
export LD_LIBRARY_PATH=$standin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
LD_DEBUG=files "$ndtrace" record -o "$tmp/run.ndt" -- "$program" >"$tmp/out" 2>"$tmp/err" ||
  fail "record exited $?: $(grep -v '^ *[0-9]*:' "$tmp/err" | tail -3)"
grep -q "file=$tmp/moved/bin/libndtrace.so" "$tmp/err" || fail "the program did not load the libndtrace.so beside the moved ndtrace"
"$ndtrace" stats "$tmp/run.ndt" >/dev/null || fail "stats of the trace failed"
"$ndtrace" check -n 2 -o "$tmp/check" -- "$program" >"$tmp/check.out" 2>&1 ||
  fail "check exited $?: $(tail -2 "$tmp/check.out")"
grep -q '^ndtrace check: deterministic' "$tmp/check.out" || fail "no verdict line"
echo "PASS: installed, moved, recorded and checked with its own libndtrace.so"
