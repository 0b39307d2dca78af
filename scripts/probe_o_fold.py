#!/usr/bin/env python3
"""Probe (GPU, CuPy): the o projection folded into kiln's decode attention cluster launch as a
split-K over heads, against kiln's attention_cluster -> fused_linear (o + residual) chain.

    python3 scripts/probe_o_fold.py                  # on the GPU
    python3 scripts/probe_o_fold.py --compile-only   # no GPU: NVRTC build of the probe

Per layer (each shape's layer count, each layer with its own KV cache, q, o weight, residual, so
reads come from HBM as in decode), batch 1, live position p, all launches with PDL in one CUDA graph:
- `kiln`:  kiln_attention_cluster_g1_bf16 -> kiln_fused_linear_bf16_bf16 (o + residual), both from
  kiln's kernels compiled with KILN_GEMV_TILES=1 (the decode plans' tile-packed weights), the plan's
  geometry (split_len 512 of a 4096-row cache, min split 32, one head per cluster);
- `fold`:  scripts/probe_o_fold.cu probe_attn_o_fold, one launch: the same attention, each cluster
  block then a head's share of the o projection for hidden / 8 rows, partial sums to an f32
  workspace, a per-row-slice counter electing the last head's block, which sums the slice in head
  order and adds the residual; weights staged in shared memory before the wait (`fold`), or only
  prefetched into the L2 (`fold-l2`, the only variant for slices over 64 KB); `no-red` and
  `no-red-l2`: the same without the reduction (partials stored, y not written): timing only.
Each line: us per layer (median of 9 graph replays); the fold's o output is checked against
the o projection in f32 of the attention output of kiln's chain (tolerance 2e-2 of
max|ref|, ref = W @ a + residual in f32), and the workspace counters must be back at zero.
"""

import argparse
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import probe_persistent as pp  # noqa: E402

from probe_cluster_merge import SHAPES  # noqa: E402  (heads, kv_heads, head_dim, hidden, layers)

