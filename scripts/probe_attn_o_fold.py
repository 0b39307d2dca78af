#!/usr/bin/env python3
"""Probe (GPU, CuPy): the decode attention recomputed inside every o-projection block, against
kiln's attention -> o chain (the Qwen2.5-0.5B shape, batch 1, bf16).

    python3 scripts/probe_attn_o_fold.py                  # on the GPU
    python3 scripts/probe_attn_o_fold.py --compile-only   # no GPU: NVRTC build of the probe
    python3 scripts/probe_attn_o_fold.py --emulate        # no GPU: NumPy replay of the kernel's lanes

Per layer (24, each with its own weights, KV cache, q and outputs, so weights come from HBM as in
decode), live position p (129, 200, 255, 383), all launches with PDL in one CUDA graph, each layer
led by a stand-in for QKV-RoPE (kiln_linear 896 -> 1152, 72 blocks, whose output nothing reads) and
ended by stand-ins for the MLP (kiln_linear 896 -> 9728 as gate/up, reading o's output, and 4864 ->
896 as down: the same bytes as kiln's; `--no-mlp` leaves them out), so that the fold's neighbours
compete for its SMs as in decode:
- `kiln`: QKV -> kiln_attention_cluster_g1 (early reads, the plan's chunk of one head) -> kiln_linear (o);
- `noattn`: QKV -> kiln_linear (o): the chain with the attention free (a floor);
- `fold`: QKV -> probe_attn_o_fold (scripts/probe_attn_o_fold.cu: every o block computes the
  whole attention on tensor cores, then its 16 rows of o);
- `nomath`: the same as `fold` without the attention's arithmetic (att = q): its loads, wait and o rows.
`kiln` - `fold` is what the fold would save per layer (24 per step). Each line: us per layer
(median of 9 graph replays). Every layer's o output of `fold` is checked against `kiln`'s
(tolerance 2e-2 of max|ref|: the fold rounds P to bf16 for the tensor cores, as flash attention
does; kiln's split attention keeps it in f32).

`--emulate` replays the kernel's attention lane by lane in NumPy (the fragment layouts of
mma.m16n8k16 and ldmatrix.trans as the PTX ISA gives them, the warps' chunks, the local softmax,
the merge) against a float64 attention, at p = 0, 5, 129, 200, 383: it checks the kernel's index
arithmetic without a GPU (not the hardware's reading of the layouts, which only the GPU run checks).
"""

import argparse
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import probe_persistent as pp  # noqa: E402

SRC = os.path.join(HERE, "probe_attn_o_fold.cu")
H, KVH, HD, HIDDEN, INTER, LAYERS = 14, 2, 64, 896, 4864, 24
QKV = H * HD + 2 * KVH * HD
KV_ROWS = 512  # the cache rows of one sequence
PLANNED_LEN = 64  # the cluster's planned split length for a 512-position bucket (8 x 64)
MIN_SPLIT = 32
SMEM = 2 * 384 * 64 * 2 + 16 * 896 * 2 + 2 * 8 * 7 * 64 * 4 + 2 * 8 * 7 * 2 * 4 + 896 * 2  # PROBE_SMEM


def mma_emulated(np, d, a, b):
    """mma.m16n8k16 over a warp: a[lane] = the 8 A values (a0..a7), b[lane] = the 4 B values, d[lane]
    = the 4 accumulators (PTX ISA fragment layouts; groupID = lane / 4, t = lane % 4)."""
    A, B = np.zeros((16, 16)), np.zeros((16, 8))
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        A[g, 2 * t:2 * t + 2], A[g + 8, 2 * t:2 * t + 2] = a[lane][0:2], a[lane][2:4]
        A[g, 2 * t + 8:2 * t + 10], A[g + 8, 2 * t + 8:2 * t + 10] = a[lane][4:6], a[lane][6:8]
        B[2 * t:2 * t + 2, g], B[2 * t + 8:2 * t + 10, g] = b[lane][0:2], b[lane][2:4]
    C = A @ B
    return [[d[lane][0] + C[lane >> 2, 2 * (lane & 3)], d[lane][1] + C[lane >> 2, 2 * (lane & 3) + 1],
             d[lane][2] + C[(lane >> 2) + 8, 2 * (lane & 3)], d[lane][3] + C[(lane >> 2) + 8, 2 * (lane & 3) + 1]]
            for lane in range(32)]


