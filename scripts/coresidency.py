#!/usr/bin/env python3
"""Which decode launches can be resident beside the launch before them (no GPU needed).

Programmatic dependent launch lets launch i + 1's blocks start, and issue the weight loads that
depend on no kernel, while launch i still runs, but only on an SM with room for them beside
launch i's blocks: registers (64K per SM, allocated per warp in units of 256), threads (2048),
shared memory (228 KB, 1 KB reserved per block) and 32 blocks. This script compiles kiln's
kernels with NVRTC (ptxas' registers and static shared memory per entry point), reads a plan
dump's decode body (`loop.b1`, else `decode.b1`) and prints, for every pair of consecutive
launches, how many blocks of the second fit beside the first's on an SM holding as many of the
first's blocks as its grid puts on the busiest SM, and how many SMs the first leaves empty.

    LD_LIBRARY_PATH=.../nvidia/cu13/lib KILN_CUDA_INCLUDE=.../nvidia/cu13/include \\
        python3 scripts/coresidency.py MODEL.plan.txt [more dumps]
    ... python3 scripts/coresidency.py --ptxas REGEX    # ptxas' registers and spills of matching entry points

Assumes bf16 storage and tile-packed GEMV weights (the reference plans'), 132 SMs (H100/H200).
"""
import math
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import nvrtc_util  # noqa: E402
from trace_summary import plan_body  # noqa: E402

SMS, REGS, THREADS, SMEM, RESERVED = 132, 65536, 2048, 233472, 1024


def kernel_info(arch="sm_90a"):
    """{symbol: (registers, static shared bytes)} from ptxas' log of the whole module."""
    kdir = os.path.join(os.path.dirname(HERE), "kernels")
    headers = [(n, open(os.path.join(kdir, n), "rb").read()) for n in sorted(os.listdir(kdir))
               if n.endswith((".cu", ".cuh"))]
    src = "".join(f'#include "{n}"\n' for n, _ in headers if n.endswith(".cu"))
    opts = [f"--gpu-architecture={arch}", "-std=c++17", "-DKILN_GEMV_TILES=1",
            f"--include-path={nvrtc_util.cuda_include()}", "--ptxas-options=-v"]
    opts += [f"-D{d.strip()}" for d in os.environ.get("KILN_NVRTC_DEFINES", "").split(",") if d.strip()]  # as kiln
    _, log = nvrtc_util.compile_unit(src.encode(), "kiln.cu", headers, opts)
    fn, info, lines = None, {}, {}
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line)
        if m:
            fn = m.group(1)
        if fn and ("Used" in line or "spill" in line):
            lines.setdefault(fn, []).append(line.strip())
        m = re.search(r"Used (\d+) registers.*?(\d+) bytes smem", line)
        if m and fn:
            info[fn] = (int(m.group(1)), int(m.group(2)))
    kernel_info.lines = lines  # ptxas' lines per entry point, for --ptxas
    return info


def symbol(kind, attrs, per_sm, grid=0):
    """The entry point a bf16 decode launch of `kind` runs (src/runtime/cuda/abi.rs, simplified)."""
    o3 = "_o3" if per_sm == 3 else ""
    if kind == "attention_cluster":
        return "kiln_attention_cluster_g" + re.search(r"chunk_heads=(\d+)", attrs).group(1) + "_bf16"
    # The decode entry points by default (sessions 54, 55): a one-row-GEMV o / down projection calls
    # kiln_fused_linear_res_*, gate/up and the logits their GEMV-only entries; qkv_rope its own with
    # KILN_QKV_ROPE_GEMV_ENTRY=1; a res GEMV planned over twice its 16-row tiles is the k2 split
    # (plan::geometry::k2_launch).
    m = re.search(r"rows=(\d+)", attrs)
    gemv = m is not None and 1 <= int(m.group(1)) <= 8
    res = gemv and not o3 and "norm=false" in attrs and "residual=true" in attrs and "out_norm" not in attrs
    out = re.search(r"out=(\d+)", attrs)
    k2 = "k2_" if res and out and grid == 2 * math.ceil(int(out.group(1)) / 16) else ""
    g = "gemv_" if gemv and os.environ.get("KILN_GEMV_ONLY_ENTRY") != "0" else ""
    qg = "gemv_" if gemv and os.environ.get("KILN_QKV_ROPE_GEMV_ENTRY") == "1" else ""
    argmax = "argmax_" if "argmax=true" in attrs else ""
    return {
        "fused_linear": f"kiln_fused_linear_res_{k2}bf16_bf16" if res else f"kiln_fused_linear_bf16_bf16{o3}",
        "gated_linear": f"kiln_gated_linear_{g}bf16{o3}",
        "qkv_rope": f"kiln_qkv_rope_{qg}bf16{o3}",
        "linear": f"kiln_linear_{argmax}{g}bf16_f32{o3}",
        "sample": "kiln_sample_f32",
        "advance": "kiln_advance",
    }.get(kind, f"kiln_{kind}_bf16")


def regs_per_block(regs, threads):
    return math.ceil(threads / 32) * math.ceil(regs * 32 / 256) * 256


def body(dump):
    program, launches = plan_body(dump)
    return program, [dict(name=role, kind=kind, attrs=attrs, grid=blocks, threads=threads, per_sm=per_sm)
                     for _, role, kind, blocks, attrs, threads, per_sm in launches]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    info = kernel_info()
    if sys.argv[1] == "--ptxas":
        for fn, lines in sorted(kernel_info.lines.items()):
            if re.search(sys.argv[2], fn):
                print(fn + "\n  " + "\n  ".join(lines))
        return
    for dump in sys.argv[1:]:
        program, launches = body(dump)
        print(f"== {dump} ({program})")
        print(f"{'launch':>14} {'grid':>5} {'thr':>4} {'regs':>4} {'/SM':>3} -> {'next':<14} {'grid':>5} {'thr':>4} "
              f"{'regs':>4}  fit beside  empty SMs")
        seen = set()
        for i, p in enumerate(launches):
            d = launches[(i + 1) % len(launches)]
            if (p["name"], d["name"]) in seen:
                continue
            seen.add((p["name"], d["name"]))
            (rp, sp), (rd, sd) = (info.get(symbol(x["kind"], x["attrs"], x["per_sm"], x["grid"]), (32, 0)) for x in (p, d))
            bp, bd = regs_per_block(rp, p["threads"]), regs_per_block(rd, d["threads"])
            cap = min(REGS // bp, THREADS // p["threads"], SMEM // (sp + RESERVED), 32)
            busy = min(cap, math.ceil(p["grid"] / SMS))
            fit = max(0, min((REGS - busy * bp) // bd, (THREADS - busy * p["threads"]) // d["threads"],
                             (SMEM - busy * (sp + RESERVED)) // (sd + RESERVED), 32 - busy))
            empty = max(0, SMS - p["grid"]) if busy == 1 else 0
            print(f"{p['name']:>14} {p['grid']:>5} {p['threads']:>4} {rp:>4} {busy:>3} -> {d['name']:<14} {d['grid']:>5} "
                  f"{d['threads']:>4} {rd:>4}  {fit:>10}  {empty:>9}")


if __name__ == "__main__":
    main()
