#!/usr/bin/env python3
"""Probe (GPU, CuPy): kiln's QKV-RoPE computed inside the cluster attention, `kiln_qkv_attention_bf16`
(kernels/attention_qkv.cu, the plan-time knob KILN_FUSE_QKV_ATTN=1), against kiln's qkv_rope ->
attention chain in stand-in layers (the Qwen2.5-0.5B shape, batch 1, bf16).

    python3 scripts/probe_qkv_attn_fold.py                  # on the GPU
    python3 scripts/probe_qkv_attn_fold.py --compile-only   # no GPU: NVRTC build of the kernels it runs
    python3 scripts/probe_qkv_attn_fold.py --emulate        # no GPU: NumPy replay of the kernel's indices

Per layer (24, each with its own weights, KV cache, x and outputs, so weights come from HBM as in
decode), live position p (129, 200, 255, 383, 1000), all launches with PDL in one CUDA graph, each
layer's attention half followed by kiln_linear stand-ins for o (896 -> 896), gate/up (896 -> 9728)
and down (4864 -> 896) of the real bytes (`--no-mlp` drops gate/up and down), so that the fold's
neighbours compete for its SMs as in decode:
- `kiln`: kiln_qkv_rope (norm, bias, RoPE, early reads; 72 blocks of 256 threads, the plan's
  narrow GEMV) -> kiln_attention_cluster_g1 (early reads) -> o;
- `noattn`: kiln_qkv_rope -> o: kiln's chain with the attention free (a floor);
- `fold`: kiln_qkv_attention_bf16 (14 clusters of 8 blocks, one per q head; each cluster computes its
  head's q rows and its KV group's k / v rows, rotates them, shares them through distributed shared
  memory and runs the split attention and cluster merge) -> o;
- `fold+o` (session 49): the same kernel with the o projection as a tail (scripts/probe_qkv_attn_o.cu:
  each cluster adds its head's term W_o[:, head] att_head of every output into an int64 accumulator
  at 2^-32 fixed point, by L2 reductions, so the sum is the same bits in any order) and no o launch:
  three launches per layer. The gate/up and down stand-ins still read the o stand-in's buffer, so the
  reads kiln's consumers would add (resid + accumulator) are not in its time.
`kiln` - `fold` is what the fold saves per layer (24 per step), `kiln` - `fold+o` what the three-launch
layer saves. Each line: us per layer (median of 9 graph replays). Before the timing, layer 0's attention
output and KV row p of the fold and of kiln's chain are each checked against a float64 NumPy reference
(tolerance 2e-2 of max|ref|: bf16 rounding of q/k/v may differ in the last place between the two GEMVs'
sum orders), and every layer's o output of `fold` against `kiln`'s after the timing; `fold+o`'s
accumulator of layer 0 after one launch against W_o @ the reference attention output, and every layer's
after the timing (11 runs of the chain: graph_time's eager pass, warm-up replay and 9 timed) against 11
x `kiln`'s o output, each entry a multiple of 11 exactly (the same bits every run). `--kiln-define
NAME=VALUE` compiles kiln's kernels with a -D (e.g. KILN_QKV_ATTN_MIN_BLOCKS=2: the fused kernel capped
at 128 registers), the fold+o module too.

The fold works at any context (the cluster's splits grow with it, as kiln's), so unlike the
attention-in-o fold (probe_attn_o_fold.py) it needs no short-context bucket; p = 1000 checks that.
`--emulate` replays the kernel's index arithmetic (the rows each warp computes, the input chunks of
each lane, the rotary pairs, the gather through distributed shared memory, the keys of every lane
of every split, row p, the merge; fold+o's tail: the W_o chunks of every thread, its 8-lane sums, the
fixed-point adds) with float64 arithmetic against the reference.
"""

import argparse
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import probe_persistent as pp  # noqa: E402

SRC_O = os.path.join(HERE, "probe_qkv_attn_o.cu")  # kind `fold+o`: kiln's fused kernel with the o tail
KILN_FILES = ["linear.cu", "linear_fused.cu", "attention_split.cu", "attention_qkv.cu"]
H, KVH, HD, HIDDEN, INTER, LAYERS = 14, 2, 64, 896, 4864, 24
NQ, NK = H * HD, KVH * HD
QKV = NQ + 2 * NK
KV_ROWS = 2048  # the cache rows of one sequence
PLANNED_LEN = 256  # the cluster's planned split length for a 2048-position bucket (8 x 256)
MIN_SPLIT = 32
THETA, EPS = 1e6, 1e-6
FIXED = 2.0 ** 32  # probe_qkv_attn_o.cu's fixed point
RUNS = pp.GRAPH_REPS + 2  # executions of a chain in pp.graph_time: eager, warm-up, timed replays