def emulate_block(np, q, K, V, p, scale):
    """probe_attn_o_fold's attention output (heads x head_dim, before its bf16 rounding) as its 16
    warps compute it: q [H][HD], K / V [keys][KVH][HD] (bf16 values as float32)."""
    G, WPG, CPW, ninf = H // KVH, 8, 3, -np.inf
    nkeys = p + 1
    part, ml = np.zeros((KVH, WPG, G, HD)), np.zeros((KVH, WPG, G, 2))
    vs = np.zeros((KVH, (nkeys + 15) & ~15, HD), dtype=np.float32)  # the swizzle permutes whole chunks
    vs[:, :nkeys] = V[:nkeys].transpose(1, 0, 2)
    for kvg in range(KVH):
        for wg in range(WPG):
            # the lane's 16 dims 16 t.. of q (its head gq < G) and of each key it loads
            qw = [q[kvg * G + (ln >> 2), 16 * (ln & 3):16 * (ln & 3) + 16] if (ln >> 2) < G else np.zeros(16)
                  for ln in range(32)]
            s = np.full((CPW, 2, 32, 2), ninf)
            for i in range(CPW):
                k0 = 16 * (wg + WPG * i)
                for h in range(2):
                    d = [[0.0] * 4 for _ in range(32)]
                    if k0 < nkeys:
                        for ks in range(4):
                            a, b = [], []
                            for ln in range(32):
                                key, t = k0 + 8 * h + (ln >> 2), ln & 3
                                kw = K[key, kvg, 16 * t:16 * t + 16] if key < nkeys else np.zeros(16)
                                a.append([*qw[ln][4 * ks:4 * ks + 2], 0, 0, *qw[ln][4 * ks + 2:4 * ks + 4], 0, 0])
                                b.append(list(kw[4 * ks:4 * ks + 4]))
                            d = mma_emulated(np, d, a, b)
                    for ln in range(32):
                        for e in range(2):
                            key = k0 + 8 * h + 2 * (ln & 3) + e
                            s[i, h, ln, e] = d[ln][e] * scale if key < nkeys else ninf
            m = [s[:, :, ln, :].max() for ln in range(32)]
            m = [max(m[ln], m[ln ^ 1], m[ln ^ 2], m[ln ^ 3]) for ln in range(32)]  # shuffles xor 1, 2
            o = [[[0.0] * 4 for _ in range(32)] for _ in range(8)]
            lsum = [0.0] * 32
            for i in range(CPW):
                k0 = 16 * (wg + WPG * i)
                if k0 >= nkeys:
                    break
                a = []
                for ln in range(32):
                    e = [0.0] * 4 if m[ln] == ninf else pp.bf16_round(np, np.exp(s[i, :, ln, :].ravel() - m[ln]))
                    lsum[ln] += float(np.sum(e))
                    a.append([e[0], e[1], 0, 0, e[2], e[3], 0, 0])
                for mm in range(4):  # ldmatrix.x4.trans: matrix j's rows from lanes 8 j .. 8 j + 7
                    mats = [np.array([vs[kvg, k0 + (ln & 7) + 8 * ((ln >> 3) & 1), 8 * (2 * mm + (ln >> 4)):][:8]
                                      for ln in range(8 * j, 8 * j + 8)]) for j in range(4)]
                    bb = [[[mats[j][2 * (ln & 3)][ln >> 2], mats[j][2 * (ln & 3) + 1][ln >> 2]] for j in range(4)]
                          for ln in range(32)]
                    o[2 * mm] = mma_emulated(np, o[2 * mm], a, [bb[ln][0] + bb[ln][1] for ln in range(32)])
                    o[2 * mm + 1] = mma_emulated(np, o[2 * mm + 1], a, [bb[ln][2] + bb[ln][3] for ln in range(32)])
            lsum = [lsum[ln] + lsum[ln ^ 1] for ln in range(32)]
            lsum = [lsum[ln] + lsum[ln ^ 2] for ln in range(32)]
            for ln in range(32):
                gq, t = ln >> 2, ln & 3
                if gq < G:
                    for n in range(8):
                        part[kvg, wg, gq, 8 * n + 2 * t:8 * n + 2 * t + 2] = o[n][ln][0:2]
                    ml[kvg, wg, gq] = (m[ln], lsum[ln])
    att = np.zeros((H, HD))
    for hd in range(H):
        g, hh = divmod(hd, G)
        mw = ml[g, :, hh, 0]
        f = np.where(mw == ninf, 0.0, np.exp(mw - mw.max()))
        att[hd] = (f[:, None] * part[g, :, hh]).sum(0) / (f * ml[g, :, hh, 1]).sum()
    return att


