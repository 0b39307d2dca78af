#!/usr/bin/env python3
"""Probe (GPU, CuPy): the decode attention merge folded into the o projection's x load, against
kiln's split -> merge -> GEMV chain.

    python3 scripts/probe_merge_fold.py                  # on the GPU
    python3 scripts/probe_merge_fold.py --compile-only   # no GPU: NVRTC build of the probe

Per layer (24 of the Qwen2.5-0.5B shape, 16 of the Llama-3.2-1B shape, each with its own KV cache,
q and o weight, so reads come from HBM as in decode), batch 1, live position p (129, 383, 4095;
the planner's split geometry for max context 4352), all launches with PDL in one CUDA graph:
- `kiln`:  kiln_attention_split -> kiln_attention_merge -> kiln_linear (o projection);
- `plain`: kiln_attention_split -> kiln_attention_merge -> probe_gemv_plain (the probe's GEMV);
- `fold`:  kiln_attention_split -> probe_gemv_fold (the same GEMV, x merged from the split's
  workspace inside each block: one kernel boundary and one L2 round trip fewer, each block
  re-reading the active splits' workspace).
`fold` against `plain` is the price of the fold (same GEMV); `plain` against `kiln` says how the
probe's GEMV compares with kiln's. Each line: us per layer (median of 9 graph replays). Every
layer's o output of `fold` and `plain` is checked against `kiln`'s (tolerance 2e-2 of max|ref|).
"""

import argparse
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import probe_persistent as pp  # noqa: E402

SRC = os.path.join(HERE, "probe_merge_fold.cu")
SHAPES = {  # name: (heads, kv_heads, head_dim, hidden, layers)
    "qwen2.5-0.5b": (14, 2, 64, 896, 24),
    "llama3.2-1b": (32, 8, 64, 2048, 16),
}
MAX_CONTEXT = 4352