def bf16_round(np, x):
    """float values rounded to the nearest bf16 (ties to even), as float64."""
    return pp.bf16_round(np, x).astype(np.float64)


def reference(np, a, p, inv_freq):
    """The attention output [H][HD] and K / V row p of one layer (float64, bf16-rounded where kiln
    stores), from its arrays `a` (float values of x, nw, wqkv [QKV][HIDDEN], bias, kc0 / vc0
    [KV_ROWS][NK]): RMSNorm after the dot (kiln's PostNorm), bias, RoPE (rotate-half pairs i, i + 32),
    softmax attention over cache rows 0..p (row p the new one). Also returns q, k, v."""
    x, nw, W, b = (a[n].astype(np.float64) for n in ("x", "nw", "wqkv", "bias"))
    inv = 1.0 / math.sqrt(float(np.sum(x * x)) / HIDDEN + EPS)
    qkv = bf16_round(np, inv * (W @ bf16_round(np, x * nw)) + b)
    ang = p * inv_freq.astype(np.float64)
    c, s = np.cos(ang), np.sin(ang)

    def rope(v):
        v = v.reshape(-1, HD)
        lo, hi = v[:, :HD // 2], v[:, HD // 2:]
        return bf16_round(np, np.concatenate([lo * c - hi * s, lo * s + hi * c], axis=1))

    q = rope(qkv[:NQ])
    k = rope(qkv[NQ:NQ + NK]).reshape(-1)
    v = qkv[NQ + NK:]
    K, V = a["kc0"][:p + 1].astype(np.float64).copy(), a["vc0"][:p + 1].astype(np.float64).copy()
    K[p], V[p] = k, v
    att = np.zeros((H, HD))
    for h in range(H):
        g = h // (H // KVH)
        sc = K[:, g * HD:(g + 1) * HD] @ q[h] / math.sqrt(HD)
        e = np.exp(sc - sc.max())
        att[h] = e / e.sum() @ V[:, g * HD:(g + 1) * HD]
    return att, k, v, (q, qkv)


def live_split_len(p, splits, split_len, min_split_len):  # the kernel's (kiln's) integer arithmetic
    keys = max(p, 0) + 1
    even = (keys + splits - 1) // splits
    return max(min(max((even + 15) // 16 * 16, min_split_len), split_len), 1)


def emulate_fold(np, a, p, inv_freq):
    """kiln_qkv_attention_bf16's index arithmetic replayed block by block, warp by warp and lane by lane
    (the rows each warp computes and the input chunks each lane reads, the rotary pairs, the
    distributed-shared-memory gather, the keys each lane of each split takes, row p from the
    gathered values, the merge over the active splits), with float64 arithmetic: (att [H][HD], K
    row p, V row p as the group's first-head clusters write them). Asserts that every input column
    and every key of a split is taken exactly once."""
    x, nw, W, b = (a[n].astype(np.float64) for n in ("x", "nw", "wqkv", "bias"))
    inv = 1.0 / math.sqrt(float(np.sum(x * x)) / HIDDEN + EPS)
    dots = W @ bf16_round(np, x * nw)  # the dot products themselves are not what is checked here
    cols = sorted(8 * (ln + 32 * c) + e for ln in range(32) for c in range(4) if ln + 32 * c < HIDDEN // 8
                  for e in range(8))
    assert cols == list(range(HIDDEN)), "the lanes' chunks do not cover x once"
    qk_dim = lambda s, j: 4 * s + j if j < 4 else 32 + 4 * s + (j - 4)  # noqa: E731
    att, krow, vrow = np.zeros((H, HD)), np.full(NK, np.nan), np.full(NK, np.nan)
    L = live_split_len(p, 8, PLANNED_LEN, MIN_SPLIT)
    n_active = 0 if p < 0 else min(p // L + 1, 8)
    for h in range(H):
        g = h // (H // KVH)
        mine = []
        for s in range(8):
            vals = [None] * 24
            for warp in range(8):
                for i in range(3):
                    r = 3 * warp + i
                    row = (h * HD + qk_dim(s, r) if r < 8 else NQ + g * HD + qk_dim(s, r - 8) if r < 16
                           else NQ + NK + g * HD + 8 * s + (r - 16))
                    vals[r] = float(bf16_round(np, inv * dots[row] + b[row]))
            m = [None] * 24
            ang = [(math.sin(p * float(inv_freq[4 * s + t])), math.cos(p * float(inv_freq[4 * s + t]))) for t in range(4)]
            for tid in range(24):
                if tid < 4 or 8 <= tid < 12:
                    j, o = tid & 3, tid & 8
                    sn, cs = ang[j]
                    x0, x1 = vals[o + j], vals[o + j + 4]
                    m[o + j], m[o + j + 4] = float(bf16_round(np, x0 * cs - x1 * sn)), float(bf16_round(np, x0 * sn + x1 * cs))
                elif 16 <= tid < 24:
                    m[tid] = vals[tid]
            assert None not in m, "a value of the block is never written"
            mine.append(m)
            if h % (H // KVH) == 0 and p >= 0:  # the cache write of row p
                for tid in range(16):
                    if tid < 8:
                        krow[g * HD + qk_dim(s, tid)] = m[8 + tid]
                    else:
                        vrow[g * HD + 8 * s + tid - 8] = m[16 + tid - 8]
        full = np.zeros(3 * HD)
        for tid in range(3 * HD):
            which, d = divmod(tid, HD)
            if which < 2:
                rank, idx = (d % 32) // 4, 8 * which + d % 4 + (4 if d >= 32 else 0)
            else:
                rank, idx = d // 8, 16 + d % 8
            full[tid] = mine[rank][idx]
        q, kp, vp = full[:HD], full[HD:2 * HD], full[2 * HD:]
        slots = []
        for s in range(n_active):
            lo, hi = s * L, min(s * L + L, p + 1)
            hi = min(hi, KV_ROWS)
            keys = []
            for warp in range(8):
                j0 = lo + warp * 8
                while j0 < hi:
                    keys += [j0 + 4 * u + pi for u in range(2) for pi in range(4) if j0 + 4 * u + pi < hi]
                    j0 += 64
            assert sorted(keys) == list(range(lo, hi)), f"split {s}: keys {sorted(keys)} != {lo}..{hi - 1}"
            Kr = np.array([kp if j == p else a["kc0"][j, g * HD:(g + 1) * HD] for j in keys], dtype=np.float64)
            Vr = np.array([vp if j == p else a["vc0"][j, g * HD:(g + 1) * HD] for j in keys], dtype=np.float64)
            sc = Kr @ q / math.sqrt(HD)
            mx = sc.max()
            e = np.exp(sc - mx)
            slots.append((e @ Vr, mx, e.sum()))
        big = max(sl[1] for sl in slots)
        wts = [math.exp(sl[1] - big) for sl in slots]
        att[h] = sum(w * sl[0] for w, sl in zip(wts, slots)) / sum(w * sl[2] for w, sl in zip(wts, slots))
    return att, krow, vrow


def emulate_o_tail(np, att, wo):
    """probe_qkv_attn_o.cu's tail replayed: for every head h, rank s, thread tid and pass i, the W_o
    chunk it copies and multiplies, its 8-lane sums and the fixed-point adds; float64 arithmetic on
    the bf16-rounded attention output `att` [H][HD]. Returns the accumulator (Python ints) and
    asserts that every weight of W_o [HIDDEN][NQ] is used exactly once."""
    rows = HIDDEN // 8
    used = np.zeros((HIDDEN, NQ), dtype=np.int64)
    acc = [0] * HIDDEN
    a = bf16_round(np, att)
    for h in range(H):
        for s in range(8):
            sums = {}
            for tid in range(256):
                c = tid & 7
                for i in range(4):
                    r = (tid >> 3) + 32 * i
                    if r < rows:
                        n, cols = s * rows + r, [h * HD + 8 * c + e for e in range(8)]
                        used[n, cols] += 1
                        sums[r] = sums.get(r, 0.0) + float(wo[n, cols] @ a[h, 8 * c:8 * c + 8])
            for r, d in sums.items():
                acc[s * rows + r] += int(round(d * FIXED))
    assert (used == 1).all(), "the tail does not use every weight of W_o once"
    return acc


def emulate():
    """--emulate: emulate_fold against reference at several positions (no GPU, NumPy only)."""
    import numpy as np

    import kernel_check as kc

    rng = np.random.default_rng(48)
    inv_freq = np.array([kc.Checker.inv_freq(i, HD, THETA, 0, 1.0, 0.0, 0.0, 0) for i in range(HD // 2)],
                        dtype=np.float32)
    a = dict(x=bf16_round(np, rng.standard_normal(HIDDEN)), nw=bf16_round(np, 1.0 + 0.2 * rng.standard_normal(HIDDEN)),
             wqkv=bf16_round(np, rng.standard_normal((QKV, HIDDEN)) / math.sqrt(HIDDEN)),
             bias=bf16_round(np, 0.5 * rng.standard_normal(QKV)),
             kc0=bf16_round(np, rng.standard_normal((KV_ROWS, NK))), vc0=bf16_round(np, rng.standard_normal((KV_ROWS, NK))))
    wo = bf16_round(np, rng.standard_normal((HIDDEN, NQ)) / math.sqrt(NQ))
    worst = 0.0
    for p in (0, 5, 129, 383, 1000, KV_ROWS - 1):
        ref_att, ref_k, ref_v, _ = reference(np, a, p, inv_freq)
        att, k, v = emulate_fold(np, a, p, inv_freq)
        err = max(float(np.abs(att - ref_att).max() / np.abs(ref_att).max()),
                  float(np.abs(k - ref_k).max() / np.abs(ref_k).max()), float(np.abs(v - ref_v).max() / np.abs(ref_v).max()))
        ref_o = wo @ bf16_round(np, att).reshape(-1)
        o = np.array(emulate_o_tail(np, att, wo), dtype=np.float64) / FIXED
        err_o = float(np.abs(o - ref_o).max() / np.abs(ref_o).max())
        worst = max(worst, err, err_o)
        print(f"p {p:>4}: emulated fold vs float64 reference (att, K and V row p), max error {err:.1e} of max|ref|; "
              f"o tail (fold+o) vs W_o att {err_o:.1e}")
    ok = worst < 1e-6
    print("emulation:", "ok" if ok else "FAIL")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--compile-only", metavar="ARCH", nargs="?", const="sm_90a")
    ap.add_argument("--positions", default="129,200,255,383,1000")
    ap.add_argument("--no-mlp", action="store_true", help="no gate/up and down stand-ins after o")
    ap.add_argument("--emulate", action="store_true", help="no GPU: the kernel's index arithmetic in NumPy")
    ap.add_argument("--kiln-define", action="append", default=[], metavar="NAME=VALUE",
                    help="compile kiln's kernels with -DNAME=VALUE (repeatable)")
    args = ap.parse_args()
    if args.emulate:
        return emulate()

    import kernel_check as kc

    # The fold+o module is kiln's fused kernel built with the probe's tail: the same -D options.
    os.environ["PROBE_NVRTC_DEFINES"] = " ".join([os.environ.get("PROBE_NVRTC_DEFINES", "")] + args.kiln_define)
    if args.compile_only:
        _, log = kc.nvrtc_cubin(None, args.compile_only, only=KILN_FILES, defines=args.kiln_define)
        bad = "warning" in log.lower()
        print(log + "kiln kernels compile:", "FAIL" if bad else "ok")
        return max(1 if bad else 0, pp.compile_only(args.compile_only, SRC_O, kiln_headers=True))

    import cupy as cp
    import numpy as np

    kiln_mod, how = kc.load_module(cp, kc.Report(), only=KILN_FILES, defines=args.kiln_define)
    pdl = kc.PdlLaunch(cp)
    f_qkv = kiln_mod.get_function("kiln_qkv_rope_bf16")
    f_attn = kiln_mod.get_function("kiln_attention_cluster_g1_bf16")
    f_lin = kiln_mod.get_function("kiln_linear_bf16_bf16")
    f_fold = kiln_mod.get_function("kiln_qkv_attention_bf16")
    f_foldo = pp.load_probe(cp, SRC_O, "probe_qkv_attn_o").get_function("kiln_qkv_attention_bf16")
    print(f"GPU {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}; kiln kernels: {how}; "
          f"{'QKV, attention, o' if args.no_mlp else 'QKV, attention, o, gate/up, down'} per layer")
    u32, f32s = np.uint32, np.float32
    inv_freq = np.array([kc.Checker.inv_freq(i, HD, THETA, 0, 1.0, 0.0, 0.0, 0) for i in range(HD // 2)],
                        dtype=np.float32)
    table = kc.rope_table(HD, THETA, 0, 1.0, 0.0, 0.0, 0, True)
    rope_args = (u32(HD), u32(0), f32s(THETA), u32(0), f32s(1.0), f32s(0.0), f32s(0.0), u32(0))
    mlp_buffers, add_mlp = pp.mlp_stand_ins(cp, np, kc, pdl, f_lin, HIDDEN, INTER)
    layers = []
    for _ in range(LAYERS):
        ly = dict(
            x=pp.bf16_random(cp, HIDDEN, 1.0),
            nw=((cp.random.standard_normal(HIDDEN, dtype=cp.float32) * cp.float32(0.2) + cp.float32(1.0))
                .view(cp.uint32) >> 16).astype(cp.uint16),
            wqkv=pp.bf16_random(cp, QKV * HIDDEN, 1.0 / math.sqrt(HIDDEN)),
            bias=pp.bf16_random(cp, QKV, 0.5),
            q=cp.zeros(NQ, dtype=cp.uint16),
            kc=pp.bf16_random(cp, KV_ROWS * NK, 1.0),
            vc=pp.bf16_random(cp, KV_ROWS * NK, 1.0),
            att=cp.zeros(NQ + 16, dtype=cp.uint16),  # + fold+o's ProbeO {wo, acc, out_features} (32 bytes)
            w=pp.bf16_random(cp, HIDDEN * NQ, 1.0 / math.sqrt(NQ)),
            y=cp.zeros(HIDDEN, dtype=cp.uint16),
            acc=cp.zeros(HIDDEN, dtype=cp.uint64),
        )
        desc = np.array([ly["w"].data.ptr, ly["acc"].data.ptr, HIDDEN, 0], dtype=np.uint64)
        ly["att"][NQ:] = cp.asarray(desc.view(np.uint16))
        ly["kc0"], ly["vc0"] = ly["kc"].copy(), ly["vc"].copy()
        if not args.no_mlp:
            ly.update(mlp_buffers())
        layers.append(ly)
    cb = cp.zeros(1, dtype=cp.int32)
    gq, bq = (QKV // 16, 1, 1), (256, 1, 1)  # the plan's qkv_rope for the 0.5B: narrow (KILN_GEMV_NARROW)
    ga, ba = kc.geometry("attention_cluster", rows=1, heads=H, kv_heads=KVH, chunk_heads=1)
    gf, bf = (H, 8, 1), (256, 1, 1)
    go, bo = kc.geometry("linear", rows=1, out_features=HIDDEN, in_features=NQ)
    scale = np.float32(1.0 / math.sqrt(HD))
    f32 = lambda a: pp.bf16_to_f32(cp, a).get()  # noqa: E731
    fails = 0

    def qkv_rope(ly, pos):
        pdl(f_qkv, gq, bq, (ly["x"], ly["nw"], ly["wqkv"], ly["bias"], pos, cb, ly["q"], ly["kc"], ly["vc"], u32(1),
                            u32(HIDDEN), u32(H), u32(KVH), u32(HD), u32(KV_ROWS), u32(1), f32s(EPS), u32(1), u32(1),
                            *rope_args, table))

    def attention(ly, pos):
        pdl(f_attn, ga, ba, (ly["q"], ly["kc"], ly["vc"], pos, cb, ly["att"], u32(1), u32(H), u32(KVH), u32(HD),
                             scale, u32(KV_ROWS), u32(PLANNED_LEN), u32(MIN_SPLIT), u32(1), u32(1)))

    def fold(ly, pos, f=f_fold):
        pdl(f, gf, bf, (ly["x"], ly["nw"], ly["wqkv"], ly["bias"], pos, cb, ly["kc"], ly["vc"], ly["att"],
                        u32(HIDDEN), u32(H), u32(KVH), u32(HD), u32(KV_ROWS), u32(1), f32s(EPS), u32(1), u32(1),
                        scale, u32(PLANNED_LEN), u32(MIN_SPLIT), *rope_args, table))

    print(f"{'p':>5} {'kiln':>8} {'noattn':>8} {'fold':>8} {'fold+o':>8} {'kiln-fold':>10} {'kiln-fold+o':>12}  "
          "us per layer; check")
    for p in [int(v) for v in args.positions.split(",")]:
        pos = cp.full(1, p, dtype=cp.int32)
        # Layer 0 against the float64 reference: kiln's chain, then the fold (each from the original cache).
        ly = layers[0]
        arrays = {n: f32(ly[n]) for n in ("x", "nw", "wqkv", "bias", "kc0", "vc0")}
        arrays["wqkv"] = arrays["wqkv"].reshape(QKV, HIDDEN)
        arrays["kc0"], arrays["vc0"] = arrays["kc0"].reshape(KV_ROWS, NK), arrays["vc0"].reshape(KV_ROWS, NK)
        ref_att, ref_k, ref_v, _ = reference(np, arrays, p, inv_freq)
        ref_o = f32(ly["w"]).reshape(HIDDEN, NQ).astype(np.float64) @ bf16_round(np, ref_att).reshape(-1)
        errs = {}
        for kind in ("kiln", "fold", "fold+o"):
            ly["kc"][:] = ly["kc0"]
            ly["vc"][:] = ly["vc0"]
            ly["att"][:NQ].fill(0)
            ly["acc"].fill(0)
            if kind == "kiln":
                qkv_rope(ly, pos)
                attention(ly, pos)
            else:
                fold(ly, pos, f_fold if kind == "fold" else f_foldo)
            cp.cuda.Device().synchronize()
            got_k = f32(ly["kc"]).reshape(KV_ROWS, NK)[p]
            got_v = f32(ly["vc"]).reshape(KV_ROWS, NK)[p]
            errs[kind] = max(float(np.abs(f32(ly["att"][:NQ]).reshape(H, HD) - ref_att).max() / np.abs(ref_att).max()),
                             float(np.abs(got_k - ref_k).max() / np.abs(ref_k).max()),
                             float(np.abs(got_v - ref_v).max() / np.abs(ref_v).max()))
            if kind == "fold+o":
                got_o = ly["acc"].get().view(np.int64).astype(np.float64) / FIXED
                errs[kind] = max(errs[kind], float(np.abs(got_o - ref_o).max() / np.abs(ref_o).max()))
        for ly in layers:
            ly["kc"][:] = ly["kc0"]
            ly["vc"][:] = ly["vc0"]
            ly["acc"].fill(0)

        def chain(kind):
            out = []
            for ly in layers:
                if kind in ("kiln", "noattn"):
                    out.append(lambda ly=ly: qkv_rope(ly, pos))
                if kind == "kiln":
                    out.append(lambda ly=ly: attention(ly, pos))
                if kind == "fold":
                    out.append(lambda ly=ly: fold(ly, pos))
                if kind == "fold+o":
                    out.append(lambda ly=ly: fold(ly, pos, f_foldo))
                else:
                    out.append(lambda ly=ly: pdl(f_lin, go, bo, (
                        ly["att"], ly["w"], np.uint64(0), ly["y"], u32(1), u32(NQ), u32(HIDDEN), u32(0))))
                if not args.no_mlp:
                    add_mlp(out, ly)
            return out

        times, ys = pp.time_chains(cp, layers, chain, ("kiln", "noattn", "fold", "fold+o"), LAYERS)
        worst = worst_o = 0.0
        exact = True
        for a, b, ly in zip(ys["fold"], ys["kiln"], layers):
            scale_b = max(float(cp.max(cp.abs(b))), 1e-30)
            worst = max(worst, float(cp.max(cp.abs(a - b))) / scale_b)
            acc = ly["acc"].view(cp.int64)
            exact = exact and bool(cp.all(acc % RUNS == 0))
            worst_o = max(worst_o, float(cp.max(cp.abs(acc.astype(cp.float64) / (RUNS * FIXED) - b))) / scale_b)
        ok = worst < 2e-2 and worst_o < 2e-2 and exact and all(e < 2e-2 for e in errs.values()) and \
            all(bool(cp.all(cp.isfinite(a))) for a in ys["fold"])
        fails += not ok
        print(f"{p:>5} {times['kiln'] * 1e6:>8.2f} {times['noattn'] * 1e6:>8.2f} {times['fold'] * 1e6:>8.2f} "
              f"{times['fold+o'] * 1e6:>8.2f} {(times['kiln'] - times['fold']) * 1e6:>+10.2f} "
              f"{(times['kiln'] - times['fold+o']) * 1e6:>+12.2f}  {'PASS' if ok else 'FAIL'} "
              f"(layer 0 vs float64: kiln {errs['kiln']:.1e}, fold {errs['fold']:.1e}, fold+o {errs['fold+o']:.1e}; "
              f"o outputs vs kiln: fold {worst:.1e}, fold+o {worst_o:.1e}, its {RUNS} runs' sums "
              f"{'exact multiples' if exact else 'NOT multiples'})", flush=True)
    print("probe:", "FAIL" if fails else "ok")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