def emulate():
    import numpy as np

    rng = np.random.default_rng(47)
    worst = 0.0
    for p in (0, 5, 129, 200, 383):
        q = pp.bf16_round(np, rng.standard_normal((H, HD)))
        K = pp.bf16_round(np, rng.standard_normal((p + 1, KVH, HD)))
        V = pp.bf16_round(np, rng.standard_normal((p + 1, KVH, HD)))
        ref = np.zeros((H, HD))
        for h in range(H):
            sc = K[:, h // (H // KVH)] @ q[h] / math.sqrt(HD)
            e = np.exp(sc - sc.max())
            ref[h] = e / e.sum() @ V[:, h // (H // KVH)]
        err = float(np.abs(emulate_block(np, q, K, V, p, 1.0 / math.sqrt(HD)) - ref).max() / np.abs(ref).max())
        worst = max(worst, err)
        print(f"p {p:>4}: emulated fold vs float64 attention, max error {err:.1e} of max|ref|")
    ok = worst < 1e-2
    print("emulation:", "ok" if ok else "FAIL")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--compile-only", metavar="ARCH", nargs="?", const="sm_90a")
    ap.add_argument("--positions", default="129,200,255,383")
    ap.add_argument("--emulate", action="store_true")
    ap.add_argument("--no-mlp", action="store_true", help="no gate/up and down stand-ins after o")
    args = ap.parse_args()
    if args.compile_only:
        return pp.compile_only(args.compile_only, SRC)
    if args.emulate:
        return emulate()

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
    print(f"GPU {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}; kiln kernels: {how}; "
          f"{'QKV, attention/o' if args.no_mlp else 'QKV, attention/o, gate/up, down'} per layer")
    print(f"{'p':>5} {'kiln':>8} {'noattn':>8} {'fold':>8} {'nomath':>8} {'kiln-fold':>10}  us per layer; check")
    u32 = np.uint32
    mlp_buffers, add_mlp = pp.mlp_stand_ins(cp, np, kc, pdl, f_lin, HIDDEN, INTER)
    layers = []
    for _ in range(LAYERS):
        ly = dict(
            x=pp.bf16_random(cp, HIDDEN, 1.0),
            wqkv=pp.bf16_random(cp, QKV * HIDDEN, 1.0 / math.sqrt(HIDDEN)),
            qkv=cp.zeros(QKV, dtype=cp.uint16),
            q=pp.bf16_random(cp, H * HD, 1.0),
            kc=pp.bf16_random(cp, KV_ROWS * KVH * HD, 1.0),
            vc=pp.bf16_random(cp, KV_ROWS * KVH * HD, 1.0),
            att=cp.zeros(H * HD, dtype=cp.uint16),
            w=pp.bf16_random(cp, HIDDEN * H * HD, 1.0 / math.sqrt(H * HD)),
            y=cp.zeros(HIDDEN, dtype=cp.uint16),
        )
        if not args.no_mlp:
            ly.update(mlp_buffers())
        layers.append(ly)
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
                if not args.no_mlp:
                    add_mlp(out, ly)
            return out

        times, ys = pp.time_chains(cp, layers, chain, ("kiln", "noattn", "fold", "nomath"), LAYERS)
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
