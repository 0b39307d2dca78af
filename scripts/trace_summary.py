#!/usr/bin/env python3
"""Where a decode step's time goes, in the graph, from a kiln block trace.

A trace is written by the CUDA executor when KILN_TRACE_OUT names a file and the kernels are
compiled with KILN_NVRTC_DEFINES=KILN_TRACE=1 (kernels/common.cuh `wait_prior_grids`): one entry
per thread block, 5 little-endian u64: the grid's %gridid, %globaltimer (ns) when the block
reached griddepcontrol.wait and when the wait returned, smid << 48 | grid blocks << 24 | block,
and %globaltimer when the block's last thread left the kernel (KILN_TRACE_BLOCK_END; 0 where a
kernel does not stamp it; session 58's traces, before 9d71c81, stamped thread 0's exit). `kiln run`
traces its decode (after prefill).

For every launch (one %gridid) this script takes its release (the first block past the wait: the
prior grid has completed), and charges launch i with release(i + 1) - release(i): its cost on the
critical path in the graph, boundary included. Launches are named from the plan's dump (the
device-loop body `loop.b1`, else `decode.b1`), matched by position in the repeating step and
checked against the grid sizes. Printed per role (the launch name without `blk.N.`): launches
per step, median and mean us per launch, us per step, the share of the step; and per launch how
many blocks were not yet resident at its release (they start their weight loads only then) and
how long before the release its first block was resident; and, from the end stamps, how long
after its release its last block ended ("span us") and how long from then until the next launch's
release ("gap us": the boundary, the time no block of either grid runs past its wait); when the
median and the 90th-percentile block ended after the release ("p50 end", "p90 end"), and a
block's median run from its own wait's return to its end ("blk us"). Not kept in --csv files.

Where TRACE.bin.phase exists (kernels with KILN_TRACE_PHASE stamps: kernels/common.cuh; the CUDA
executor writes it beside the trace, KILN_TRACE_PHASES u64 per block, 0 where a block stamped none), a second table
gives, per role that stamped, each phase's median time past a block's own wait return (the median
over launches of the median over the blocks that stamped it) beside the block's end ("blk us"); a third table
gives, for every role, the same columns past the launch's release, its wait's return first and its end last, for
the median block (each column's median) and for the block that ended last (the one that sets the launch's span), so that a late
end can be traced to a late start or to the phase that took longer.

    python3 scripts/trace_summary.py TRACE.bin PLAN.plan.txt [--skip-steps 2] [--json OUT] [--csv LAUNCHES.csv]
    python3 scripts/trace_summary.py LAUNCHES.csv[.gz] PLAN.plan.txt     (the table again from a --csv file)
"""
import argparse
import gzip
import json
import re
import statistics
import sys
from collections import defaultdict


def plan_body(dump_path):
    """The decode body in a plan dump (`loop.b1`, else `decode.b1`): (program, [(name, role, kind, blocks,
    attrs, threads, per_sm)]), role = the name without `blk.N.`, per_sm 0 where the dump gives none.
    Also scripts/coresidency.py's reader."""
    text = open(dump_path).read().splitlines()
    for program in ("loop.b1", "decode.b1"):
        body, inside = [], False
        for line in text:
            if line.startswith("program "):
                inside = line.split()[1] == program
                continue
            m = inside and re.match(r"\s+L\d+ (\S+) = (\w+)\((.*?)\) grid=\[(\d+), (\d+), (\d+)\] "
                                    r"block=\[(\d+), \d+, \d+\](?: per_sm=(\d+))?", line)
            # An unrolled loop body (`u1.`, `u2.`, ... copies of the first, src/plan/planner.rs
            # `unroll`): one copy is one step; the copies repeat its grid sizes, so the steps align
            # the same (each role's median then mixes copy boundaries and the WHILE node's).
            if m and re.match(r"u\d+\.", m.group(1)):
                continue
            if m:
                name = m.group(1)
                blocks = int(m.group(4)) * int(m.group(5)) * int(m.group(6))
                body.append((name, re.sub(r"^blk\.\d+\.", "", name), m.group(2), blocks, m.group(3), int(m.group(7)),
                             int(m.group(8) or 0)))
        if body:
            return program, body
    sys.exit(f"{dump_path}: no loop.b1 or decode.b1 program")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("plan_dump")
    ap.add_argument("--skip-steps", type=int, default=2, help="steps dropped at the start (warm-up)")
    ap.add_argument("--gap-us", type=float, default=150.0,
                    help="a graph node's blocks more than this apart belong to different launches of it")
    ap.add_argument("--json", help="write the per-role table as JSON here")
    ap.add_argument("--csv", help="write one line per launch here (release order, times in ns from the first)")
    a = ap.parse_args()

    program, body = plan_body(a.plan_dump)
    if a.trace.endswith((".csv", ".csv.gz")):
        launches = load_csv(a.trace)
        print(f"{len(launches)} launches from {a.trace}; plan {program}: {len(body)} launches per step")
    else:
        launches = load_trace(a)
    summarize(a, program, body, launches)


