#!/usr/bin/env python3
"""A/B of kiln binaries or knobs with the device placement averaged out (run on the GPU machine).

Where the executor's regions land in device memory moves decode speed by up to ~1.3% on the
Llama-3.2-1B shape (bench/results/2026-12-04-h200-decode-ab-s42.md), and any change that shifts
what is allocated first can move it; an A/B of two binaries in one placement can read that as
the change's effect. This script runs every arm at several placements (`KILN_ALLOC_PAD_MB`,
src/runtime/cuda/placement.rs), interleaved, and compares arms per placement (paired) and over
all of them:

    python3 scripts/ab_placement.py --arm main=target/kiln --arm x=target/kiln-x \\
        --arm y=target/kiln:KILN_LOOP_UNROLL=4 --pads 0,32,64,96,1024 --rounds 2 \\
        --out $OUT/ab -- --shapes llama3.2-1b --synth-root target/synth --batches 1 \\
        --contexts 128 --repeats 3 --fuse

Each `--arm NAME=BINARY[:VAR=VALUE[:VAR=VALUE...]]` is a binary and the environment it runs
with; everything after `--` is passed to `BINARY bench` (with `--out` added per run). Every run
is one `kiln bench` process; round r runs each pad, and at each pad the arms in an order that
rotates with the round. The table: per arm and (shape, batch, context) row, the median tok/s
over all its runs, the spread of its per-pad medians, and against the first arm the ratio of
the medians and the median of the per-pad ratios (the paired estimate). `--dry-run` prints the
commands only; `--device cpu` in the bench arguments runs the same pipeline without a GPU
(the pads then move nothing).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def parse_arm(text):
    name, sep, rest = text.partition("=")
    if not sep or not name or not rest:
        sys.exit(f"--arm `{text}`: expected NAME=BINARY[:VAR=VALUE...]")
    binary, *envs = rest.split(":")
    env = {}
    for e in envs:
        k, sep, v = e.partition("=")
        if not sep or not k:
            sys.exit(f"--arm `{text}`: `{e}` is not VAR=VALUE")
        env[k] = v
    return name, binary, env


def rows_of(report):
    """{(shape, batch, context): tok/s} of a kiln bench JSON report's decode rows."""
    out = {}
    for m in report.get("models", []):
        for r in m.get("decode", []):
            if r.get("kiln_tok_s") is not None:
                out[(m["name"], r["batch"], r["context"])] = r["kiln_tok_s"]
    return out


def main():
    argv = sys.argv[1:]
    bench_args = []
    if "--" in argv:
        i = argv.index("--")
        argv, bench_args = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arm", action="append", required=True, help="NAME=BINARY[:VAR=VALUE...]")
    ap.add_argument("--pads", default="0,32,64,96,1024", help="KILN_ALLOC_PAD_MB values (MiB)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--out", default="target/ab-placement", help="directory for each run's report and log")
    ap.add_argument("--timeout", type=float, default=120, help="seconds per bench run")
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args(argv)
    if "--out" in bench_args:
        sys.exit("pass --out to this script, not to the bench: each run gets its own")
    arms = [parse_arm(a) for a in args.arm]
    names = [a[0] for a in arms]
    if len(set(names)) != len(names):
        sys.exit("arm names must differ")
    pads = [int(p) for p in args.pads.split(",")]
    os.makedirs(args.out, exist_ok=True)

    # results[arm][pad] = list of {row: tok/s}
    results = {n: {p: [] for p in pads} for n in names}
    t0 = time.time()
    run = 0
    for r in range(args.rounds):
        for pad in pads:
            k = (r + pads.index(pad)) % len(arms)
            for name, binary, env in arms[k:] + arms[:k]:
                run += 1
                stem = os.path.join(args.out, f"run{run:03d}-{name}-pad{pad}")
                cmd = [binary, "bench", *bench_args, "--out", stem]
                full_env = dict(os.environ, **env)
                if pad:
                    full_env["KILN_ALLOC_PAD_MB"] = str(pad)
                else:
                    full_env.pop("KILN_ALLOC_PAD_MB", None)
                shown = " ".join(f"{k}={v}" for k, v in env.items()) + (f" KILN_ALLOC_PAD_MB={pad}" if pad else "")
                if args.dry_run:
                    print(f"{shown} {' '.join(cmd)}".strip())
                    continue
                try:
                    with open(stem + ".log", "w") as log:
                        rc = subprocess.run(cmd, env=full_env, stdout=log, stderr=subprocess.STDOUT,
                                            timeout=args.timeout).returncode
                except subprocess.TimeoutExpired:
                    rc = "timeout"
                rows = {}
                if rc == 0 and os.path.exists(stem + ".json"):
                    with open(stem + ".json") as f:
                        rows = rows_of(json.load(f))
                results[name][pad].append(rows)
                got = " ".join(f"{s}/b{b}/c{c} {v:.1f}" for (s, b, c), v in sorted(rows.items()))
                print(f"[{time.time() - t0:6.0f} s] round {r + 1} pad {pad:>5} {name:<12} rc {rc}: {got}", flush=True)
    if args.dry_run:
        return

    keys = sorted({k for n in names for p in pads for rows in results[n][p] for k in rows})
    base = names[0]

    def per_pad(name, key):
        return {p: statistics.median(v) for p in pads
                if (v := [rows[key] for rows in results[name][p] if key in rows])}

    print(f"\n{'arm':<12} {'shape':<16} {'b':>2} {'ctx':>5} {'runs':>4} {'median':>9} {'pad min':>9} {'pad max':>9}"
          f" {'vs ' + base:>10} {'paired':>8}")
    for key in keys:
        b = per_pad(base, key)
        b_all = [rows[key] for p in pads for rows in results[base][p] if key in rows]
        for name in names:
            pp = per_pad(name, key)
            allv = [rows[key] for p in pads for rows in results[name][p] if key in rows]
            if not allv:
                print(f"{name:<12} {key[0]:<16} {key[1]:>2} {key[2]:>5}    0  (no result)")
                continue
            med = statistics.median(allv)
            ratio = paired = ""
            if name != base and b_all:
                ratio = f"{med / statistics.median(b_all) - 1:+.2%}"
                common = [p for p in pp if p in b]
                if common:
                    paired = f"{statistics.median(pp[p] / b[p] for p in common) - 1:+.2%}"
            print(f"{name:<12} {key[0]:<16} {key[1]:>2} {key[2]:>5} {len(allv):>4} {med:>9.1f} {min(pp.values()):>9.1f}"
                  f" {max(pp.values()):>9.1f} {ratio:>10} {paired:>8}")
    print("\nper pad (median tok/s of the arm's runs at that KILN_ALLOC_PAD_MB):")
    for key in keys:
        print(f"{key[0]} b{key[1]} c{key[2]}: " + "; ".join(
            f"{n} " + " ".join(f"{p}:{v:.1f}" for p, v in per_pad(n, key).items()) for n in names))


if __name__ == "__main__":
    main()
