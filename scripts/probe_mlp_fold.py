#!/usr/bin/env python3
"""Probe (GPU, CuPy): a decoder layer's MLP in one launch, split over the intermediate dimension,
with a deterministic fixed-point sum of the down partials, against kiln's gated_linear ->
fused_linear (down + residual) launches.

    python3 scripts/probe_mlp_fold.py                  # on the GPU
    python3 scripts/probe_mlp_fold.py --compile-only   # no GPU: NVRTC build of the probe

A chain of L MLPs at batch 1 (each layer its own weights, so the bytes come from HBM as in
decode; x_{l+1} = x_l + down(SwiGLU(gate(norm x_l), up(norm x_l)))), every launch with PDL, in
one CUDA graph (median of 9 replays):
- `kiln`: kiln_gated_linear_bf16 (norm + gate/up + SwiGLU) -> kiln_fused_linear_bf16_bf16 (down +
  residual), kiln's kernels compiled as the decode plans use them (KILN_GEMV_TILES=1, tile-packed
  weights), the plan's variants and grids (src/plan/geometry.rs: the dense `_o3` variant where its
  waves are fuller, walking blocks for the default gated kernel over one wave);
- `fold nsN <sum>`: scripts/probe_mlp_fold.cu, one launch per layer (grid = SM count, a TMA
  producer warp and 8 consumer warps, a ring of N 16 KB slots); `i64`: the down partials summed as
  fixed-point int64 reductions (deterministic: checked bitwise over replays), `i64 clC` after a sum
  over clusters of C blocks in distributed shared memory; `f32`: f32 reductions (timing only, not
  deterministic); `no-sum`: partials stored, never summed (timing only); `stream`: the weight stream
  alone (timing only); `v2kCpP`: slots of C KB, P chunks copied before the consumers have x, the
  gate / up dots 4 rows at a time; `st`: clock64 stamps per phase (and a per-chunk trace with
  --trace). --variants names the kernels' symbols without `probe_mlp_fold_` (e.g. ns8_m4_c2,
  ns6_m4_c2_v2k32p1_st), `@G` after one: a grid of G blocks, not one per SM.
Each line: us per layer, the MLP's weight bytes over that time against the read bandwidth
measured in the same run (kiln's bench_read); the check: every layer's output against an f32
computation from that layer's own input (max error / max|ref| < 1e-2).
"""

import argparse
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import probe_persistent as pp  # noqa: E402

SRC = os.path.join(HERE, "probe_mlp_fold.cu")
SHAPES = {  # name: (hidden, intermediate, layers)
    "qwen2.5-0.5b": (896, 4864, 24),
    "llama3.2-1b": (2048, 8192, 16),
    "llama3.1-8b": (4096, 14336, 16),  # 32 in the model; 16 keep the weights' setup short
}
SMS, SLOTS, DENSE = 132, 2, 3  # src/plan/geometry.rs
EPS = 1e-5