SRC = os.path.join(HERE, "probe_o_fold.cu")
KV_ROWS, SPLIT_LEN, MIN_SPLIT = 4096, 512, 32


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--compile-only", metavar="ARCH", nargs="?", const="sm_90a")
    ap.add_argument("--positions", default="129,383,4095")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    args = ap.parse_args()
    if args.compile_only:
        return pp.compile_only(args.compile_only, SRC, kiln_headers=True)

    import cupy as cp
    import numpy as np

    import kernel_check as kc

    probe = pp.load_probe(cp, SRC, "probe_o_fold")
    report = kc.Report()
    kiln_mod, how = kc.load_module(cp, report, only=["linear_fused.cu", "attention_split.cu"],
                                   defines=("KILN_GEMV_TILES=1",))
    pdl = kc.PdlLaunch(cp)
    f_att = kiln_mod.get_function("kiln_attention_cluster_g1_bf16")
    f_o = kiln_mod.get_function("kiln_fused_linear_bf16_bf16")
    f_fold = probe.get_function("probe_attn_o_fold")
    pdl.max_dynamic_smem(f_fold, 64 * 1024)  # the staged slices over 48 KB
    print(f"GPU {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}; kiln kernels: {how}")
    cols = ("kiln", "fold", "fold-l2", "no-red", "no-red-l2")
    print(f"{'shape':<14} {'p':>5} " + " ".join(f"{c:>9}" for c in cols) + f" {'fold-kiln':>9}  us per layer; check")
    u32 = np.uint32
    fails = 0
    for name in args.shapes.split(","):
        H, KVH, HD, hidden, L = SHAPES[name]
        K = H * HD
        R = hidden // 8
        smem = R * HD * 2
        scale = np.float32(1.0 / math.sqrt(HD))
        layers = []
        for _ in range(L):
            layers.append(dict(
                q=pp.bf16_random(cp, K, 1.0),
                kc=pp.bf16_random(cp, KV_ROWS * KVH * HD, 1.0),
                vc=pp.bf16_random(cp, KV_ROWS * KVH * HD, 1.0),
                w=pp.bf16_random(cp, hidden * K, 1.0 / math.sqrt(K)),
                res=pp.bf16_random(cp, hidden, 1.0),
                att=cp.zeros(K, dtype=cp.uint16),
                y=cp.zeros(hidden, dtype=cp.uint16),
                ws=cp.zeros(H * hidden, dtype=cp.float32),
                cnt=cp.zeros(8, dtype=cp.uint32),
            ))
        cb = cp.zeros(1, dtype=cp.int32)
        gl, bl = kc.geometry("fused_linear", rows=1, out_features=hidden)
        for p in [int(v) for v in args.positions.split(",")]:
            pos = cp.full(1, p, dtype=cp.int32)

            def chain(kind):
                out = []
                for ly in layers:
                    if kind == "kiln":
                        out.append(lambda ly=ly: pdl(f_att, (H, 8, 1), (256, 1, 1), (
                            ly["q"], ly["kc"], ly["vc"], pos, cb, ly["att"], u32(1), u32(H), u32(KVH), u32(HD),
                            scale, u32(KV_ROWS), u32(SPLIT_LEN), u32(MIN_SPLIT), u32(1), u32(1))))
                        out.append(lambda ly=ly: pdl(f_o, gl, bl, (
                            ly["att"], np.uint64(0), ly["w"], np.uint64(0), ly["res"], ly["y"], np.uint64(0), u32(1),
                            u32(K), u32(hidden), u32(0), np.float32(0.0), u32(0), u32(1), u32(0))))
                    else:
                        stage = {"fold": 1, "fold-l2": 0, "no-red": 1, "no-red-l2": 0}[kind] | (2 if kind.startswith("no-red") else 0)
                        out.append(lambda ly=ly, stage=stage: pdl(f_fold, (H, 8, 1), (256, 1, 1), (
                            ly["q"], ly["kc"], ly["vc"], pos, cb, ly["w"], ly["res"], ly["y"], ly["ws"], ly["cnt"],
                            u32(H), u32(KVH), u32(HD), scale, u32(KV_ROWS), u32(SPLIT_LEN), u32(MIN_SPLIT),
                            u32(hidden), u32(stage)), smem=smem if stage & 1 else 0))
                return out

            kinds = ["kiln", "fold", "fold-l2", "no-red"] if smem <= 64 * 1024 else ["kiln", "fold-l2", "no-red-l2"]
            times, worst, ok = {}, 0.0, True
            for kind in kinds:
                for ly in layers:
                    ly["y"].fill(0)
                cp.cuda.Device().synchronize()
                times[kind] = pp.graph_time(cp, chain(kind)) / L
                if kind == "kiln" or kind.startswith("no-red"):
                    continue
                for ly in layers:
                    a = pp.bf16_to_f32(cp, ly["att"])
                    w = pp.bf16_to_f32(cp, ly["w"]).reshape(hidden, K)
                    ref = w @ a + pp.bf16_to_f32(cp, ly["res"])
                    got = pp.bf16_to_f32(cp, ly["y"])
                    worst = max(worst, float(cp.max(cp.abs(got - ref))) / max(float(cp.max(cp.abs(ref))), 1e-30))
                    ok &= int(cp.count_nonzero(ly["cnt"])) == 0
            ok &= worst < 2e-2
            fails += not ok
            cells = " ".join(f"{times[k] * 1e6:>9.2f}" if k in times else f"{'-':>9}" for k in cols)
            best = min(times[k] for k in kinds if k.startswith("fold"))
            print(f"{name:<14} {p:>5} {cells} {(best - times['kiln']) * 1e6:>+9.2f}  {'PASS' if ok else 'FAIL'} "
                  f"(worst o error {worst:.1e})", flush=True)
        del layers
        cp.get_default_memory_pool().free_all_blocks()
    print("probe:", "FAIL" if fails else "ok")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
