#!/usr/bin/env bash
# Runs ndtrace's GPU checks from a bundle (tools/bundle.sh) against the machine's real CUDA
# driver and libraries, and writes what it saw, raw, to RESULTS_DIR/results-<date>.md (with each
# command's whole output in RESULTS_DIR/logs-<date>/). Judging the figures is left to the reader.
#
#   gpu_suite.sh [--standin DIR] [--budget SECONDS] [--steps LIST] [--work DIR] RESULTS_DIR
#
#   --standin DIR   run on the stand-in device instead (DIR: the stand-in libraries, put first on
#                   LD_LIBRARY_PATH): tests this script without a GPU; the results say so on top
#   --budget S      time for the whole suite (default 480); each command runs under `timeout`
#                   with at most what is left, and a step that finds none left says so
#   --steps LIST    comma list of steps to run (default all, in this order): facts, samples,
#                   digest, bench, gputime, replay, bisect, pytorch, policy, overhead
#   --work DIR      where traces go (default: a temporary directory, removed at the end)
#
# Exit 0 when the results file was written (whatever the checks found), 2 on bad arguments.
set -uo pipefail

bundle=$(cd "$(dirname "$0")" && pwd)
ndtrace=$bundle/bin/ndtrace
programs=$bundle/programs

usage() {
  sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
}
die() {
  echo "error: gpu_suite: $*" >&2
  exit 2
}

standin=
budget=480
steps=facts,samples,digest,bench,gputime,replay,bisect,pytorch,policy,overhead
work=
results_dir=
while [ $# -gt 0 ]; do
  case "$1" in
    --standin) [ $# -ge 2 ] || die "--standin needs a directory"; standin=$2; shift 2 ;;
    --budget) [ $# -ge 2 ] || die "--budget needs seconds"; budget=$2; shift 2 ;;
    --steps) [ $# -ge 2 ] || die "--steps needs a list"; steps=$2; shift 2 ;;
    --work) [ $# -ge 2 ] || die "--work needs a directory"; work=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) [ -z "$results_dir" ] || die "one RESULTS_DIR only"; results_dir=$1; shift ;;
  esac
done
[ -n "$results_dir" ] || die "missing RESULTS_DIR (see --help)"
case "$budget" in '' | *[!0-9]*) die "--budget: not a number of seconds: $budget" ;; esac
for step in ${steps//,/ }; do
  case "$step" in
    facts | samples | digest | bench | gputime | replay | bisect | pytorch | policy | overhead) ;;
    *) die "--steps: unknown step $step" ;;
  esac
done
[ -x "$ndtrace" ] || die "no $ndtrace: run this script from a bundle (tools/bundle.sh)"
if [ -n "$standin" ]; then
  [ -f "$standin/libcuda.so.1" ] || die "--standin: no libcuda.so.1 in $standin"
  standin=$(cd "$standin" && pwd)
fi

stamp=$(date -u +%Y%m%d-%H%M%S)
mkdir -p "$results_dir/logs-$stamp" || die "cannot create $results_dir/logs-$stamp"
results_dir=$(cd "$results_dir" && pwd)
results=$results_dir/results-$stamp.md
logs=$results_dir/logs-$stamp
if [ -z "$work" ]; then
  work=$(mktemp -d "${TMPDIR:-/tmp}/ndtrace-gpu-suite.XXXXXX") || die "mktemp"
  trap 'rm -rf "$work"' EXIT
else
  mkdir -p "$work" || die "cannot create $work"
  work=$(cd "$work" && pwd)
fi
deadline=$(($(date +%s) + budget))
command_number=0

say() { printf '%s\n' "$*" >>"$results"; }
wants() { case ",$steps," in *",$1,"*) return 0 ;; esac; return 1; }