def load_csv(path):
    """The launches a --csv file of an earlier run holds (its times relative to its first release)."""
    out = []
    text = gzip.open(path, "rt").read() if path.endswith(".gz") else open(path).read()
    for line in text.splitlines()[1:]:
        v = [int(x) for x in line.split(",")]
        g, b, seen, rel, first, last, late = v[:7]
        end = v[7] if len(v) > 7 else 0  # files written before the end stamps (session 58) have 7 columns
        out.append({"grid": g, "blocks": b, "seen": seen, "release": rel, "first_resident": first, "last_start": last,
                    "late": late, "last_end": end if end > 0 else None})
    return out


def rel_row(np, idx, rel, t1, t2, phase, last=None):
    """[wait return, phase 0.., end] in us past the launch's release `rel`: each column's median over the launch's
    blocks `idx`, or (given `last`, its position in `idx`) the one block that ended last; None for a phase no block
    (or that block) stamped."""
    wait = (t1[idx] - rel) / 1000.0
    ph = phase[idx] + wait[:, None]  # phases are stamped past each block's own wait return
    end = (t2[idx] - rel) / 1000.0
    if last is None:
        cols = [float(np.median(wait))] + [float(np.nanmedian(ph[:, i])) if np.isfinite(ph[:, i]).any() else None
                                           for i in range(ph.shape[1])] + [float(np.median(end))]
    else:
        cols = [float(wait[last])] + [float(v) if np.isfinite(v) else None for v in ph[last]] + [float(end[last])]
    return cols


def sm_mates(np, sms, last):
    """[median over a launch's blocks of the number of its blocks on that block's SM, the same for block `last`]."""
    _, inv, counts = np.unique(sms, return_inverse=True, return_counts=True)
    per_block = counts[inv]
    return [float(np.median(per_block)), int(per_block[last])]