def planned_splits(heads, kv_heads, max_context, target=132):
    """src/plan/planner.rs attention_splits at batch 1 (blocks = kv_heads x head chunks)."""
    chunks = -(-(heads // kv_heads) // 4)
    blocks = kv_heads * chunks
    splits = min(max(target // blocks, 1), max(1, -(-max_context // 64)))
    split_len = -(-(-(-max_context // splits)) // 64) * 64
    return -(-max_context // split_len), split_len


def attention_layers(cp, kc, H, KVH, HD, hidden, L, S):
    """Per layer (L of them): its own q, KV caches of MAX_CONTEXT rows, split workspace, attention
    output, o weight and o output (bf16 bits, f32 workspace); then a zero cache base and the kiln
    geometries of the split (S splits), the merge and the o GEMV, at batch 1."""
    K = H * HD
    layers = []
    for _ in range(L):
        layers.append(dict(
            q=pp.bf16_random(cp, K, 1.0),
            kc=pp.bf16_random(cp, MAX_CONTEXT * KVH * HD, 1.0),
            vc=pp.bf16_random(cp, MAX_CONTEXT * KVH * HD, 1.0),
            ws=cp.zeros(H * S * (HD + 2), dtype=cp.float32),
            att=cp.zeros(K, dtype=cp.uint16),
            w=pp.bf16_random(cp, hidden * K, 1.0 / math.sqrt(K)),
            y=cp.zeros(hidden, dtype=cp.uint16),
        ))
    return (layers, cp.zeros(1, dtype=cp.int32),
            kc.geometry("attention_split", rows=1, heads=H, kv_heads=KVH, splits=S),
            kc.geometry("attention_merge", rows=1, heads=H),
            kc.geometry("linear", rows=1, out_features=hidden, in_features=H * HD))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--compile-only", metavar="ARCH", nargs="?", const="sm_90a")
    ap.add_argument("--positions", default="129,383,4095")
    args = ap.parse_args()
    if args.compile_only:
        return pp.compile_only(args.compile_only, SRC, kiln_headers=True)

    import cupy as cp
    import numpy as np

    import kernel_check as kc

    probe, kiln_mod, how, pdl = pp.probe_and_kiln(cp, SRC, "probe_fold", ["linear.cu", "attention_split.cu"])
    f_split = kiln_mod.get_function("kiln_attention_split_bf16")
    f_merge = kiln_mod.get_function("kiln_attention_merge_bf16")
    f_lin = kiln_mod.get_function("kiln_linear_bf16_bf16")
    f_plain = probe.get_function("probe_gemv_plain")
    f_fold = probe.get_function("probe_gemv_fold")
    print(f"GPU {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}; kiln kernels: {how}")
    print(f"{'shape':<14} {'p':>5} {'splits x len':>12} {'active':>6} {'kiln':>8} {'plain':>8} {'fold':>8} "
          f"{'fold-plain':>10}  us per layer; check")
    u32 = np.uint32
    fails = 0
    for name, (H, KVH, HD, hidden, L) in SHAPES.items():
        S, SL = planned_splits(H, KVH, MAX_CONTEXT)
        MINL = min(32, SL)
        K = H * HD
        assert K <= 2048 and K % 8 == 0 and H * S <= 2048
        layers, cb, (gs, bs), (gm, bm), (gl, bl) = attention_layers(cp, kc, H, KVH, HD, hidden, L, S)
        gp, bp = ((hidden + 15) // 16, 1, 1), (256, 1, 1)
        for p in [int(v) for v in args.positions.split(",")]:
            pos = cp.full(1, p, dtype=cp.int32)
            active = min(p // kc.Checker.live_split_len(p, S, SL, MINL) + 1, S)

            def chain(kind):
                out = []
                for ly in layers:
                    out.append(lambda ly=ly: pdl(f_split, gs, bs, (
                        ly["q"], ly["kc"], ly["vc"], pos, cb, ly["ws"], u32(1), u32(H), u32(KVH), u32(HD),
                        np.float32(1.0 / math.sqrt(HD)), u32(MAX_CONTEXT), u32(S), u32(SL), u32(MINL), u32(1))))
                    if kind != "fold":
                        out.append(lambda ly=ly: pdl(f_merge, gm, bm, (
                            ly["ws"], pos, ly["att"], u32(1), u32(H), u32(HD), u32(S), u32(SL), u32(MINL), u32(1))))
                    if kind == "kiln":
                        out.append(lambda ly=ly: pdl(f_lin, gl, bl, (
                            ly["att"], ly["w"], np.uint64(0), ly["y"], u32(1), u32(K), u32(hidden), u32(0))))
                    else:
                        fn = f_fold if kind == "fold" else f_plain
                        out.append(lambda ly=ly, fn=fn: pdl(fn, gp, bp, (
                            ly["att"], ly["ws"], pos, ly["w"], ly["y"], u32(K), u32(hidden), u32(H), u32(HD), u32(S),
                            u32(SL), u32(MINL))))
                return out

            times, ys = pp.time_chains(cp, layers, chain, ("kiln", "plain", "fold"), L)
            worst = 0.0
            for kind in ("plain", "fold"):
                for a, b in zip(ys[kind], ys["kiln"]):
                    worst = max(worst, float(cp.max(cp.abs(a - b))) / max(float(cp.max(cp.abs(b))), 1e-30))
            ok = worst < 2e-2
            fails += not ok
            print(f"{name:<14} {p:>5} {f'{S}x{SL}':>12} {active:>6} {times['kiln'] * 1e6:>8.2f} "
                  f"{times['plain'] * 1e6:>8.2f} {times['fold'] * 1e6:>8.2f} "
                  f"{(times['fold'] - times['plain']) * 1e6:>+10.2f}  {'PASS' if ok else 'FAIL'} "
                  f"(worst o error vs kiln {worst:.1e})", flush=True)
        del layers
        cp.get_default_memory_pool().free_all_blocks()
    print("probe:", "FAIL" if fails else "ok")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