# run CAP LINES COMMAND...: runs COMMAND (output to its own log) for at most CAP seconds and what
# is left of the budget; writes the command, its exit status (124: timed out), its time and
# LINES of its output to the results: `tail:N` (the last N lines), `-v:PATTERN` (the lines not
# matching a grep -E pattern) or a grep -E pattern (the lines matching), at most 40 lines. Sets
# $status and $log. A command that finds no time left is not run (status 125).
run() {
  local cap=$1 lines=$2
  shift 2
  local left=$((deadline - $(date +%s)))
  command_number=$((command_number + 1))
  log=$logs/$(printf '%03d' "$command_number")-$(basename "$1").log
  say ""
  say "\`\$ $*\`"
  if [ "$left" -lt 3 ]; then
    status=125
    say ""
    say "not run: time budget spent"
    return
  fi
  [ "$cap" -gt "$left" ] && cap=$left
  local start end
  start=$(date +%s.%N)
  timeout -k 5 "$cap" "$@" >"$log" 2>&1 </dev/null
  status=$?
  end=$(date +%s.%N)
  local seconds timed_out=
  seconds=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.2f", b - a }')
  [ "$status" -eq 124 ] && timed_out=" (timed out after $cap s)"
  say ""
  say "exit $status$timed_out, $seconds s, log $(basename "$logs")/$(basename "$log")"
  local shown
  case "$lines" in
    tail:*) shown=$(tail -n "${lines#tail:}" "$log") ;;
    -v:*) shown=$(grep -v -E -- "${lines#-v:}" "$log" | head -n 40) ;;
    *) shown=$(grep -E -- "$lines" "$log" | head -n 40) ;;
  esac
  if [ -n "$shown" ]; then
    say '```'
    say "$shown"
    say '```'
  fi
}

# The first checksum line of the last command's log, or "-".
checksum_of_log() {
  local sum
  sum=$(sed -n 's/^checksum \([0-9a-f]*\)$/\1/p' "$log" | head -n 1)
  echo "${sum:--}"
}

# --- setup -----------------------------------------------------------------------------------

{
  if [ -n "$standin" ]; then
    echo "# ndtrace GPU suite: stand-in device, not a GPU"
    echo
    echo "Every figure below comes from ndtrace's stand-in device (a CPU implementation of the"
    echo "CUDA driver and libraries, $standin): it tests this script, it is never a GPU result."
  else
    echo "# ndtrace GPU suite"
  fi
  echo
  echo "- started: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n) ($(uname -srm))"
  echo "- bundle: $bundle ($(sed -n 's/^Made //p' "$bundle/BUNDLE.md" 2>/dev/null))"
  echo "- budget: $budget s; steps: $steps; work: $work"
} >"$results"

if [ -n "$standin" ]; then
  export LD_LIBRARY_PATH=$standin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
# The bundling machine's copies of libraries this machine lacks (Cap'n Proto, fmt, ...).
# (libndtrace.so needs a subset of what ndtrace needs.)
if ! "$ndtrace" --version >/dev/null 2>&1; then
  export LD_LIBRARY_PATH=$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  say "- ndtrace does not start with this machine's libraries alone: the bundle's lib/ is first"
  say "  on LD_LIBRARY_PATH"
  "$ndtrace" --version >/dev/null 2>>"$logs/000-setup.log" ||
    say "- **ndtrace does not start even so** ($(basename "$logs")/000-setup.log): nothing works"
fi
if ldd "$programs/vector_add" 2>/dev/null | grep -q 'libcudart.so.13 => not found'; then
  export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$bundle/lib/cudart
  say "- no libcudart.so.13 found here: the bundle's lib/cudart is last on LD_LIBRARY_PATH"