def load_trace(a):
    import numpy as np

    raw = np.fromfile(a.trace, dtype="<u8")
    if len(raw) == 0 or len(raw) % 5:
        sys.exit(f"{a.trace}: not a whole number of 5-word entries (a trace from before session 58 had 4)")
    raw = raw.reshape(-1, 5)
    grid, t0, t1, meta = raw[:, 0], raw[:, 1].astype(np.int64), raw[:, 2].astype(np.int64), raw[:, 3]
    t2 = raw[:, 4].astype(np.int64)
    nblocks = ((meta >> 24) & 0xFFFFFF).astype(np.int64)
    smid, block = (meta >> 48).astype(np.int64), (meta & 0xFFFFFF).astype(np.int64)

    # Phase stamps (KILN_TRACE_PHASE), relative to each block's own wait return; NaN where none.
    # Their count per block is the file's words over the trace's blocks (KILN_TRACE_PHASES).
    phase = None
    try:
        praw = np.fromfile(a.trace + ".phase", dtype="<u8")
    except FileNotFoundError:
        praw = None
    if praw is not None and len(praw) > 0 and len(praw) % len(raw) == 0:
        praw = praw.reshape(len(raw), -1).astype(np.int64)
        phase = np.where(praw > 0, (praw - t1[:, None]) / 1000.0, np.nan)
    elif praw is not None:
        print(f"{a.trace}.phase: {len(praw)} words for {len(raw)} blocks (not a whole number each); phases not read")

    # %gridid names a graph node, not one launch of it: a device loop's body nodes keep theirs over
    # the iterations. So a node's blocks are split into launches where their wait returns are more
    # than --gap-us apart (a launch's blocks start within its own run, a step later is far away).
    launches = []
    order = np.lexsort((t1, grid))
    g_sorted, t_sorted = grid[order], t1[order]
    cuts = np.flatnonzero((np.diff(g_sorted) != 0) | (np.diff(t_sorted) > a.gap_us * 1000)) + 1
    for idx in np.split(order, cuts):
        rel = int(t1[idx].min())
        ends = t2[idx][t2[idx] > 0]
        whole = len(ends) == len(idx)  # every block stamped its end (KILN_TRACE_BLOCK_END)
        last = int(np.argmax(t2[idx])) if whole else None  # the last-ending block's position in idx
        launches.append({
            "grid": int(grid[idx[0]]),
            "blocks": int(nblocks[idx[0]]),
            "seen": len(idx),
            "release": rel,
            "first_resident": int(t0[idx].min()),
            "late": int((t0[idx] > rel).sum()),
            "last_start": int(t1[idx].max()),
            # None unless every block stamped its end (a kernel without KILN_TRACE_BLOCK_END stamps none)
            "last_end": int(ends.max()) if whole else None,
            # the median and 90th percentile block's end after the release, and a block's median run past its wait
            "end_q": ([float(q - rel) for q in np.percentile(ends, [50, 90])] + [float(np.median(t2[idx] - t1[idx]))])
            if whole else None,
            # each phase's median over the blocks that stamped it (us past their own wait), None where none did
            "phases": [float(np.nanmedian(phase[idx, i])) if np.isfinite(phase[idx, i]).any() else None
                       for i in range(phase.shape[1])] if phase is not None else None,
            # where the launch's time goes, us past its release: [wait return, phase 0.., end] of its median block
            # (each column's median) and of the block that ended last (None without end stamps or phases)
            "rel_median": rel_row(np, idx, rel, t1, t2, phase) if phase is not None and whole else None,
            "rel_last": rel_row(np, idx, rel, t1, t2, phase, last) if phase is not None and whole else None,
            # the last-ending block's index, and how many of the launch's blocks ran on its SM (itself included),
            # and on the median block's SM
            "last_block": int(block[idx][last]) if whole else None,
            "sm_mates": sm_mates(np, smid[idx], last) if whole else None,
            "_idx": idx,
            "_last": last,
        })
    launches.sort(key=lambda l: l["release"])
    # The next launch's blocks already resident (past their pre-wait work) on a block's SM before that block ended:
    # [median over the launch's blocks, the last-ending block's]; they share the SM's issue slots and memory pipes.
    # The same for the launch after that, and the last block's resident time (its arrival at the wait) past the release.
    for i, cur in enumerate(launches):
        idx = cur["_idx"]
        cur["next_mates"] = None
        if i + 2 >= len(launches) or cur["sm_mates"] is None:
            continue
        last = cur["_last"]
        row = []
        for nxt in launches[i + 1:i + 3]:
            nidx = nxt["_idx"]
            nsm, nt0 = smid[nidx], t0[nidx]
            per = np.array([int(((nsm == smid[b]) & (nt0 < t2[b])).sum()) for b in idx])
            row += [float(np.median(per)), int(per[last])]
        cur["next_mates"] = row + [float(np.median(t0[idx] - cur["release"])) / 1000.0,
                                   float(t0[idx][last] - cur["release"]) / 1000.0]
    for cur in launches:
        cur.pop("_idx", None)
        cur.pop("_last", None)
    ticks = np.unique(t1)
    res = int(np.diff(ticks).min()) if len(ticks) > 1 else 0
    print(f"timer: smallest step between distinct wait-return stamps {res} ns")
    if a.csv:
        z = launches[0]["release"]
        with open(a.csv, "w") as f:
            f.write("grid,blocks,seen,release_ns,first_resident_ns,last_start_ns,late,last_end_ns\n")
            for l in launches:
                end = l["last_end"] - z if l["last_end"] is not None else 0
                f.write(f"{l['grid']},{l['blocks']},{l['seen']},{l['release'] - z},{l['first_resident'] - z},"
                        f"{l['last_start'] - z},{l['late']},{end}\n")
    incomplete = sum(1 for l in launches if l["seen"] != l["blocks"])
    print(f"{len(raw)} blocks, {len(launches)} launches ({incomplete} with blocks missing: the buffer was full, or --gap-us split a launch)")
    return launches


