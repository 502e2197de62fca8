#!/bin/bash
# corpus_confusion.sh: the confusion matrix of `ndtrace check` on the corpus (tests/corpus/).
# Each program is checked K times as it is (deterministic: any verdict but "deterministic" is a
# false alarm) and K times with --plant (a "deterministic" verdict is a miss; a "NOT
# deterministic" report that names the planted op counts as named). The programs that fail in
# every run (always_fails; shuffled_loader --fail, whose loader thread is still copying when it
# fails) must get that verdict (exit 4): anything else is a false alarm. Runs on the stand-in device with asynchronous streams
# (NDT_STANDIN_ASYNC=1) and two devices (NDT_STANDIN_DEVICES=2, as the corpus tests do); nothing
# here is a GPU result.
#
# usage: bench/corpus_confusion.sh [--build DIR] [-k K] [--quick] [--runs N]
#                                  [--programs a,b,...] [--keep DIR]
#   --build DIR   the build tree (default build/dev): ndtrace in tools/, the stand-in libraries in
#                 tests/standin/lib, the corpus in tests/corpus
#   -k K          checks per program and mode (default 20); --quick: K = 3
#   --runs N      at most N runs per check (`ndtrace check -n N`; default: check's own, 6;
#                 check stops at the first run that differs)
#   --programs    only these programs
#   --keep DIR    keep every check's report and traces under DIR
set -u

build=build/dev
k=20
runs=
only=
keep=
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    -k) k=$2; shift 2 ;;
    --quick) k=3; shift ;;
    --runs) runs=$2; shift 2 ;;
    --programs) only=,$2,; shift 2 ;;
    --keep) keep=$2; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "corpus_confusion: unknown argument $1" >&2; exit 2 ;;
  esac
done

ndtrace=$build/tools/ndtrace
corpus=$build/tests/corpus
standin=$build/tests/standin/lib
for needed in "$ndtrace" "$corpus/train_loop" "$standin/libcuda.so.1"; do
  [ -e "$needed" ] || { echo "corpus_confusion: $needed not found (build the dev preset)" >&2; exit 2; }
done
export LD_LIBRARY_PATH="$standin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NDT_STANDIN_ASYNC=1 NDT_STANDIN_DEVICES=2

# Program and the op its --plant makes nondeterministic (tests/corpus/CMakeLists.txt); "-": the
# program fails in every run (PROGRAM,ARG: run with ARG).
plants="train_loop:CorpusColumnDotAtomic blas_threads:cublasSgemm_v2
graph_replay:CorpusColumnDotAtomic cudnn_workspace:cudnnConvolutionBackwardFilter
lt_matmul:cublasLtMatmul dropout_rng:curandGenerateUniform monte_carlo:curandGenerateNormalDouble
racy_histogram:CorpusScatterAdd
shuffled_loader:cuMemcpyHtoDAsync_v2 async_pool:CorpusColumnDotAtomic
data_parallel:CorpusColumnDotAtomic model_parallel:CorpusColumnDotAtomic
unified_memory:CorpusColumnDotAtomic
ddp_allreduce:ncclAllReduce ddp_processes:CorpusColumnDotAtomic
pipeline_p2p:CorpusColumnDotAtomic host_callbacks:CorpusColumnDotAtomic cg_solver:cublasDgemm_v2
amp_offload:cublasGemmEx pagerank:cuMemcpy2DAsync_v2 cudnn_cnn:cudnnPoolingBackward
prefetch:race.between.streams
always_fails:-
shuffled_loader,--fail:-"

work=$(mktemp -d "${TMPDIR:-/tmp}/ndt-confusion.XXXXXX")
trap 'rm -rf "$work"' EXIT

# check PROGRAM ARGS...: runs `ndtrace check` once; sets $status, $used (runs it made) and leaves
# the report in $work/report.
check() {
  local out=$work/out
  rm -rf "$out"
  "$ndtrace" check ${runs:+-n "$runs"} -o "$out" -- "$@" >"$work/report" 2>"$work/stderr"
  status=$?
  # Program runs made: the check's own and its narrowing runs.
  used=$(grep -cE '^ndtrace check: (run [0-9]+: (exit status|killed)|narrowing run [0-9]+:)' \
    "$work/stderr")
  if [ -n "$keep" ]; then
    local dest
    dest="$keep/$(basename "$1")${2:+-plant}-$(date +%s%N)"
    mkdir -p "$dest" && cp -r "$work/report" "$work/stderr" "$out" "$dest/" 2>/dev/null
  fi
}

printf '%-24s %9s %12s %7s %9s %7s %7s %10s %10s\n' program det.checks false.alarms errors \
  planted misses named runs/det runs/plant
total_det=0 total_false=0 total_err=0 total_plant=0 total_miss=0 total_named=0
for entry in $plants; do
  program=${entry%%:*}
  op=${entry#*:}
  arg=
  case "$program" in *,*) arg=${program#*,} program=${program%%,*} ;; esac
  [ -n "$only" ] && [ "${only#*,"$program",}" = "$only" ] && continue
  [ -x "$corpus/$program" ] || { echo "$program: not built, skipped" >&2; continue; }
  false_alarms=0 errors=0 misses=0 named=0 det_runs=0 plant_runs=0 planted=0
  for _ in $(seq "$k"); do
    check "$corpus/$program" ${arg:+"$arg"}
    det_runs=$((det_runs + used))
    if [ "$op" = - ]; then  # fails in every run: any other verdict is a false alarm
      [ "$status" -ne 4 ] && false_alarms=$((false_alarms + 1))
      continue
    fi
    case "$status" in
      0) ;;
      1) false_alarms=$((false_alarms + 1)) ;;
      *) errors=$((errors + 1)) ;;
    esac
  done
  if [ "$op" != - ]; then
    for _ in $(seq "$k"); do
      check "$corpus/$program" --plant
      plant_runs=$((plant_runs + used))
      planted=$((planted + 1))
      case "$status" in
        0) misses=$((misses + 1)) ;;
        # Named: in the verdict line, the one-line summary of what the report found.
        1) grep '^ndtrace check: NOT deterministic' "$work/report" | grep -q -- "$op" &&
             named=$((named + 1)) ;;
        *) errors=$((errors + 1)) ;;
      esac
    done
  fi
  mean() { [ "$2" -gt 0 ] && awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }' || echo -; }
  printf '%-24s %9d %12d %7d %9d %7d %7d %10s %10s\n' "$program${arg:+ $arg}" "$k" "$false_alarms" "$errors" \
    "$planted" "$misses" "$named" "$(mean $det_runs "$k")" "$(mean $plant_runs $planted)"
  total_det=$((total_det + k)) total_false=$((total_false + false_alarms))
  total_err=$((total_err + errors)) total_plant=$((total_plant + planted))
  total_miss=$((total_miss + misses)) total_named=$((total_named + named))
done
printf '%-24s %9d %12d %7d %9d %7d %7d\n' total "$total_det" "$total_false" "$total_err" \
  "$total_plant" "$total_miss" "$total_named"
echo "targets: 0 false alarms, 0 misses, the planted op named in every planted check" \
  "(a program that fails in every run: a false alarm is any verdict but that one, exit 4)." \
  "Stand-in device, not a GPU."