fi
# cuDNN, cuBLAS, cuRAND, NCCL and CUPTI where the programs' RUNPATH (the toolkit's lib) and the
# loader's search find none: a machine whose PyTorch came from pip has them in Python's `nvidia`
# packages, the toolkit has CUPTI under extras/. Their directories go last on LD_LIBRARY_PATH.
find_libraries() {
  local -a roots=(/usr/local/cuda/extras/CUPTI/lib64 /usr/local/cuda/lib64 /usr/local/cuda/targets)
  local python_dir
  if python_dir=$(python3 -c 'import os, sys
print("\n".join(os.path.join(p, "nvidia") for p in sys.path
                if os.path.isdir(os.path.join(p, "nvidia"))))' 2>/dev/null); then
    while read -r dir; do [ -n "$dir" ] && roots+=("$dir"); done <<<"$python_dir"
  fi
  local library dir found=
  for library in libcudnn.so.9 libcublas.so.13 libcublasLt.so.13 libcurand.so.10 libnccl.so.2 \
    libcupti.so.13; do
    if [ "$library" = libcupti.so.13 ]; then
      ldconfig -p 2>/dev/null | grep -q "$library" && continue
    elif ! ldd "$programs"/* 2>/dev/null | grep -q "$library => not found"; then
      continue
    fi
    dir=$(find "${roots[@]}" -name "$library" -print -quit 2>/dev/null)
    [ -n "$dir" ] || continue
    dir=$(dirname "$dir")
    case ":${LD_LIBRARY_PATH:-}:" in
      *":$dir:"*) ;;
      *)
        found="$found:$dir"
        export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$dir
        ;;
    esac
  done
  [ -z "$found" ] || say "- CUDA libraries the loader did not find, from: ${found#:}"
}
[ -n "$standin" ] || find_libraries
say "- LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
# The hook benchmarks measure the driver and libraries this suite uses, with this libndtrace.so.
# bench_library_hooks dlopens cuBLAS, cuDNN, ...: on a GPU it also gets the directory the
# programs' RUNPATH names (the toolkit's), where the programs find them.
export NDTRACE_BENCH_TRACER=$bundle/bin/libndtrace.so
bench_path=${LD_LIBRARY_PATH:-}
if [ -z "$standin" ] && command -v readelf >/dev/null; then
  runpath=$(readelf -d "$programs/conv_legacy" 2>/dev/null |
    sed -n 's/.*(RUNPATH).*\[\(.*\)\]$/\1/p')
  [ -n "$runpath" ] && bench_path=${bench_path:+$bench_path:}$runpath
fi
export NDTRACE_BENCH_LIBRARY_PATH=$bench_path
say "- the hook benchmarks' LD_LIBRARY_PATH=$bench_path"

say ""
say "## GPU facts"
run 30 tail:3 "$programs/gpu_probe"
probe_status=$status
if wants facts; then
  if command -v nvidia-smi >/dev/null; then
    run 30 tail:20 nvidia-smi --format=csv \
      --query-gpu=name,driver_version,memory.total,clocks.max.sm,compute_cap
    run 30 tail:30 nvidia-smi
  else
    say ""
    say "nvidia-smi: not found"
  fi
  run 10 tail:1 "$ndtrace" --version
  run 10 '=>' ldd "$ndtrace" "$bundle/bin/libndtrace.so"
  run 10 'lib(cuda|cudart|cudnn|cublas|curand|nccl)' ldd "$programs/vector_add" \
    "$programs/conv_legacy" "$programs/gemm" "$programs/curand_sample"
  run 10 tail:2 nproc
fi
if [ -z "$standin" ] && [ "$probe_status" -ne 0 ]; then
  say ""
  say "**No usable GPU (gpu_probe exit $probe_status): nothing else was run.** On a machine"
  say "without one, \`--standin DIR\` runs the suite on the stand-in device."
  echo "gpu_suite: no usable GPU; results in $results" >&2
  exit 0
fi

# --- sample programs -------------------------------------------------------------------------

# name, then its arguments (space-separated)
samples=(
  "vector_add"
  "vector_add_static"
  "racy_sum"
  "driver_only"
  "conv_legacy 2"
  "conv_backend"
  "gemm --lt"
  "curand_sample"
  "philox_dropout"
  "streams_graphs"
  "thread_streams"
  "thread_streams --plant"
  "cg_solver"
  "cg_solver --plant"
  "monte_carlo"
  "monte_carlo --plant"
  "amp_offload"
  "amp_offload --plant"
  "pagerank"
  "pagerank --plant"
  "cudnn_cnn"
  "cudnn_cnn --plant"
  "prefetch"
  "prefetch --plant"
)
# The checksums tests/programs/CMakeLists.txt expects everywhere (exact arithmetic).
declare -A expected_checksum=([vector_add]=664dc617a67a437d [vector_add_static]=664dc617a67a437d
  [driver_only]=6f521ba6690b44d7 [streams_graphs]=91a3e6e917675a59)
# A check's whole report, less its progress lines.
check_report='-v:^ndtrace check: (run [0-9]+|narrowing run [0-9]+)[ :(]'
if wants samples; then
  say ""
  say "## Sample programs"
  say ""
  say "Each program run plain, then \`ndtrace check -n 3\` (three recorded runs, each diffed"
  say "against the first). Summary table at the end of this section."
  table=()
  for sample in "${samples[@]}"; do
    read -r -a words <<<"$sample"
    name=${words[0]}
    args=("${words[@]:1}")
    say ""
    say "### $name"
    if [ -n "$standin" ] && [ "$name" = vector_add_static ]; then
      say ""
      say "not run on the stand-in: the static runtime needs the real driver's private export"
      say "tables (cuGetExportTable)"
      table+=("| $name | not run on the stand-in | | |")
      continue
    fi
    if [ ! -x "$programs/$name" ]; then
      say ""
      say "not in the bundle (not built)"
      table+=("| $name | not bundled | | |")
      continue
    fi
    run 60 '^checksum|error|Error|ERROR|engine|algo' "$programs/$name" "${args[@]}"
    sum=$(checksum_of_log)
    plain="exit $status, checksum $sum"
    expected=${expected_checksum[$name]:-}
    if [ -n "$expected" ] && [ "$sum" = "$expected" ]; then
      plain="$plain (as expected)"
    elif [ -n "$expected" ]; then
      plain="$plain (**expected $expected**)"
    fi
    run 120 "$check_report" "$ndtrace" check -n 3 -o "$work/check-$name-${#table[@]}" -- \
      "$programs/$name" "${args[@]}"
    verdict=$(grep -E '^ndtrace check:' "$log" | tail -n 1 | cut -c 1-120)
    table+=("| $name ${args[*]} | $plain | exit $status | ${verdict:-(no verdict line)} |")
  done
  say ""
  say "### Summary"
  say ""
  say "| program | plain run | check | verdict |"
  say "|---|---|---|---|"
  for row in "${table[@]}"; do say "$row"; done

  say ""
  say "### Library records built off the calling thread"
  say ""
  say "Recorded with library digests (the hook builds the record) and without"
  say "(\`NDTRACE_LIBRARY_DIGESTS=0\`, as \`ndtrace run\` records: the encoder builds it from the"
  say "call's facts), then diffed: every GEMM, matmul and generate must have the same arguments"
  say "and choice, so **0 structural differences** (outputs may differ where the program is not"
  say "deterministic, and one side has no digests)."
  for sample in "gemm" "gemm --lt" "curand_sample"; do
    read -r -a words <<<"$sample"
    [ -x "$programs/${words[0]}" ] || continue
    tag=${sample// /_}
    run 60 'ndtrace:|error' "$ndtrace" record --quiet -o "$work/raw-$tag-digests.ndt" -- \
      "$programs/${words[0]}" "${words[@]:1}"
    run 60 'ndtrace:|error' env NDTRACE_LIBRARY_DIGESTS=0 "$ndtrace" record --quiet \
      -o "$work/raw-$tag-metadata.ndt" -- "$programs/${words[0]}" "${words[@]:1}"
    run 60 'structural|different arguments|^identical|^diverged|^error' "$ndtrace" diff \
      "$work/raw-$tag-digests.ndt" "$work/raw-$tag-metadata.ndt"
  done
fi

# --- digest kernels --------------------------------------------------------------------------

if wants digest; then
  say ""
  say "## Digest kernels"
  say ""
  say "GPU digest kernels against the CPU reference on the same bytes (exit 0: all equal)."
  run 120 'passed|MISMATCH|error|skipped' "$bundle/checks/digest_kernel_check"
fi

# --- benchmarks ------------------------------------------------------------------------------

if wants bench; then
  say ""
  say "## Benchmarks"
  if [ -n "$standin" ]; then
    hook_calls=20000 library_calls=2000 digest_mib=64
  else
    hook_calls=200000 library_calls=5000 digest_mib=1024
  fi
  # The GPU-only figures first: two leases ran out of budget before bench_library_hooks.
  run 120 tail:12 "$bundle/bench/bench_digest_gpu" "$digest_mib"
  run 180 tail:26 "$bundle/bench/bench_library_hooks" "$library_calls"
  run 120 tail:12 "$bundle/bench/bench_hooks" "$hook_calls"
  # The same without GPU times: what CUPTI's part of the hook costs on this machine.
  run 120 tail:12 env NDTRACE_GPU_TIME=0 "$bundle/bench/bench_hooks" "$hook_calls"
  run 120 tail:12 "$bundle/bench/bench_digest"
  # End to end: a training-shaped program untraced, recorded three ways and under the policy.
  if [ -n "$standin" ]; then
    run 600 tail:14 bash "$bundle/bench/bench_e2e.sh" --ndtrace "$bundle/bin/ndtrace" \
      --program "$bundle/bench/train_e2e" --standin "$standin" --repeat 1 --steps 1 --layers 4 \
      --modes metadata,deterministic
  else
    run 600 tail:14 bash "$bundle/bench/bench_e2e.sh" --ndtrace "$bundle/bin/ndtrace" \
      --program "$bundle/bench/train_e2e" --gpu --repeat 3
  fi
fi

# --- GPU time from CUPTI ---------------------------------------------------------------------

if wants gputime; then
  say ""
  say "## GPU time (CUPTI)"
  say ""
  say "Recorded with GPU times from CUPTI (libcupti.so.13 as the loader finds it, or"
  say "NDTRACE_CUPTI), then without (--no-gpu-time): the note says whether CUPTI was used, stats"
  say "counts gpu_activity records, show lists the first of them, the Perfetto export's GPU"
  say "tracks; many_ops 20000 timed both ways (the cost of taking GPU times)."
  for program in racy_sum thread_streams gemm conv_backend; do
    [ -x "$programs/$program" ] || continue
    run 60 'GPU time|trace written' "$ndtrace" record -o "$work/gputime-$program.ndt" -- \
      "$programs/$program"
    run 30 'records|gpu_activity' "$ndtrace" stats "$work/gputime-$program.ndt"
    run 30 'gpu (kernel|memcpy|memset)|GPU time' "$ndtrace" show "$work/gputime-$program.ndt"
    run 30 tail:1 "$ndtrace" export "$work/gputime-$program.ndt" --format perfetto \
      -o "$work/gputime-$program.json"
    run 10 tail:5 grep -o '"name":"[^"]*· GPU"' "$work/gputime-$program.json"
  done
  # What CUPTI ties to what: API records of whole kinds (api, as ndtrace enables them) or of
  # chosen functions (cbids), CUPTI enabled before cuInit (early), after cuInit before the
  # context (mid) or after the context (default), with or without a callback subscriber
  # (ndtrace has none), the imitated hook's id popped at the next driver call.
  if [ -x "$programs/cupti_correlation" ]; then
    for mode in "api deferred" "cbids deferred nocb" "cbids deferred mid nocb" \
      "cbids deferred early nocb"; do
      run 60 -v:'^$' "$programs/cupti_correlation" $mode
    done
  fi
  # A program that is a CUPTI client of its own (as torch.profiler is), recorded, starting its
  # profiler after CUDA work and before its first CUDA call (--early): ndtrace must step aside
  # (the note) and the program count its kernels (exit 0).
  if [ -x "$programs/cupti_client" ]; then
    for flag in "" --early; do
      run 60 'cupti kernels|checksum|trace written' "$ndtrace" record \
        -o "$work/cupti_client.ndt" -- "$programs/cupti_client" $flag
      run 30 'note' "$ndtrace" show "$work/cupti_client.ndt"
    done
  fi
  # The same from a library loaded with dlopen(RTLD_LOCAL), as Python loads PyTorch's libcupti.
  if [ -x "$programs/cupti_loader" ] && [ -f "$programs/libcupti_module.so" ]; then
    for flag in "" --early; do
      run 60 'cupti memsets|trace written|error' "$ndtrace" record \
        -o "$work/cupti_loader.ndt" -- "$programs/cupti_loader" "$programs/libcupti_module.so" $flag
    done
  fi
  # The cost of taking GPU times: many_ops 20000 without and with, three times each, interleaved.
  if [ -x "$programs/many_ops" ]; then
    for round in 1 2 3; do
      for flag in --no-gpu-time ""; do
        run 120 'elapsed' bash -c 'TIMEFORMAT="elapsed %R s"; time "$@" >/dev/null' _ \
          "$ndtrace" record --quiet $flag -o "$work/gputime-many_ops.ndt" -- "$programs/many_ops" 20000
      done
    done
  fi
fi

# --- standalone op replay --------------------------------------------------------------------

# Records `$@` with every NAME op captured into TRACE, then re-runs the last one alone
# (`replay --op N` with REPLAY_OPTIONS, within TIMEOUT seconds).
replay_last() {
  local name=$1 trace=$2 timeout=$3 options=$4
  shift 4
  run 120 'ndtrace:|error' "$ndtrace" record --capture "$name" -o "$trace" -- "$@"
  local op=
  if [ "$status" -eq 0 ]; then
    # `show` lines: TIME op N tT sS KIND NAME ...
    op=$("$ndtrace" show "$trace" 2>/dev/null |
      awk -v name="$name" '$2 == "op" && $7 == name { op = $3 } END { print op }')
  fi
  say ""
  if [ -n "$op" ]; then
    say "the last $name is op $op"
    # shellcheck disable=SC2086  # the options are words
    run "$timeout" tail:30 "$ndtrace" replay "$trace" --op "$op" $options
  else
    say "no captured $name op found: replay not run"
  fi
}

if wants replay; then
  say ""
  say "## Op replay"
  say ""
  say "conv_legacy recorded with its backward-filter calls captured, then the last one re-run"
  say "alone 20 times, with its deterministic alternatives (exit 0 stable, 1 varies)."
  replay_last cudnnConvolutionBackwardFilter "$work/conv_capture.ndt" 180 \
    "--repeat 20 --try-deterministic" "$programs/conv_legacy" 2

  say ""
  say "monte_carlo recorded with its double-precision uniform draws captured, then the last one"
  say "re-run alone 5 times from its recorded state (seed, offset): matching the captured numbers"
  say "(5/5) shows the tracer advances a Philox generator's offset as the real cuRAND does (2"
  say "draws per double)."
  replay_last curandGenerateUniformDouble "$work/monte_carlo_capture.ndt" 120 "--repeat 5" \
    "$programs/monte_carlo"
fi

# --- window replay ---------------------------------------------------------------------------

if wants replay; then
  say ""
  say "## Window replay"
  say ""
  say "window_train --plant (conv + gemm training loop, backward filter ALGO_0) recorded with"
  say "--window 30:79, the program moved away, the window replayed from the trace alone 5 times"
  say "(exit 1: the varying op named), then with --try-deterministic."
  trace=$work/window_train.ndt
  cp "$programs/window_train" "$work/window_train"
  run 120 'ndtrace:|error' "$ndtrace" record --window 30:79 -o "$trace" -- \
    "$work/window_train" --plant --steps 6
  rm -f "$work/window_train"
  if [ "$status" -eq 0 ]; then
    run 180 tail:14 "$ndtrace" replay "$trace" --window 30:79
    run 180 tail:8 "$ndtrace" replay "$trace" --window 30:79 --try-deterministic
  else
    say ""
    say "window_train could not be recorded: window replay not run"
  fi
fi

# --- bisect ----------------------------------------------------------------------------------

if wants bisect; then
  say ""
  say "## Bisect"
  say ""
  say "many_ops 10000 6137: a racing launch planted at op 3 + 6137 = 6140 among 10,000 launches."
  run 240 'ndtrace bisect:|^error' "$ndtrace" bisect -o "$work/bisect-many_ops" -- \
    "$programs/many_ops" 10000 6137
fi

# --- PyTorch ---------------------------------------------------------------------------------

# torch_ready: whether PyTorch with CUDA can run here; says why not, or its versions, in the
# results. Sets $python.
torch_ready() {
  python=$(command -v python3 || true)
  local probe='import torch
assert torch.cuda.is_available(), "torch.cuda.is_available() is False"
print("torch", torch.__version__, "CUDA", torch.version.cuda, "cuDNN",
      torch.backends.cudnn.version(), "device", torch.cuda.get_device_name(0))'
  local facts
  say ""
  if [ -n "$standin" ]; then
    say "not run on the stand-in device (it runs no real kernels; PyTorch needs a GPU)"
  elif [ -z "$python" ]; then
    say "torch not available: no python3"
  elif ! facts=$(timeout 120 "$python" -c "$probe" 2>&1); then
    say "torch not available: $(printf '%s\n' "$facts" | tail -n 1)"
  else
    say "$facts"
    return 0
  fi
  return 1
}

# script_checks NAME: NAME.py run plain (its checksum, its time); under `ndtrace check` as it is;
# again with digests of every op's buffers, so that the report names the op rather than a
# suspect; and with the script's --deterministic (torch.use_deterministic_algorithms(True)).
script_checks() {
  say ""
  say "### $1.py"
  run 120 '^checksum|Error' "$python" "$1.py"
  run 240 "$check_report" "$ndtrace" check -n 3 -o "$work/torch-$1" -- "$python" "$1.py"
  run 240 "$check_report" "$ndtrace" check -n 2 --digest-window 0: -o "$work/torch-$1-window" \
    -- "$python" "$1.py"
  run 240 "$check_report" "$ndtrace" check -n 3 -o "$work/torch-$1-det" -- \
    "$python" "$1.py" --deterministic
}

if wants pytorch; then
  say ""
  say "## PyTorch"
  if torch_ready; then
    cd "$bundle/pytorch" || die "no $bundle/pytorch"
    # What tells most comes first, so that a short budget still sees it: index_add.py's checks,
    # train_step.py's counts and names, conv_benchmark.py's, replay and bisect, scatter_add.py's.
    script_checks index_add
    say ""
    say "### index_add.py: every aten op with digests of exactly its tensors (--tensor-digests)"
    run 240 "$check_report" "$ndtrace" check -n 3 --tensor-digests \
      -o "$work/torch-index_add-tensors" -- "$python" index_add.py
    say ""
    say "### train_step.py: kernel launches, trace against torch.profiler"
    run 240 '^profiler|^checksum|^ndtrace:|Error' "$ndtrace" record -o "$work/train.ndt" -- \
      "$python" train_step.py
    profiled=$(sed -n 's/^profiler kernels \([0-9]*\)$/\1/p' "$log")
    run 60 '^error' "$ndtrace" stats --json "$work/train.ndt"
    kinds=$("$python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["ops_by_kind"])' \
      "$log" 2>&1 | tail -n 1)
    traced=$(printf '%s\n' "$kinds" | sed -n "s/.*'kernel_launch': \([0-9]*\).*/\1/p")
    say ""
    say "trace ops by kind: $kinds"
    if [ -z "$traced" ] || [ -z "$profiled" ]; then
      comparison="not compared (a count is missing)"
    elif [ "$traced" = "$profiled" ]; then
      comparison=equal
    else
      comparison=DIFFER
    fi
    say "kernel launches: trace ${traced:-?}, torch.profiler ${profiled:-?}: $comparison"
    # Under ndtrace torch.profiler counted nothing on an H200 (ndtrace's interposed registration
    # missed PyTorch's RTLD_LOCAL libcupti): the same without the Python shim, then untraced,
    # with what Kineto and CUPTI say.
    run 240 '^profiler kernels|CUPTI|[Kk]ineto|^ndtrace:' "$ndtrace" record --no-python \
      -o "$work/train-no-python.ndt" -- "$python" train_step.py
    run 240 '^profiler kernels|CUPTI|[Kk]ineto' "$python" train_step.py
    say ""
    say "### train_step.py: aten ops and modules (the Python shim turned on emit_nvtx)"
    # How many of the trace's kernel launches name their aten op and module, and a sample.
    run 120 '^launches|^sample|Error' "$python" -c '
import collections, json, subprocess, sys
records = json.loads(subprocess.run([sys.argv[1], "export", "--format", "json", sys.argv[2]],
                                    capture_output=True, text=True).stdout)["records"]
launches = [r for r in records if r["type"] == "op" and r["kind"] == "kernel_launch"]
named = [r for r in launches if r.get("framework_op", "").startswith("aten::")]
moduled = [r for r in launches if r.get("module")]
print("launches", len(launches), "with an aten op", len(named), "with a module", len(moduled))
for r in collections.OrderedDict((r["framework_op"], r) for r in named).values():
    print("sample", r["framework_op"], "|", r.get("module", "-"), "|", r["name"][:80])
' "$ndtrace" "$work/train.ndt"
    script_checks conv_benchmark
    say ""
    say "### index_add.py: replay and bisect"
    if [ -f "$work/torch-index_add/run-1.ndt" ]; then
      run 240 tail:30 "$ndtrace" replay "$work/torch-index_add/run-1.ndt" --stop -- \
        "$python" index_add.py
    else
      say ""
      say "no trace of index_add.py from its check: replay not run"
    fi
    run 300 tail:30 "$ndtrace" bisect --max-runs 20 -o "$work/bisect-index_add" -- \
      "$python" index_add.py
    script_checks scatter_add
    cd "$bundle" || true
  fi
fi

# --- policies on a convolutional network -----------------------------------------------------

# The step time of the last command's log, or "-".
step_ms_of_log() {
  local ms
  ms=$(sed -n 's/^step_ms \([0-9.]*\)$/\1/p' "$log" | head -n 1)
  echo "${ms:--}"
}

if wants policy; then
  say ""
  say "## Policies on a convolutional network (cudnn.benchmark=True)"
  # workload: the program as it is; pinned: what the reference recorded and the pinned runs
  # run (a pin reproduces a selection, so the reference must have chosen among deterministic
  # algorithms only: PyTorch's cudnn.deterministic with benchmark on keeps benchmark speed).
  workload=()
  if [ -n "$standin" ]; then
    say ""
    say "On the stand-in device: conv_legacy --benchmark (its cuDNN picks algorithms by noisy"
    say "timing) in place of conv_net.py, the reference recorded under ndtrace --deterministic,"
    say "and no PyTorch rows."
    workload=("$programs/conv_legacy" --benchmark)
    pinned=("${workload[@]}")
    reference_policy=--deterministic
    configurations="plain pin deterministic"
  elif torch_ready; then
    cd "$bundle/pytorch" || die "no $bundle/pytorch"
    workload=("$python" conv_net.py)
    pinned=("$python" conv_net.py --cudnn-deterministic)
    reference_policy=
    configurations="plain cudnn-deterministic pin deterministic torch-deterministic"
  fi
  if [ ${#workload[@]} -gt 0 ]; then
    say ""
    say "Each configuration twice; equal checksums = bitwise-identical results. The reference for"
    say "--pin is recorded first."
    shown='^checksum|^step_ms|^ndtrace|Error'
    run 300 "$shown" "$ndtrace" record $reference_policy -o "$work/policy-ref.ndt" -- \
      "${pinned[@]}"
    summary=""
    for configuration in $configurations; do
      sums=""
      times=""
      for attempt in 1 2; do
        case "$configuration" in
          plain) run 180 "$shown" "${workload[@]}" ;;
          cudnn-deterministic) run 180 "$shown" "${pinned[@]}" ;;
          pin) run 180 "$shown" "$ndtrace" run --pin "$work/policy-ref.ndt" -- "${pinned[@]}" ;;
          deterministic) run 180 "$shown" "$ndtrace" run --deterministic -- "${workload[@]}" ;;
          torch-deterministic) run 180 "$shown" "${workload[@]}" --deterministic ;;
        esac
        sums="$sums $(checksum_of_log)"
        times="$times $(step_ms_of_log)"
      done
      set -- $sums
      if [ "$1" = "-" ] || [ "${2:--}" = "-" ]; then
        same="not compared (a checksum is missing)"
      elif [ "$1" = "$2" ]; then
        same=identical
      else
        same=DIFFER
      fi
      summary="$summary
