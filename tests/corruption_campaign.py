#!/usr/bin/env python3
"""Corruption campaign: random mutations of real traces, every reader run on each.

Records traces of programs in tests/programs on the stand-in device (with captured buffers,
so blob chunks are in them), then mutates copies at random (a flipped bit, an overwritten
byte, a burst of random bytes, a zeroed range, a cut, a deleted, inserted or duplicated range)
and runs every command that reads a trace on each mutant:

  show, show --json, stats, stats --json, export --format json, export --format perfetto,
  export --diff (mutant as either side), diff (mutant as either side), diff --json,
  run --pin MUTANT (the CLI check in front of the tracer), replay --op 0

A closed trace has no byte the reader does not use (formats/README.md, "What the reader
promises"), so every mutant must be reported by every reader: `error:` lines on stderr and exit
status 2, or, for a cut that leaves whole chunks only, the `warning: ... is incomplete` line.
Nothing may crash (a signal or exit status 3), hang (--timeout) or print its damage into the
report (stdout). Prints one line per failure and the totals; exits 1 if anything failed.

usage: corruption_campaign.py BUILD_DIR [--mutants N] [--seed S] [--timeout SECONDS]
"""

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

PROGRAMS = [
    # (program, arguments, --capture spec): captured buffers make blob chunks
    ("vector_add", [], "0-40"),
    ("gemm", [], "0-40"),
    ("thread_streams", [], "0-30"),
    ("streams_graphs", [], "0-30"),
    ("curand_sample", [], "0-20"),
]


def run(argv, env, timeout, stdin=subprocess.DEVNULL):
    try:
        p = subprocess.run(argv, env=env, stdin=stdin, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=timeout)
        return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")
    except subprocess.TimeoutExpired:
        return None, "", ""


