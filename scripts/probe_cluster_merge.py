#!/usr/bin/env python3
"""Probe (GPU, CuPy): the decode attention's splits merged inside one thread-block cluster
(distributed shared memory), against kiln's split -> merge launches.

    python3 scripts/probe_cluster_merge.py                  # on the GPU
    python3 scripts/probe_cluster_merge.py --compile-only   # no GPU: NVRTC build of the probe

Per layer (24 of the Qwen2.5-0.5B shape, 16 of the Llama-3.2-1B shape, 32 of the Llama-3.1-8B
shape, each with its own KV cache, q and o weight, so reads come from HBM as in decode), batch 1,
live position p (129, 383, 4095; caches of 4352 rows, the bench's max context), all launches with
PDL in one CUDA graph:
- `kiln`:  kiln_attention_split (the planner's splits) -> kiln_attention_merge -> kiln_linear (o);
- `cmG`:   probe_split_cm_gG (8 splits in one cluster of 8 blocks per (kv head, chunk of G heads),
  merged through distributed shared memory; scripts/probe_cluster_merge.cu) -> kiln_linear (o):
  one launch and one L2 round trip of the split states fewer per layer.
Each line: us per layer (median of 9 graph replays), and the worst error of the attention output
and of the o output against `kiln`'s (tolerance 2e-2 of max|ref|). A `cmG` clearly below `kiln` at
129-383 (the bench's context 128 decodes positions 128-384) without losing at 4095 is the case for
building it into the plan (bench/NOTES-decode.md, session 15).
"""

import argparse
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import probe_persistent as pp  # noqa: E402
from probe_merge_fold import attention_layers, planned_splits  # noqa: E402

SRC = os.path.join(HERE, "probe_cluster_merge.cu")
SHAPES = {  # name: (heads, kv_heads, head_dim, hidden, layers)
    "qwen2.5-0.5b": (14, 2, 64, 896, 24),
    "llama3.2-1b": (32, 8, 64, 2048, 16),
    "llama3.1-8b": (32, 8, 128, 4096, 32),
}
MAX_CONTEXT = 4352
CM_SPLITS = 8


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--compile-only", metavar="ARCH", nargs="?", const="sm_90a")
    ap.add_argument("--positions", default="129,383,4095")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--groups", default="1,2,4", help="heads per cluster block (G) to try")
    args = ap.parse_args()
    if args.compile_only:
        return pp.compile_only(args.compile_only, SRC, kiln_headers=True)

    import cupy as cp
    import numpy as np

    import kernel_check as kc

    probe = pp.load_probe(cp, SRC, "probe_cm")
    kiln_mod, how = kc.load_module(cp, kc.Report(), only=["linear.cu", "attention_split.cu"])
    pdl = kc.PdlLaunch(cp)
    f_split = kiln_mod.get_function("kiln_attention_split_bf16")
    f_merge = kiln_mod.get_function("kiln_attention_merge_bf16")
    f_lin = kiln_mod.get_function("kiln_linear_bf16_bf16")
    groups = [int(g) for g in args.groups.split(",")]
    f_cm = {g: probe.get_function(f"probe_split_cm_g{g}") for g in groups}
    print(f"GPU {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}; kiln kernels: {how}")
    cols = "".join(f"{f'cm{g}':>8}" for g in groups)
    print(f"{'shape':<14} {'p':>5} {'kiln splits':>11} {'kiln':>8}{cols}  us per layer; worst att / o error vs kiln")
    u32 = np.uint32
    cm_len = -(-(-(-MAX_CONTEXT // CM_SPLITS)) // 16) * 16
    fails = 0
    for name in args.shapes.split(","):
        H, KVH, HD, hidden, L = SHAPES[name]
        S, SL = planned_splits(H, KVH, MAX_CONTEXT)
        MINL = min(32, SL)
        K = H * HD
        layers, cb, (gs, bs), (gm, bm), (gl, bl) = attention_layers(cp, kc, H, KVH, HD, hidden, L, S)
        scale = np.float32(1.0 / math.sqrt(HD))
        for p in [int(v) for v in args.positions.split(",")]:
            pos = cp.full(1, p, dtype=cp.int32)

            def chain(kind):
                out = []
                for ly in layers:
                    if kind == "kiln":
                        out.append(lambda ly=ly: pdl(f_split, gs, bs, (
                            ly["q"], ly["kc"], ly["vc"], pos, cb, ly["ws"], u32(1), u32(H), u32(KVH), u32(HD),
                            scale, u32(MAX_CONTEXT), u32(S), u32(SL), u32(MINL), u32(1))))
                        out.append(lambda ly=ly: pdl(f_merge, gm, bm, (
                            ly["ws"], pos, ly["att"], u32(1), u32(H), u32(HD), u32(S), u32(SL), u32(MINL), u32(1))))
                    else:
                        g = kind
                        grid = (KVH * -(-(H // KVH) // g), CM_SPLITS, 1)
                        out.append(lambda ly=ly, g=g, grid=grid: pdl(f_cm[g], grid, (256, 1, 1), (
                            ly["q"], ly["kc"], ly["vc"], pos, cb, ly["att"], u32(H), u32(KVH), u32(HD), scale,
                            u32(MAX_CONTEXT), u32(cm_len), u32(32))))
                    out.append(lambda ly=ly: pdl(f_lin, gl, bl, (
                        ly["att"], ly["w"], np.uint64(0), ly["y"], u32(1), u32(K), u32(hidden), u32(0))))
                return out

            times, atts, ys = {}, {}, {}
            for kind in ["kiln"] + groups:
                for ly in layers:
                    ly["y"].fill(0)
                    ly["att"].fill(0)
                cp.cuda.Device().synchronize()
                times[kind] = pp.graph_time(cp, chain(kind)) / L
                atts[kind] = [pp.bf16_to_f32(cp, ly["att"]).copy() for ly in layers]
                ys[kind] = [pp.bf16_to_f32(cp, ly["y"]).copy() for ly in layers]

            def worst(got, ref):
                w = 0.0
                for a, b in zip(got, ref):
                    w = max(w, float(cp.max(cp.abs(a - b))) / max(float(cp.max(cp.abs(b))), 1e-30))
                return w

            line = f"{name:<14} {p:>5} {f'{S}x{SL}':>11} {times['kiln'] * 1e6:>8.2f}"
            notes = []
            for g in groups:
                line += f"{times[g] * 1e6:>8.2f}"
                wa, wy = worst(atts[g], atts["kiln"]), worst(ys[g], ys["kiln"])
                ok = wa < 2e-2 and wy < 2e-2
                fails += not ok
                notes.append(f"cm{g} {'PASS' if ok else 'FAIL'} {wa:.1e}/{wy:.1e}")
            print(line + "  " + "; ".join(notes), flush=True)
        del layers
        cp.get_default_memory_pool().free_all_blocks()
    print("probe:", "FAIL" if fails else "ok")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