| $configuration | $same |$times |"
    done
    say ""
    say "| configuration | two runs | step ms (median of the later half), each run |"
    say "|---|---|---|"
    say "${summary#?}"
    cd "$bundle" || true
  fi
fi

# --- what recording costs a PyTorch step, part by part --------------------------------------

if wants overhead; then
  say ""
  say "## What recording costs a PyTorch training step"
  if [ -z "$standin" ] && torch_ready; then
    cd "$bundle/pytorch" || die "no $bundle/pytorch"
    say ""
    say "conv_net.py --cudnn-deterministic untraced, then recorded with the defaults and with one"
    say "part off at a time, and untraced inside PyTorch's emit_nvtx (what the Python shim turns on)."
    say ""
    rows=""
    for variant in untraced untraced-emit-nvtx defaults no-library-digests no-python no-gpu-time \
      metadata; do
      case "$variant" in
        untraced) command=("$python" conv_net.py --cudnn-deterministic) ;;
        untraced-emit-nvtx) command=("$python" conv_net.py --cudnn-deterministic --emit-nvtx) ;;
        defaults) command=("$ndtrace" record --quiet -o "$work/overhead-$variant.ndt" --) ;;
        no-library-digests) command=(env NDTRACE_LIBRARY_DIGESTS=0 "$ndtrace" record --quiet
          -o "$work/overhead-$variant.ndt" --) ;;
        no-python) command=("$ndtrace" record --quiet --no-python -o "$work/overhead-$variant.ndt" --) ;;
        no-gpu-time) command=("$ndtrace" record --quiet --no-gpu-time -o "$work/overhead-$variant.ndt" --) ;;
        metadata) command=(env NDTRACE_LIBRARY_DIGESTS=0 "$ndtrace" record --quiet --no-python
          --no-gpu-time --no-exit-digest -o "$work/overhead-$variant.ndt" --) ;;
      esac
      case "$variant" in
        untraced*) ;;
        *) command+=("$python" conv_net.py --cudnn-deterministic) ;;
      esac
      run 180 '^step_ms|^checksum|Error' "${command[@]}"
      rows="$rows
| $variant | $(step_ms_of_log) |"
    done
    say ""
    say "| recording | step ms |"
    say "|---|---|"
    say "${rows#?}"
    cd "$bundle" || true
  else
    say ""
    say "not run: needs PyTorch on a GPU"
  fi
fi

say ""
used=$((budget - (deadline - $(date +%s))))
say "finished: $(date -u +%Y-%m-%dT%H:%M:%SZ), $used s of the $budget s budget"
echo "gpu_suite: results in $results" >&2
exit 0