def mutate(data, rng):
    """A changed copy of `data` and a description of the change."""
    n = len(data)
    kind = rng.choice(["flip", "byte", "burst", "zero", "cut", "delete", "insert", "duplicate"])
    out = bytearray(data)
    at = rng.randrange(n)
    if kind == "flip":
        bit = rng.randrange(8)
        out[at] ^= 1 << bit
        what = f"flip bit {bit} of byte {at}"
    elif kind == "byte":
        out[at] = (out[at] + rng.randrange(1, 256)) % 256
        what = f"overwrite byte {at}"
    elif kind == "burst":
        length = min(rng.randrange(2, 65), n - at)
        out[at:at + length] = bytes(rng.randrange(256) for _ in range(length))
        what = f"random bytes {at}..{at + length}"
    elif kind == "zero":
        length = min(rng.randrange(1, 257), n - at)
        out[at:at + length] = bytes(length)
        what = f"zero bytes {at}..{at + length}"
    elif kind == "cut":
        out = out[:at]
        what = f"cut at byte {at}"
    elif kind == "delete":
        length = min(rng.randrange(1, 4097), n - at)
        del out[at:at + length]
        what = f"delete bytes {at}..{at + length}"
    elif kind == "insert":
        length = rng.randrange(1, 257)
        out[at:at] = bytes(rng.randrange(256) for _ in range(length))
        what = f"insert {length} bytes at {at}"
    else:
        length = min(rng.randrange(1, 4097), n - at)
        to = rng.randrange(n)
        out[to:to] = data[at:at + length]
        what = f"duplicate bytes {at}..{at + length} at {to}"
    return bytes(out), kind, what


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("build")
    parser.add_argument("--mutants", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=20.0)
    parser.add_argument("--keep", help="directory to keep failing mutants in")
    parser.add_argument("--ndtrace", help="the ndtrace binary whose readers run (default: BUILD's)")
    args = parser.parse_args()

    build = os.path.abspath(args.build)
    recorder = os.path.join(build, "tools", "ndtrace")
    ndtrace = os.path.abspath(args.ndtrace) if args.ndtrace else recorder
    standin = os.path.join(build, "tests", "standin", "lib")
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = standin + (":" + env["LD_LIBRARY_PATH"]
                                        if env.get("LD_LIBRARY_PATH") else "")
    env.pop("NDTRACE_PIN", None)
    rng = random.Random(args.seed)
    work = tempfile.mkdtemp(prefix="ndt-corruption-")
    try:
        originals = []
        for program, program_args, capture in PROGRAMS:
            path = os.path.join(build, "tests", "programs", program)
            if not os.path.exists(path):
                print(f"skip: {program} not built")
                continue
            trace = os.path.join(work, program + ".ndt")
            rc, _, err = run([recorder, "record", "--quiet", "--capture", capture, "-o", trace,
                              "--", path] + program_args, env, 120)
            if rc != 0:
                print(f"error: recording {program} failed ({rc}): {err.strip()}")
                return 2
            rc, out, _ = run([ndtrace, "stats", "--json", trace], env, 60)
            chunks = json.loads(out).get("chunks_by_kind", {}) if rc == 0 else {}
            # An op `replay --op` replays from this trace (a captured kernel), if any.
            replayable = None
            for op in range(60):
                if run([ndtrace, "replay", "--op", str(op), "--repeat", "1", trace], env,
                       60)[0] == 0:
                    replayable = op
                    break
            with open(trace, "rb") as f:
                originals.append((program, trace, f.read(), replayable))
            print(f"trace: {program}: {os.path.getsize(trace)} bytes, chunks {chunks}, "
                  f"replay --op {replayable}")
        if not originals:
            print("error: no test program is built")
            return 2

        readers = {
            "show": lambda m, o: [ndtrace, "show", m],
            "show --json": lambda m, o: [ndtrace, "show", "--json", m],
            "stats": lambda m, o: [ndtrace, "stats", m],
            "stats --json": lambda m, o: [ndtrace, "stats", "--json", m],
            "export json": lambda m, o: [ndtrace, "export", "--format", "json", m],
            "export perfetto": lambda m, o: [ndtrace, "export", "--format", "perfetto", m],
            "export --diff (mutant first)":
                lambda m, o: [ndtrace, "export", "--format", "perfetto", m, "--diff", o],
            "export --diff (mutant second)":
                lambda m, o: [ndtrace, "export", "--format", "perfetto", o, "--diff", m],
            "diff (mutant as A)": lambda m, o: [ndtrace, "diff", m, o],
            "diff (mutant as B)": lambda m, o: [ndtrace, "diff", o, m],
            "diff --json": lambda m, o: [ndtrace, "diff", "--json", o, m],
            "run --pin": lambda m, o: [ndtrace, "run", "--pin", m, "--", "/bin/true"],
            "replay --op": lambda m, o, op: [ndtrace, "replay", "--op", str(op), "--repeat", "1",
                                             m] if op is not None else None,
        }
        # Control: every reader accepts every original, with nothing to report about it.
        for program, original_path, _, replayable in originals:
            for name, argv in readers.items():
                command = argv(original_path, original_path, replayable) \
                    if name == "replay --op" else argv(original_path, original_path)
                if command is None:
                    continue
                rc, _, err = run(command, env, args.timeout)
                if rc != 0 or "error:" in err or "warning:" in err:
                    print(f"error: control: {name} on the original {program} trace: "
                          f"exit status {rc}: {err.strip()}")
                    return 2
        # The readers that leave `--diff`/`diff` comparisons of a trace with itself: a mutant's
        # companion is its own original, so a report that says "identical" is no excuse.
        totals = {name: [0, 0, 0, 0] for name in readers}  # runs, reported, crashes, hangs
        failures = []
        inconsistent = []  # mutants show/stats report and a comparing reader does not
        kinds = {}
        mutant_path = os.path.join(work, "mutant.ndt")
        for i in range(args.mutants):
            program, original_path, data, replayable = rng.choice(originals)
            mutated, kind, what = mutate(data, rng)
            if mutated == data:
                continue
            kinds[kind] = kinds.get(kind, 0) + 1
            reported_by = set()
            # Companion files (A.<pid>) must not exist beside the mutant: one name per run.
            with open(mutant_path, "wb") as f:
                f.write(mutated)
            for name, argv in readers.items():
                command = argv(mutant_path, original_path, replayable) \
                    if name == "replay --op" else argv(mutant_path, original_path)
                if command is None:
                    continue
                totals[name][0] += 1
                rc, out, err = run(command, env, args.timeout)
                problem = None
                if rc is None:
                    totals[name][3] += 1
                    problem = "hang"
                elif rc < 0 or rc == 3 or "internal" in err or "Sanitizer" in err:
                    totals[name][2] += 1
                    problem = f"crash (status {rc})"
                else:
                    mentions = [line for line in err.splitlines()
                                if mutant_path in line and line.startswith(("error:", "warning:"))]
                    damaged = any(line.startswith("error:") for line in mentions)
                    incomplete = any("incomplete" in line for line in mentions)
                    if damaged and rc == 2:
                        totals[name][1] += 1
                    elif incomplete and not damaged and rc in (0, 1, 2):
                        totals[name][1] += 1
                    elif damaged:
                        problem = f"damage reported but exit status {rc}"
                    else:
                        problem = f"not reported (exit status {rc})"
                    if problem is None and "(bytes " in out and name.startswith("diff"):
                        problem = "damage printed inside the report"
                if problem is None:
                    reported_by.add(name)
                if problem:
                    failures.append(f"{name}: {program}: {what}: {problem}")
                    if args.keep:
                        os.makedirs(args.keep, exist_ok=True)
                        shutil.copy(mutant_path, os.path.join(args.keep, f"mutant-{i}.ndt"))
            if {"show", "stats"} <= reported_by:
                missed = [n for n in readers if n not in reported_by and
                          (n.startswith(("diff", "export --diff", "run --pin")))]
                if missed:
                    inconsistent.append(f"{program}: {what}: {', '.join(missed)}")
        for line in failures:
            print("FAIL", line)
        for line in inconsistent:
            print("INCONSISTENT (show and stats report it, these do not):", line)
        print(f"mutants: {sum(kinds.values())} ({', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))})")
        print(f"{'reader':32} {'runs':>6} {'reported':>9} {'crashes':>8} {'hangs':>6}")
        for name, (runs, reported, crashes, hangs) in totals.items():
            print(f"{name:32} {runs:6} {reported:9} {crashes:8} {hangs:6}")
        all_runs = sum(t[0] for t in totals.values())
        all_reported = sum(t[1] for t in totals.values())
        print(f"reported {all_reported} of {all_runs} reader runs "
              f"({100.0 * all_reported / max(all_runs, 1):.2f} %), "
              f"{sum(t[2] for t in totals.values())} crashes, "
              f"{sum(t[3] for t in totals.values())} hangs; {len(inconsistent)} mutants show and "
              f"stats report that diff, export --diff or --pin accept")
        return 1 if failures else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