def summarize(a, program, body, launches):

    # Align: the first launch whose block count starts a run matching the body.
    period = len(body)
    sizes = [l["blocks"] for l in launches]
    want = [b[3] for b in body]
    start = next((s for s in range(min(period, len(sizes))) if all(
        sizes[s + k] == want[k % period] for k in range(min(3 * period, len(sizes) - s)))), None)
    if start is None:
        sys.exit("the trace's grid sizes do not repeat the plan's body; wrong plan dump?")
    steps = (len(launches) - start) // period
    print(f"aligned at launch {start}: {steps} whole steps; skipping {a.skip_steps}")

    per_role = defaultdict(list)
    late = defaultdict(list)
    lead = defaultdict(list)
    span = defaultdict(list)
    gap = defaultdict(list)
    endq = defaultdict(list)
    n_phases = max((len(l["phases"]) for l in launches if l.get("phases")), default=0)
    phases = defaultdict(lambda: [[] for _ in range(n_phases)])
    rel_med = defaultdict(lambda: [[] for _ in range(n_phases + 2)])
    rel_last = defaultdict(lambda: [[] for _ in range(n_phases + 2)])
    mates = defaultdict(list)
    last_blocks = defaultdict(list)
    step_us = []
    mismatches = 0
    for s in range(a.skip_steps, steps - 1):
        base = start + s * period
        seq = launches[base:base + period + 1]
        if any(seq[k]["blocks"] != want[k] for k in range(period)):
            mismatches += 1
            continue
        total = (seq[period]["release"] - seq[0]["release"]) / 1000.0
        # A step whose next release is far away crosses a burst boundary (host work): skip it.
        step_us.append(total)
        for k in range(period):
            role = body[k][1]
            per_role[role].append((seq[k + 1]["release"] - seq[k]["release"]) / 1000.0)
            late[role].append(seq[k]["late"] / max(seq[k]["blocks"], 1))
            lead[role].append((seq[k]["release"] - seq[k]["first_resident"]) / 1000.0)
            if seq[k]["last_end"] is not None:
                span[role].append((seq[k]["last_end"] - seq[k]["release"]) / 1000.0)
                gap[role].append((seq[k + 1]["release"] - seq[k]["last_end"]) / 1000.0)
            if seq[k].get("end_q") is not None:
                endq[role].append([x / 1000.0 for x in seq[k]["end_q"]])
            for i, v in enumerate(seq[k].get("phases") or []):
                if v is not None:
                    phases[role][i].append(v)
            if seq[k].get("sm_mates") is not None:
                mates[role].append(seq[k]["sm_mates"] + (seq[k].get("next_mates") or [float("nan")] * 6))
                last_blocks[role].append(seq[k]["last_block"])
            for key, acc in (("rel_median", rel_med), ("rel_last", rel_last)):
                for i, v in enumerate(seq[k].get(key) or []):
                    if v is not None:
                        acc[role][i].append(v)
    if not step_us:
        sys.exit("no whole steps after the skip")
    med_step = statistics.median(step_us)
    # Steps that cross a burst boundary (the host between two graph launches) are outliers.
    good = [x for x in step_us if x < 1.5 * med_step]
    print(f"steps used {len(step_us)} ({mismatches} misaligned skipped); step us median {med_step:.1f} "
          f"(min {min(step_us):.1f}, max {max(step_us):.1f}; {len(step_us) - len(good)} over 1.5x the median)")

    counts = defaultdict(int)
    for b in body:
        counts[b[1]] += 1
    rows = []
    for role in dict.fromkeys(b[1] for b in body):
        v = per_role[role]
        med = statistics.median(v)
        mean = statistics.fmean([x for x in v if x < 1.5 * med_step])
        rows.append({
            "role": role, "kernel": next(b[2] for b in body if b[1] == role), "per_step": counts[role],
            "blocks": next(b[3] for b in body if b[1] == role),
            "median_us": med, "mean_us": mean, "us_per_step": med * counts[role],
            "late_blocks": statistics.median(late[role]), "resident_lead_us": statistics.median(lead[role]),
            "span_us": statistics.median(span[role]) if span[role] else None,
            "gap_us": statistics.median(gap[role]) if gap[role] else None,
            "end_p50_us": statistics.median(q[0] for q in endq[role]) if endq[role] else None,
            "end_p90_us": statistics.median(q[1] for q in endq[role]) if endq[role] else None,
            "block_run_us": statistics.median(q[2] for q in endq[role]) if endq[role] else None,
        })
    tot = sum(r["us_per_step"] for r in rows)
    print(f"{'role':<16} {'kernel':<18} {'n':>3} {'blocks':>6} {'med us':>7} {'mean us':>7} {'us/step':>8} {'share':>6} "
          f"{'late':>5} {'lead us':>7} {'span us':>7} {'gap us':>6} {'p50 end':>7} {'p90 end':>7} {'blk us':>6}")
    opt = lambda v, w: f"{v:>{w}.2f}" if v is not None else f"{'-':>{w}}"
    for r in rows:
        print(f"{r['role']:<16} {r['kernel']:<18} {r['per_step']:>3} {r['blocks']:>6} {r['median_us']:>7.2f} "
              f"{r['mean_us']:>7.2f} {r['us_per_step']:>8.1f} {r['us_per_step'] / tot:>6.1%} {r['late_blocks']:>5.0%} "
              f"{r['resident_lead_us']:>7.2f} {opt(r['span_us'], 7)} {opt(r['gap_us'], 6)} {opt(r['end_p50_us'], 7)} "
              f"{opt(r['end_p90_us'], 7)} {opt(r['block_run_us'], 6)}")
    print(f"sum of medians per step {tot:.1f} us; median step {med_step:.1f} us")
    stamped = [r for r in rows if any(phases[r["role"]][i] for i in range(n_phases))]
    if stamped:
        print("phases (KILN_TRACE_PHASE), us past a block's own wait return, median block; blk us = its end")
        print(f"{'role':<16} {'kernel':<18} " + " ".join(f"{'phase ' + str(i):>7}" for i in range(n_phases)) + f" {'blk us':>6}")
        for r in stamped:
            ph = [statistics.median(phases[r["role"]][i]) if phases[r["role"]][i] else None for i in range(n_phases)]
            print(f"{r['role']:<16} {r['kernel']:<18} " + " ".join(opt(v, 7) for v in ph) + f" {opt(r['block_run_us'], 6)}")
            r["phases_us"] = ph
        print("the same, us past the launch's release (median over launches): the median block's columns, then the "
              "last-ending block's")
        print("(sm mates: the launch's blocks on the block's SM, itself included; next, next2: the next launch's and the "
              "one after's blocks resident there before the block ended; resident: when the block reached its wait, past "
              "the release; means over launches)")
        print(f"{'role':<16} {'block':<18} {'wait':>7} " + " ".join(f"{'phase ' + str(i):>7}" for i in range(n_phases))
              + f" {'end':>7} {'sm mates':>8} {'next':>5} {'next2':>5} {'resident':>8}")
        for r in rows:
            for j, (name, acc) in enumerate((("median", rel_med), ("last to end", rel_last))):
                cols = [statistics.median(v) if v else None for v in acc[r["role"]]]
                m = statistics.fmean(x[j] for x in mates[r["role"]]) if mates[r["role"]] else None
                extra = []
                for off, w in ((2, 5), (4, 5), (6, 8)):
                    xs = [x[off + j] for x in mates[r["role"]] if x[off + j] == x[off + j]]
                    extra.append(opt(statistics.fmean(xs) if xs else None, w))
                if any(c is not None for c in cols):
                    print(f"{r['role']:<16} {name:<18} " + " ".join(opt(v, 7) for v in cols) + f" {opt(m, 8)} " + " ".join(extra))
                    r["rel_" + ("median" if name == "median" else "last") + "_us"] = cols
            if not last_blocks[r["role"]]:
                continue
            # which blocks end last (block index: blockIdx.x + gridDim.x * blockIdx.y), how often
            r["last_blocks"] = dict(sorted(((b, last_blocks[r["role"]].count(b)) for b in set(last_blocks[r["role"]])),
                                           key=lambda kv: -kv[1]))
            print(f"{'':<16} last blocks (index: launches) " + ", ".join(f"{b}: {n}" for b, n in list(r["last_blocks"].items())[:12]))
    if a.json:
        json.dump({"program": program, "step_us_median": med_step, "steps": len(step_us), "roles": rows},
                  open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
