#!/usr/bin/env python3
"""Probe (GPU, CuPy): the decode attention recomputed inside every o-projection block, against
kiln's attention -> o chain (the Qwen2.5-0.5B shape, batch 1, bf16).

    python3 scripts/probe_attn_o_fold.py                  # on the GPU
    python3 scripts/probe_attn_o_fold.py --compile-only   # no GPU: NVRTC build of the probe

Per layer (24, each with its own QKV weight, KV cache, q, o weight and outputs, so weights come
from HBM as in decode), live position p (129, 200, 255, 383), all launches with PDL in one CUDA
graph, each layer led by a stand-in for QKV-RoPE (kiln_linear 896 -> 1152, 72 blocks, whose
output nothing reads):
- `kiln`: QKV -> kiln_attention_cluster_g1 (early reads, the plan's chunk of one head) -> kiln_linear (o);
- `noattn`: QKV -> kiln_linear (o): the chain with the attention free (a floor);
- `fold`: QKV -> probe_attn_o_fold (scripts/probe_attn_o_fold.cu: every o block computes the
  whole attention on tensor cores, then its 16 rows of o);
- `nomath`: the same as `fold` without the attention's arithmetic (att = q): its loads, wait and o rows.
`kiln` - `fold` is what the fold would save per layer (24 per step). Each line: us per layer
(median of 9 graph replays). Every layer's o output of `fold` is checked against `kiln`'s
(tolerance 2e-2 of max|ref|: the fold rounds P to bf16 for the tensor cores, as flash attention
does; kiln's split attention keeps it in f32).
"""

import argparse
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import probe_persistent as pp  # noqa: E402

SRC = os.path.join(HERE, "probe_attn_o_fold.cu")
H, KVH, HD, HIDDEN, LAYERS = 14, 2, 64, 896, 24
QKV = H * HD + 2 * KVH * HD
KV_ROWS = 512  # the cache rows of one sequence
PLANNED_LEN = 64  # the cluster's planned split length for a 512-position bucket (8 x 64)
MIN_SPLIT = 32
SMEM = 2 * 384 * 64 * 2 + 16 * 896 * 2 + 2 * 8 * 7 * 64 * 4 + 2 * 8 * 7 * 2 * 4 + 896 * 2  # PROBE_SMEM


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--compile-only", metavar="ARCH", nargs="?", const="sm_90a")
    ap.add_argument("--positions", default="129,200,255,383")
    args = ap.parse_args()
    if args.compile_only:
        return pp.compile_only(args.compile_only, SRC)

    import cupy as cp
    import numpy as np

    import kernel_check as kc

    probe, kiln_mod, how, pdl = pp.probe_and_kiln(cp, SRC, "probe_attn_o_fold", ["linear.cu", "attention_split.cu"])
    f_attn = kiln_mod.get_function("kiln_attention_cluster_g1_bf16")
    f_lin = kiln_mod.get_function("kiln_linear_bf16_bf16")
    f_fold = probe.get_function("probe_attn_o_fold")
    f_nomath = probe.get_function("probe_attn_o_fold_nomath")
    pdl.max_dynamic_smem(f_fold, SMEM)
    pdl.max_dynamic_smem(f_nomath, SMEM)
    print(f"GPU {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}; kiln kernels: {how}")
    print(f"{'p':>5} {'kiln':>8} {'noattn':>8} {'fold':>8} {'nomath':>8} {'kiln-fold':>10}  us per layer; check")
    u32 = np.uint32
    layers = []
    for _ in range(LAYERS):
        layers.append(dict(
            x=pp.bf16_random(cp, HIDDEN, 1.0),
            wqkv=pp.bf16_random(cp, QKV * HIDDEN, 1.0 / math.sqrt(HIDDEN)),
            qkv=cp.zeros(QKV, dtype=cp.uint16),
            q=pp.bf16_random(cp, H * HD, 1.0),
            kc=pp.bf16_random(cp, KV_ROWS * KVH * HD, 1.0),
            vc=pp.bf16_random(cp, KV_ROWS * KVH * HD, 1.0),
            att=cp.zeros(H * HD, dtype=cp.uint16),
            w=pp.bf16_random(cp, HIDDEN * H * HD, 1.0 / math.sqrt(H * HD)),
            y=cp.zeros(HIDDEN, dtype=cp.uint16),
        ))
    cb = cp.zeros(1, dtype=cp.int32)
    gq, bq = kc.geometry("linear", rows=1, out_features=QKV, in_features=HIDDEN)
    ga, ba = kc.geometry("attention_cluster", rows=1, heads=H, kv_heads=KVH, chunk_heads=1)
    go, bo = kc.geometry("linear", rows=1, out_features=HIDDEN, in_features=H * HD)
    scale = np.float32(1.0 / math.sqrt(HD))
    fails = 0
    for p in [int(v) for v in args.positions.split(",")]:
        pos = cp.full(1, p, dtype=cp.int32)

        def chain(kind):
            out = []
            for ly in layers:
                out.append(lambda ly=ly: pdl(f_lin, gq, bq, (
                    ly["x"], ly["wqkv"], np.uint64(0), ly["qkv"], u32(1), u32(HIDDEN), u32(QKV), u32(0))))
                if kind == "kiln":
                    out.append(lambda ly=ly: pdl(f_attn, ga, ba, (
                        ly["q"], ly["kc"], ly["vc"], pos, cb, ly["att"], u32(1), u32(H), u32(KVH), u32(HD), scale,
                        u32(KV_ROWS), u32(PLANNED_LEN), u32(MIN_SPLIT), u32(1), u32(1))))
                if kind in ("kiln", "noattn"):
                    out.append(lambda ly=ly: pdl(f_lin, go, bo, (
                        ly["att"], ly["w"], np.uint64(0), ly["y"], u32(1), u32(H * HD), u32(HIDDEN), u32(0))))
                else:
                    fn = f_fold if kind == "fold" else f_nomath
                    out.append(lambda ly=ly, fn=fn: pdl(fn, (HIDDEN // 16, 1, 1), (512, 1, 1), (
                        ly["q"], ly["kc"], ly["vc"], pos, cb, ly["w"], ly["y"], scale), smem=SMEM))
            return out

        times, ys = {}, {}
        for kind in ("kiln", "noattn", "fold", "nomath"):
            for ly in layers:
                ly["y"].fill(0)
            cp.cuda.Device().synchronize()
            times[kind] = pp.graph_time(cp, chain(kind)) / LAYERS
            ys[kind] = [pp.bf16_to_f32(cp, ly["y"]).copy() for ly in layers]
        worst = 0.0
        for a, b in zip(ys["fold"], ys["kiln"]):
            worst = max(worst, float(cp.max(cp.abs(a - b))) / max(float(cp.max(cp.abs(b))), 1e-30))
        ok = worst < 2e-2 and all(bool(cp.all(cp.isfinite(a))) for a in ys["fold"])
        fails += not ok
        print(f"{p:>5} {times['kiln'] * 1e6:>8.2f} {times['noattn'] * 1e6:>8.2f} {times['fold'] * 1e6:>8.2f} "
              f"{times['nomath'] * 1e6:>8.2f} {(times['kiln'] - times['fold']) * 1e6:>+10.2f}  {'PASS' if ok else 'FAIL'} "
              f"(worst o error vs kiln {worst:.1e})", flush=True)
    print("probe:", "FAIL" if fails else "ok")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