def gemv_launch(features, in_features):
    """(grid, threads, symbol suffix) of a batch-1 gated / fused GEMV as src/plan/geometry.rs
    plans it: 16 features per block, under 132 blocks kernel_check's gemv_threads (512 threads for
    16-row tiles over 64 KiB), the dense `_o3` variant when its waves are fuller by 5% or the grid
    has 3 waves of the default, and the default gated kernel walking over one wave (KILN_GEMV_WALK=1)."""
    import kernel_check as kc

    blocks = -(-features // 16)
    if blocks < SMS:
        return blocks, kc.gemv_threads(blocks, in_features), ""
    fill = lambda slots: blocks / (-(-blocks // slots) * slots)
    if fill(SMS * DENSE) > fill(SMS * SLOTS) + 0.05 or blocks >= 3 * SMS * SLOTS:
        return blocks, 256, "_o3"
    return blocks, 256, ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--compile-only", metavar="ARCH", nargs="?", const="sm_90a")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--variants", default="ns6_m0_c1,ns8_m0_c1,ns4_m0_c1,ns6_m2_c1,ns6_m3_c1,ns6_m1_c1,ns8_m2_c1,ns8_m4_c2,ns8_m4_c4,ns8_m4_c6")
    ap.add_argument("--layers", type=int, default=0, help="override the layer count")
    ap.add_argument("--trace", action="store_true", help="`_st` variants: also print block 0's per-chunk trace")
    args = ap.parse_args()
    if args.compile_only:
        return pp.compile_only(args.compile_only, SRC, kiln_headers=True)

    import cupy as cp
    import numpy as np

    import kernel_check as kc

    probe = pp.load_probe(cp, SRC, "probe_mlp_fold")
    report = kc.Report()
    kiln_mod, how = kc.load_module(cp, report, only=["linear.cu", "linear_fused.cu", "bench_read.cu"],
                                   defines=("KILN_GEMV_TILES=1",))
    bandwidth = kc.Checker(cp, kiln_mod, np.random.default_rng(1), report).read_bandwidth()
    pdl = kc.PdlLaunch(cp)
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    print(f"GPU {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}, {sms} SMs; read bandwidth "
          f"(kiln_bench_read) {bandwidth:.0f} GB/s; kiln kernels: {how}")
    print(f"{'shape':<14} {'chain':<18} {'us/layer':>9} {'GB/s':>7} {'of measured':>11}  check")
    u32, f32, null = np.uint32, np.float32, np.uint64(0)
    names = {"m0": "i64", "m1": "f32", "m2": "no-sum", "m3": "stream", "m4": "i64"}
    fails = 0
    for name in args.shapes.split(","):
        H, I, L = SHAPES[name]
        L = args.layers or L
        nbytes = 3 * H * I * 2 * L
        pack = lambda w, n, k: kc.Checker.pack_tiles(w.reshape(n, k)).reshape(-1)  # on the GPU
        lay = []
        for _ in range(L):
            gate, up = pp.bf16_random(cp, I * H, 1.0 / math.sqrt(H)), pp.bf16_random(cp, I * H, 1.0 / math.sqrt(H))
            down = pp.bf16_random(cp, H * I, 1.0 / math.sqrt(I))
            nw = pp.bf16_to_f32(cp, pp.bf16_random(cp, H, 0.2)) + cp.float32(1.0)
            lay.append(dict(gate=gate, up=up, down_t=cp.ascontiguousarray(down.reshape(H, I).T).reshape(-1),
                            nw=(nw.view(cp.uint32) >> 16).astype(cp.uint16),
                            kg=pack(gate, I, H), ku=pack(up, I, H), kd=pack(down, H, I),
                            h=cp.zeros(I, dtype=cp.uint16)))
        x0 = pp.bf16_random(cp, H, 1.0)
        xs = [x0] + [cp.zeros(H, dtype=cp.uint16) for _ in range(L)]  # kiln: x_l
        res = [cp.zeros(H, dtype=cp.uint16) for _ in range(L)]  # fold: x_l as layer l's block 0 wrote it
        acc = [cp.zeros(H, dtype=cp.int64) for _ in range(L)]
        part = cp.zeros(4 * sms * H, dtype=cp.float32)

        def reference(x, ly):
            """Layer output in f32 from its input x (bf16 bits), as kiln's kernels round."""
            xf = pp.bf16_to_f32(cp, x)
            bf = lambda a: pp.bf16_to_f32(cp, (a.astype(cp.float32).view(cp.uint32) + cp.uint32(0x7FFF) +
                                               ((a.astype(cp.float32).view(cp.uint32) >> 16) & 1)) >> 16)
            inv = 1.0 / math.sqrt(float(cp.mean(xf * xf)) + EPS)
            hn = bf(xf * pp.bf16_to_f32(cp, ly["nw"]))
            g = bf((pp.bf16_to_f32(cp, ly["gate"]).reshape(I, H) @ hn) * inv)
            u = bf((pp.bf16_to_f32(cp, ly["up"]).reshape(I, H) @ hn) * inv)
            h = bf(g / (1.0 + cp.exp(-g)) * u)
            return (pp.bf16_to_f32(cp, ly["down_t"]).reshape(I, H).T @ h) + xf

        def check(inputs, outputs):
            worst = 0.0
            for ly, x, y in zip(lay, inputs, outputs):
                ref = reference(x, ly)
                got = y if y.dtype == cp.float32 else pp.bf16_to_f32(cp, y)
                worst = max(worst, float(cp.max(cp.abs(got - ref))) / max(float(cp.max(cp.abs(ref))), 1e-30))
            return worst

        def line(label, sec, worst, extra=""):
            gbs = nbytes / sec / 1e9
            ok = worst is not None and worst < 1e-2
            verdict = "-" if worst is None else f"{'PASS' if ok else 'FAIL'} (worst layer error {worst:.1e} of max|ref|)"
            print(f"{name:<14} {label:<18} {sec * 1e6 / L:>9.2f} {gbs:>7.0f} {gbs / bandwidth:>11.2f}  {verdict}{extra}",
                  flush=True)
            return ok

        # kiln's two launches per layer.
        gg, gt, gsuf = gemv_launch(I, H)
        if gsuf == "" and gt == 256 and gg > SMS * SLOTS:
            gg = SMS * SLOTS  # the default gated kernel walks its tiles over one wave
        dg, dt, dsuf = gemv_launch(H, I)
        f_g = kiln_mod.get_function("kiln_gated_linear_bf16" + gsuf)
        f_d = kiln_mod.get_function("kiln_fused_linear_bf16_bf16" + dsuf)
        chain = []
        for i, ly in enumerate(lay):
            chain.append(lambda i=i, ly=ly: pdl(f_g, (gg, 1, 1), (gt, 1, 1), (
                xs[i], ly["nw"], ly["kg"], ly["ku"], ly["h"], u32(1), u32(H), u32(I), u32(1), f32(EPS))))
            chain.append(lambda i=i, ly=ly: pdl(f_d, (dg, 1, 1), (dt, 1, 1), (
                ly["h"], null, ly["kd"], null, xs[i], xs[i + 1], null, u32(1), u32(I), u32(H), u32(0), f32(EPS),
                u32(0), u32(1), u32(0))))
        cp.cuda.Device().synchronize()
        sec = pp.graph_time(cp, chain)
        kiln_out = pp.bf16_to_f32(cp, xs[L])
        fails += not line("kiln gated + down", sec,
                          check(xs[:L], xs[1:]), f"  (gated grid {gg}x{gt}{gsuf}, down {dg}x{dt}{dsuf})")

        for v in args.variants.split(","):
            v, _, grid = v.partition("@")  # "@G": a grid of G blocks instead of one per SM
            grid = int(grid or sms)
            ns, mode, cl = v.split("_")[:3]
            stamped = v.endswith("_st")
            fn = probe.get_function(f"probe_mlp_fold_{v}")
            cb = int(v.split("_v2k")[1].split("p")[0]) * 1024 if "_v2k" in v else 16384
            smem = int(ns[2:]) * cb + 2 * H + 3 * 1024 + 32 + 16 * int(ns[2:]) + 8
            pdl.max_dynamic_smem(fn, smem)
            for a in acc + res:
                a.fill(0)
            cp.cuda.Device().synchronize()
            chain = []
            for i, ly in enumerate(lay):
                rin = x0 if i == 0 else res[i - 1]
                ain = null if i == 0 or mode in ("m2", "m3") else acc[i - 1]
                chain.append(lambda ly=ly, i=i, rin=rin, ain=ain: pdl(fn, (grid, 1, 1), (288, 1, 1), (
                    rin, ain, ly["nw"], ly["gate"], ly["up"], ly["down_t"], res[i], acc[i], acc[(i - 2) % L], part,
                    u32(H), u32(I), f32(EPS)), smem=smem))
            sec = pp.graph_time(cp, chain)
            label = (f"fold {ns} {names[mode]}" + (f" cl{cl[1:]}" if cl != "c1" else "") +
                     (f" g{grid}" if grid != sms else "") + (" " + v.split("_")[3] if "_v2k" in v else "") +
                     (" st" if stamped else ""))
            if stamped:
                st = cp.ndarray((1024, 16), dtype=cp.int64, memptr=probe.get_global("mf_stamps"))[:grid].get()
                d = (st - st[:, :1]).astype(np.float64)
                clk = cp.cuda.Device().attributes["ClockRate"] * 1e3  # Hz
                us = lambda c: np.median(c) / clk * 1e6
                print(f"{name:<14} {label:<18} stamps (median over blocks, us from the block's start at "
                      f"{clk / 1e6:.0f} MHz nominal): wait {us(d[:, 1]):.2f}, x normed {us(d[:, 2]):.2f}, thread 0's "
                      f"gate/up {us(d[:, 9]):.2f}, gate/up {us(d[:, 3]):.2f}, thread 0's h {us(d[:, 8]):.2f}, h "
                      f"{us(d[:, 4]):.2f}, down {us(d[:, 5]):.2f}, end {us(d[:, 6]):.2f} "
                      f"(max {np.max(d[:, 6]) / clk * 1e6:.2f}), last copy issued {us(d[:, 7]):.2f}", flush=True)
                tr = cp.ndarray((264, 512), dtype=cp.int64, memptr=probe.get_global("mf_trace"))[:min(grid, 264)].get()
                n_rows = -(-I // grid)
                chunks = 3 * -(-n_rows // max(1, cb // (2 * H)))
                t = (tr - st[:min(grid, 264), :1]).astype(np.float64) / clk * 1e6
                if args.trace:
                    print(f"{name:<14} {label:<18} per chunk (block 0; median over blocks): copy issued / thread 0's "
                          f"wait returned, us from the block's start")
                for i in range(min(chunks, 256) if args.trace else 0):
                    got = "" if i >= 2 * chunks // 3 or i % int(ns[2:]) == 0 else "  (not thread 0's)"
                    print(f"    chunk {i:>3}: {t[0, 256 + i]:7.2f} / {t[0, i]:7.2f}   "
                          f"{np.median(t[:, 256 + i]):7.2f} / {np.median(t[:, i]):7.2f}{got}")
            if mode in ("m0", "m1", "m4"):
                if mode != "m1":
                    tot = [(a.astype(cp.float64) * 2.0 ** -32).astype(cp.float32) for a in acc]
                else:
                    tot = [a.view(cp.float32)[:H].copy() for a in acc]
                # layer l's output: x_{l+1} as layer l + 1 read it; the last layer's, its sum + x_l in
                # f32 (the accumulators of layers l < L - 2 are zeroed by layer l + 2 by then)
                ys = [pp.bf16_to_f32(cp, r) for r in res[1:]] + [tot[-1] + pp.bf16_to_f32(cp, res[-1])]
                bits = [r.copy() for r in res] + [a.copy() for a in acc]
                pp.graph_time(cp, chain, reps=3)
                same = all(bool(cp.all(a == b)) for a, b in zip(bits, res + acc))
                worst = check(res, ys)
                diff = float(cp.max(cp.abs(ys[-1] - kiln_out))) / max(float(cp.max(cp.abs(kiln_out))), 1e-30)
                fails += not line(label, sec, worst, f"; replays bitwise {'equal' if same else 'DIFFERENT'}; "
                                  f"last layer vs kiln's chain {diff:.1e}")
                if mode != "m1" and not same:
                    fails += 1
            else:
                line(label, sec, None, " timing only")
        del lay, xs, res, acc, part, chain
        cp.get_default_memory_pool().free_all_blocks()
    print("probe:", "FAIL" if fails else "ok")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
