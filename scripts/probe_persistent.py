#!/usr/bin/env python3
"""Feasibility probe of the persistent decode kernel (GPU, CuPy): one resident grid walking a chain
of batch-1 GEMVs against the same chain as separate kernel launches.

    python3 scripts/probe_persistent.py                     # both shapes, on the GPU
    python3 scripts/probe_persistent.py --compile-only      # no GPU: NVRTC build of the probe

The chain is a decoder's GEMVs without the attention: per layer QKV (hidden -> q + 2 kv), o
(hidden -> hidden), gate/up (hidden -> 2 x intermediate), down (intermediate -> hidden), each
reading the previous one's output (its first K elements), every layer with its own weights (so
the chain streams the model's layer bytes from HBM, as decode does). Weights are random, scaled
by 1 / sqrt(K) so that activations stay O(1) over the chain.

Timed from CUDA graphs (median of 9 replays):
- `kiln linear`: kiln's decode GEMV (kernels/linear.cu, kiln_linear_bf16_bf16, the plan's
  geometry) once per GEMV, plain launches and PDL launches (programmatic edges: each kernel's
  first weight loads overlap the previous one's tail, as kiln's decode graphs run);
- `persistent nsN[_red]`: scripts/probe_persistent.cu with a ring of N 16 KB chunks per block (a
  memset node zeroes the barrier counter before each launch); `_red`: the barrier arrival is
  one release reduction instead of a fence and an atomic;
- `persistent tmaNSxCBk` (session 26): warp-specialized, a producer warp streaming each block's
  chunks with TMA bulk copies into NS slots of CB KB (per-slot mbarriers), 16 consumer warps, the
  release-reduction barrier; the producer never waits for activations, only for free slots;
  `_pfP`: the producer also prefetches the P chunks past the ring into the L2 (cp.async.bulk.prefetch);
  `_nobar`: timing only, no wait at the barriers (its check FAILs by design): the design's
  streaming and compute with the dependencies free; `_g2`: two groups of 8 consumer warps
  taking the chunks in turn (one group's sums and barrier overlap the other's chunk); `_stream`:
  timing only, the producer's TMA stream alone (no compute, no barriers; the check FAILs);
- `persistent dfNSwW` (session 27): the dataflow design (bench/NOTES-decode.md's sketch of a persistent
  decode kernel without grid barriers): a TMA producer warp as above streaming NS 16 KB chunks (16
  rows x 512 columns of weights packed in mma.m16n8k16 fragment order), W consumer warps taking
  chunks in turn with tensor-core MMAs and no block-wide barrier, the warp completing a tile summing
  its chunks in order and publishing the tile on its output piece's counter; a chunk waits only for
  its own 512-element piece of x; `_stagewide`: for the previous stage's every tile (a grid barrier
  per warp); `_nowait`: for nothing (timing only, the check FAILs by design); `_l0`: lane 0 of a
  waiting warp polls, not all 32 lanes. Session 28 (results/2026-12-02-h200-probe-dataflow-s28.md):
  `_ll`: the flag in the data (NCCL's LL protocol: each output also stored as a tagged 32-bit word that
  the next stage reads until tagged; no fence, counter or poll); `_rel`: the counters' publish with a
  warp barrier and lane 0's release adds alone (no fence in each lane); `_bal`: each stage's extra
  tiles go to the blocks with the fewest bytes so far (`balanced_runs`), not always to the same ones;
  `_c4`, `_c8`: 4 or 8 independent MMA chains per chunk (2 otherwise); `_sx`: one copy of x per block
  (a shared-memory ring, `x_ring`), not one per warp; `_pfN`: the producer also prefetches the N
  chunks past the ring into the L2; `k1` (`df6w6k1`): 32 KB chunks of 16 rows x 1024 columns;
  `df12w4`, `df12w6`: 12 slots over 4 or 6 warps; timing only (checks FAIL by design): `_nowait_rel`
  (no waits and no fence), `_noreload` (no waits, x loaded once per stage), `_nomma` (no waits, no
  fence, no MMAs: the stream and the handshakes alone);
- `tma-staged gemv pdl NS` (session 26): one launch per GEMV with PDL like kiln's, each block a producer
  warp copying its tile with TMA into NS 16 KB slots from before its wait, 8 consumer warps;
- shape `floor`: 96 GEMVs of 896 -> 132 (one row per block), so that a chain's time is its
  per-stage latency: a PDL kernel boundary against a grid barrier.
Each line gives us per chain, us per layer and GB/s against kiln's read-bandwidth probe. The
persistent kernel's outputs are checked stage by stage against an f32 GEMV (cuBLAS via CuPy) of
its own inputs, and so are the kiln chains'.
"""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import nvrtc_util  # noqa: E402
SRC = os.path.join(HERE, "probe_persistent.cu")
SHAPES = {  # name: (hidden, q + 2 kv features, intermediate, layers)
    "qwen2.5-0.5b": (896, 896 + 2 * 128, 4864, 24),
    "llama3.2-1b": (2048, 2048 + 2 * 512, 8192, 16),
    "floor": (896, 0, 0, 24),  # 4 x 24 GEMVs of 896 -> 132: one row per block, the per-stage latency
}
CHUNK, XMAX, MAX_ITEMS, MAX_STAGES = 16384, 8192, 512, 128


def compile_probe(arch, src_path=SRC, kiln_headers=False):
    """NVRTC build of a probe source (with scripts/probe_common.cuh, and kiln's kernels/ files as
    headers when `kiln_headers`; PROBE_NVRTC_DEFINES="A=1 B" adds -DA=1 -DB): (cubin bytes, log)."""
    headers = [(n, open(os.path.join(HERE, n), "rb").read()) for n in ("probe_common.cuh",)]
    if kiln_headers:
        kernels = os.path.join(os.path.dirname(HERE), "kernels")
        headers += [(n, open(os.path.join(kernels, n), "rb").read()) for n in sorted(os.listdir(kernels))
                    if n.endswith(".cu") or n.endswith(".cuh")]
    opts = [f"--gpu-architecture={arch}", "-std=c++17", "-lineinfo", f"--include-path={nvrtc_util.cuda_include()}",
            "--ptxas-options=-v"]
    opts += [f"-D{d}" for d in os.environ.get("PROBE_NVRTC_DEFINES", "").split()]  # a variant of the probe's own kernel
    try:
        return nvrtc_util.compile_unit(open(src_path, "rb").read(), os.path.basename(src_path), headers, opts)
    except (OSError, RuntimeError) as e:
        sys.exit(str(e))


def compile_only(arch, src_path=SRC, kiln_headers=False):
    """`--compile-only`: the NVRTC build of a probe without a GPU; prints ptxas' log and returns
    the exit status (1 when the log has a warning)."""
    _, log = compile_probe(arch, src_path, kiln_headers)
    print(log)
    bad = "warning" in log.lower()
    print("probe compile:", "FAIL" if bad else "ok")
    return 1 if bad else 0


def load_probe(cp, src_path, name):
    """The probe's module on this GPU (sm_90a on an sm_90 device) with kiln's kernels as headers."""
    import tempfile

    cp.cuda.nvrtc.getVersion()  # makes CuPy load libnvrtc, so that nvrtc_util's soname resolves (kernel_check.nvrtc_cubin)
    cc = cp.cuda.Device().compute_capability
    cubin, _ = compile_probe("sm_90a" if cc == "90" else f"sm_{cc}", src_path, kiln_headers=True)
    path = os.path.join(tempfile.mkdtemp(), name + ".cubin")
    open(path, "wb").write(cubin)
    return cp.RawModule(path=path)


def probe_and_kiln(cp, src_path, name, only):
    """The probe's module (load_probe), kiln's kernels of the files `only` (kernel_check's NVRTC
    build or its cache), how those were built, and a PDL launcher: what the fold probes start with."""
    import kernel_check as kc

    probe = load_probe(cp, src_path, name)
    kiln_mod, how = kc.load_module(cp, kc.Report(), only=only)
    return probe, kiln_mod, how, kc.PdlLaunch(cp)


def time_chains(cp, layers, chain, kinds, per):
    """For each kind: every layer's `y` zeroed, then the graph of chain(kind) timed (graph_time) and
    divided by `per`, and each layer's `y` after it as f32: ({kind: seconds}, {kind: [y, ...]})."""
    times, ys = {}, {}
    for kind in kinds:
        for ly in layers:
            ly["y"].fill(0)
        cp.cuda.Device().synchronize()
        times[kind] = graph_time(cp, chain(kind)) / per
        ys[kind] = [bf16_to_f32(cp, ly["y"]).copy() for ly in layers]
    return times, ys


def mlp_stand_ins(cp, np, kc, pdl, f_lin, hidden, inter):
    """The fold probes' MLP stand-ins (kiln_linear of the real bytes, so that a fold's neighbours
    compete for its SMs as in decode): (buffers(), add(out, ly)). buffers() makes one layer's
    gate/up and down weights and outputs; add appends the layer's two launches to `out`: gate/up
    (hidden -> 2 inter) reading the layer's `y`, then down (inter -> hidden)."""
    u32 = np.uint32
    ggu, bgu = kc.geometry("linear", rows=1, out_features=2 * inter, in_features=hidden)
    gd, bd = kc.geometry("linear", rows=1, out_features=hidden, in_features=inter)

    def buffers():
        return dict(wgu=bf16_random(cp, 2 * inter * hidden, 1.0 / hidden ** 0.5), gu=cp.zeros(2 * inter, dtype=cp.uint16),
                    wd=bf16_random(cp, hidden * inter, 1.0 / inter ** 0.5), d=cp.zeros(hidden, dtype=cp.uint16))

    def add(out, ly):
        out.append(lambda: pdl(f_lin, ggu, bgu, (ly["y"], ly["wgu"], np.uint64(0), ly["gu"], u32(1), u32(hidden),
                                                 u32(2 * inter), u32(0))))
        out.append(lambda: pdl(f_lin, gd, bd, (ly["gu"], ly["wd"], np.uint64(0), ly["d"], u32(1), u32(inter), u32(hidden),
                                               u32(0))))

    return buffers, add


GRAPH_REPS = 9  # timed replays of graph_time (which runs the launches reps + 2 times in all)


def graph_time(cp, launches, reps=GRAPH_REPS):
    """Median seconds of `reps` replays of a CUDA graph of `launches`, after one eager pass (before
    the capture) and one warm-up replay: the launches run reps + 2 times in all."""
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        for f in launches:
            f()
        stream.synchronize()
        stream.begin_capture()
        for f in launches:
            f()
        graph = stream.end_capture()
        graph.launch(stream)
        stream.synchronize()
        times = []
        for _ in range(reps):
            e0, e1 = cp.cuda.Event(), cp.cuda.Event()
            e0.record(stream)
            graph.launch(stream)
            e1.record(stream)
            e1.synchronize()
            times.append(cp.cuda.get_elapsed_time(e0, e1) * 1e-3)
    times.sort()
    return times[len(times) // 2]


def bf16_random(cp, n, scale):  # bits of bf16 values (truncated f32 normals)
    a = cp.random.standard_normal(n, dtype=cp.float32) * cp.float32(scale)
    return (a.view(cp.uint32) >> 16).astype(cp.uint16)


def bf16_round(np, x):
    """float32 values rounded to the nearest bf16 (ties to even), as float32 (the fold probes' NumPy side)."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32)


def bf16_to_f32(cp, a):
    return (a.astype(cp.uint32) << 16).view(cp.float32)


DF_KC, DF_TILE_SLOTS, DF_MAX_CHUNKS = 512, 32, 16


def df_smem(ns, w, ts=DF_TILE_SLOTS, xbytes=0, kc=DF_KC):  # probe_persistent.cu df_smem
    return ns * 32 * kc + ts * (DF_MAX_CHUNKS * DF_KC // kc) * 16 * 4 + (xbytes + 8 * DF_MAX_CHUNKS * 4 if xbytes else w * kc * 2) \
        + (ts + 3) // 4 * 16 \
        + MAX_STAGES * 64 + 16 * ns


def pack_fragments(cp, w, n, k, kc_max=DF_KC):
    """w (n x k bf16 bits, row-major) in probe_chain_df's order: [tile][chunk][k step][lane][8]: rows
    padded to 16-row tiles, chunks of kc_max columns (the last narrower), lane (g, t) holding rows g,
    g + 8 x columns 2t, 2t + 1, 2t + 8, 2t + 9 of each 16-column step as mma.m16n8k16's A fragment
    (a0 a1 = row g cols 2t..; a2 a3 = row g + 8; a4 a5 = row g cols 2t + 8..; a6 a7 = row g + 8)."""
    tiles = -(-n // 16)
    wp = cp.zeros((tiles * 16, k), dtype=cp.uint16)
    wp[:n] = w.reshape(n, k)
    parts = []
    for c0 in range(0, k, kc_max):
        kc = min(kc_max, k - c0)
        sub = wp[:, c0:c0 + kc].reshape(tiles, 2, 8, kc // 16, 2, 4, 2)  # tile, h, g, step, khalf, t, pair
        parts.append(sub.transpose(0, 3, 2, 5, 4, 1, 6).reshape(tiles, 16 * kc))  # tile, step, g, t, khalf, h, pair
    return cp.ascontiguousarray(cp.concatenate(parts, axis=1)).ravel()


def even_split(np, load, count, grid):
    """count items over grid blocks, floor or ceil of count / grid each, the count % grid extra ones to
    the blocks with the fewest bytes in `load` so far (ties: lowest index): (starts, ends) of each
    block's contiguous run, in block order."""
    q, r = divmod(count, grid)
    sizes = np.full(grid, q, dtype=np.int64)
    sizes[np.argsort(load, kind="stable")[:r]] += 1
    ends = np.cumsum(sizes)
    return ends - sizes, ends


def default_runs(np, stages, grid):
    """probe_chain_df's own split without a runs table, as a table: stage s's T tiles, block b taking
    [floor(b T / grid), floor((b + 1) T / grid)), so the extra tiles of every stage go to the same blocks."""
    runs = np.zeros((len(stages), grid, 2), dtype=np.uint32)
    b = np.arange(grid + 1, dtype=np.int64)
    for s, (_, n) in enumerate(stages):
        edges = b * -(-n // 16) // grid
        runs[s, :, 0], runs[s, :, 1] = edges[:-1], edges[1:]
    return runs


def balanced_runs(np, stages, grid):
    """The `_bal` variants' [stage][block] tile runs {t, t1} (uint32 pairs): each stage's tiles split by
    `even_split` over the bytes each block has streamed so far, so that every block streams about the
    same bytes over the chain."""
    runs = np.zeros((len(stages), grid, 2), dtype=np.uint32)
    load = np.zeros(grid, dtype=np.int64)
    for s, (k, n) in enumerate(stages):
        runs[s, :, 0], runs[s, :, 1] = even_split(np, load, -(-n // 16), grid)
        load += (runs[s, :, 1] - runs[s, :, 0]).astype(np.int64) * 32 * k
    return runs


def x_ring(np, stages, runs, ns, w, xelems=32768):
    """A `_sx` variant's x ring: (xoff per stage, or None when it does not fit). Stage s's x takes
    ceil(K / DF_KC) whole pieces from xoff[s], placed one after another and wrapping to 0 where the
    next would cross the ring's end. A warp at chunk i can be ahead of another's chunk by less than
    2 NS + W chunks (the producer has issued chunk j only once chunk j - NS was consumed, and a warp
    loads x before its chunk's weights land), so two stages within the largest stage span of any
    2 NS + W - 1 consecutive chunks of a block must not overlap."""
    win, span = 2 * ns + w - 1, 0
    for b in range(runs.shape[1]):
        seq = []
        for s_, (k, n) in enumerate(stages):
            seq += [s_] * (int(runs[s_, b, 1] - runs[s_, b, 0]) * -(-k // DF_KC))
        if seq:
            a = np.array(seq)
            span = max(span, int((a[np.minimum(np.arange(len(a)) + win - 1, len(a) - 1)] - a).max()))
    xoff, at = [], 0
    sizes = [-(-k // DF_KC) * DF_KC for k, _ in stages]
    for xk in sizes:
        at = 0 if at + xk > xelems else at
        xoff.append(at)
        at += xk
    for s_ in range(len(stages)):
        for t_ in range(s_ + 1, min(len(stages), s_ + span + 1)):
            if xoff[s_] < xoff[t_] + sizes[t_] and xoff[t_] < xoff[s_] + sizes[s_]:
                return None, span
    return xoff, span


DFSK_PMAX = 4  # probe_persistent.cu DFSK_PMAX


def sk_runs(np, stages, grid):
    """The `dfsk` variants' work split: ([stage][block] {u0, u1, p0, 0} uint32, [nparts per tile] per stage).
    A stage's units (tile * nc + chunk) are cut into contiguous runs in block order, floor or ceil of
    units / grid each, the extra units going to the blocks with the fewest bytes so far; p0 is a block's
    part index in its first tile (how many blocks before it computed part of that tile)."""
    runs = np.zeros((len(stages), grid, 4), dtype=np.uint32)
    load = np.zeros(grid, dtype=np.int64)
    nparts = []
    for s_, (k, n) in enumerate(stages):
        nc = -(-k // DF_KC)
        starts, ends = even_split(np, load, -(-n // 16) * nc, grid)
        sizes = ends - starts
        runs[s_, :, 0], runs[s_, :, 1] = starts, ends
        load += sizes * 32 * k // nc
        npt = np.zeros(-(-n // 16), dtype=np.uint32)
        for b in range(grid):
            if sizes[b] == 0:
                continue
            t0, t1 = starts[b] // nc, (ends[b] - 1) // nc
            runs[s_, b, 2] = npt[t0] if starts[b] % nc else 0
            assert starts[b] % nc == 0 or npt[t0] > 0
            npt[t0:t1 + 1] += 1
        assert npt.min() >= 1 and npt.max() <= DFSK_PMAX, (s_, int(npt.max()))
        nparts.append(npt)
    return runs, nparts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--compile-only", metavar="ARCH", nargs="?", const="sm_90a")
    ap.add_argument("--shapes", default=",".join(SHAPES), help="of " + ", ".join(SHAPES))
    ap.add_argument("--layers", type=int, default=0, help="override the layer count")
    ap.add_argument("--kiln-repeats", type=int, default=1, help="time (and check) the kiln chains this many times")
    ap.add_argument("--no-persistent", action="store_true", help="only the kiln chains")
    ap.add_argument("--no-tma-pdl", action="store_true", help="leave out the TMA-staged GEMV launches")
    ap.add_argument("--variants", default="", help="only these persistent variants (e.g. ns12_red_b6,tma12x16k)")
    args = ap.parse_args()
    if args.compile_only:
        return compile_only(args.compile_only)

    import cupy as cp
    import numpy as np

    import kernel_check as kc

    dev = cp.cuda.Device()
    cc = dev.compute_capability
    arch = "sm_90a" if cc == "90" else f"sm_{cc}"
    sms = dev.attributes["MultiProcessorCount"]
    cubin, log = compile_probe(arch)
    import tempfile

    path = os.path.join(tempfile.mkdtemp(), "probe.cubin")
    open(path, "wb").write(cubin)
    probe = cp.RawModule(path=path)
    report = kc.Report()
    kiln_mod, how = kc.load_module(cp, report, only=["linear.cu", "bench_read.cu"])
    checker = kc.Checker(cp, kiln_mod, np.random.default_rng(1), report)
    bandwidth = checker.read_bandwidth()
    print(f"GPU {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}, {sms} SMs; read bandwidth "
          f"(kiln_bench_read) {bandwidth:.0f} GB/s; kiln kernels: {how}")
    pdl = kc.PdlLaunch(cp)
    lin = kiln_mod.get_function("kiln_linear_bf16_bf16")
    fails = 0
    print(f"{'shape':<14} {'variant':<22} {'us/chain':>9} {'us/layer':>9} {'GB/s':>7} {'of measured':>11}")
    for name in args.shapes.split(","):
        H, QKV, I, L = SHAPES[name]
        L = args.layers or L
        per_layer = [(H, QKV), (H, H), (H, 2 * I), (I, H)] if I else [(H, 132)] * 4  # (K, N)
        stages = [(k, n) for _ in range(L) for k, n in per_layer]
        for k, n in per_layer:  # the probe kernel's limits (probe_persistent.cu)
            per_chunk = max(1, CHUNK // (2 * k))
            assert k % 8 == 0 and 2 * k <= CHUNK and k <= XMAX and 11 * per_chunk <= 512
            assert 11 * per_chunk * -(-k // 1024) <= MAX_ITEMS
        ws = [bf16_random(cp, n * k, 1.0 / np.sqrt(k)) for k, n in stages]
        kmax = max(k for k, _ in stages)  # a stage reads the first K elements of the last one's y
        ys = [cp.zeros(max(n, kmax), dtype=cp.uint16) for _, n in stages]
        x0 = bf16_random(cp, H, 1.0)
        xs = [x0] + ys[:-1]
        nbytes = sum(2 * k * n for k, n in stages)

        def kiln_launch(use_pdl):
            out = []
            for i, (k, n) in enumerate(stages):
                grid, block = kc.geometry("linear", rows=1, out_features=n)
                a = (xs[i], ws[i], np.uint64(0), ys[i], np.uint32(1), np.uint32(k), np.uint32(n), np.uint32(0))
                out.append((lambda a=a, g=grid, b=block: pdl(lin, g, b, a)) if use_pdl else
                           (lambda a=a, g=grid, b=block: lin(g, b, a)))
            return out

        def worst_stage_error():
            """max over stages of max|y - f32 GEMV of the stage's own input| / max|ref|."""
            worst, bad = 0.0, []
            for i, (k, n) in enumerate(stages):
                ref = bf16_to_f32(cp, ws[i]).reshape(n, k) @ bf16_to_f32(cp, xs[i])[:k]
                got = bf16_to_f32(cp, ys[i])[:n]
                err = float(cp.max(cp.abs(got - ref))) / max(float(cp.max(cp.abs(ref))), 1e-30)
                worst = max(worst, err)
                if not err < 1e-2:
                    wrong = cp.abs(got - ref) > 1e-2 * float(cp.max(cp.abs(ref)))
                    idx = cp.nonzero(wrong)[0]
                    bad.append(f"stage {i} ({k}x{n}): error {err:.2e}, {int(idx.size)} of {n} outputs wrong "
                               f"(first {int(idx[0])}, last {int(idx[-1])}), {int(cp.sum(got == 0))} zeros")
            for line in bad[:8]:
                print("    " + line)
            return worst

        def report(label, sec):
            """Prints the chain's line (time, bandwidth, its stages' check); 1 if the check failed."""
            gbs = nbytes / sec / 1e9
            worst = worst_stage_error()
            ok = worst < 1e-2
            print(f"{name:<14} {label:<22} {sec * 1e6:>9.1f} {sec * 1e6 / L:>9.2f} {gbs:>7.0f} {gbs / bandwidth:>11.2f}"
                  f"  check {'PASS' if ok else 'FAIL'} (worst stage error {worst:.1e} of max|ref|)", flush=True)
            return int(not ok)

        # One GEMV per launch with its weights staged by TMA before the PDL wait (probe_gemv_tmaNS).
        def prepare(fn, smem):
            """Lets fn take `smem` bytes of shared memory and zeroes the outputs (graph_time's stream
            does not wait for the legacy stream's fills: synchronize)."""
            pdl.max_dynamic_smem(fn, smem)
            for y in ys:
                y.fill(0)
            cp.cuda.Device().synchronize()

        for ns in [] if args.no_tma_pdl else [4, 6]:
            fn = probe.get_function(f"probe_gemv_tma{ns}")
            prepare(fn, ns * CHUNK + 1024 + 16 * ns + 2 * max(k for k, _ in stages))
            chain = [(lambda i=i, k=k, n=n, fn=fn, ns=ns: pdl(
                fn, (sms, 1, 1), (288, 1, 1), (ws[i], xs[i], ys[i], np.uint32(k), np.uint32(n)),
                smem=ns * CHUNK + 1024 + 16 * ns + 2 * k)) for i, (k, n) in enumerate(stages)]
            fails += report(f"tma-staged gemv pdl {ns}", graph_time(cp, chain))

        for use_pdl in [False, True] * args.kiln_repeats:
            for y in ys:
                y.fill(0)
            # graph_time's stream does not wait for the legacy stream's fills and random inputs
            # (session 14's first 1B runs read x0 / raced the fills and failed their check).
            cp.cuda.Device().synchronize()
            fails += report("kiln linear" + (" pdl" if use_pdl else ""), graph_time(cp, kiln_launch(use_pdl)))

        # The stage table: {w, x, y, K, N} as 3 pointers and 2 u32 (32 bytes).
        table = np.zeros((len(stages), 4), dtype=np.uint64)
        for i, (k, n) in enumerate(stages):
            table[i, 0], table[i, 1], table[i, 2] = ws[i].data.ptr, xs[i].data.ptr, ys[i].data.ptr
            table[i, 3] = np.uint64(k) | (np.uint64(n) << np.uint64(32))
        dtable = cp.asarray(table)
        bar = cp.zeros(1, dtype=cp.uint32)
        # (kernel, block, dynamic shared memory): the ring variants, then the warp-specialized TMA
        # ones (NS slots of CB bytes; probe_chain_tma in probe_persistent.cu).
        variants = [(f"ns{ns}{red}", 512, ns * CHUNK + XMAX * 2 + MAX_ITEMS * 4 + MAX_STAGES * 32)
                    for ns, red in [(12, ""), (12, "_red"), (12, "_red_b6"), (12, "_red_b3"), (6, ""), (2, "")]]
        variants += [(f"tma{ns}x{cb // 1024}k{pf}", 32 * 17, ns * cb + XMAX * 2 + 2 * MAX_ITEMS * 4 + MAX_STAGES * 32 + 16 * ns)
                     for ns, cb, pf in [(12, 16384, ""), (6, 32768, ""), (4, 49152, ""), (3, 65536, ""), (6, 32768, "_pf4"),
                                        (6, 32768, "_pf8"), (12, 16384, "_pf16"),
                                        (6, 32768, "_nobar"), (6, 32768, "_g2"), (12, 16384, "_g2"),
                                        (6, 32768, "_g2_nobar"), (6, 32768, "_stream"), (12, 16384, "_stream")]]
        dfs = [(10, 10, ""), (8, 8, ""), (10, 5, ""), (8, 4, ""), (10, 10, "_stagewide"), (10, 10, "_nowait"),
               (8, 8, "_nowait"), (10, 10, "_l0"), (8, 8, "_l0"), (10, 5, "_l0"), (8, 8, "_l0_stagewide"),
               (8, 8, "_rel"), (8, 8, "_l0_rel"), (8, 8, "_ll"), (10, 10, "_ll"), (10, 5, "_ll"), (8, 4, "_ll"),
               (12, 4, "_ll"), (12, 4, "_nowait"), (12, 6, "_ll"), (12, 6, "_nowait"), (8, 8, "_noreload"),
               (12, 4, "_noreload"), (8, 8, "_nowait_rel"), (8, 8, "_nomma"), (12, 4, "_nowait_rel"), (12, 4, "_nomma"),
               (8, 8, "_ll_sx"), (8, 8, "_nowait_rel_sx"), (8, 4, "_ll_sx"), (8, 8, "_ll_c4"), (8, 8, "_ll_c8"),
               (8, 8, "_nowait_rel_c8"), (8, 4, "_ll_c8"), (12, 4, "_ll_c8"), (12, 4, "_nowait_rel_c8"), (12, 6, "_ll_c8"),
               (8, 8, "_ll_c8_pf4"), (8, 8, "_ll_c8_pf8"), (8, 8, "_ll_c8_pf16"), (8, 8, "_ll_c8_pf32"),
               (8, 8, "_nowait_rel_c8_pf8"), (12, 4, "_ll_c8_pf8"), (6, 6, "k1_ll_c8"), (6, 3, "k1_ll_c8"),
               (6, 6, "k1_nowait_rel_c8"), (6, 3, "k1_nowait_rel_c8"), (4, 4, "k1_ll_c8")]
        variants += [(f"dfsk8w8_c{ch}", 32 * 9, df_smem(8, 8)) for ch in (8, 2)]
        variants += [(f"df{ns}w{w}{m}{b}", 32 * (w + 1),
                      df_smem(ns, w, 17, 65536) if m.endswith("_sx") else
                      df_smem(ns, w, 13, 0, 1024) if m.startswith("k1") else df_smem(ns, w, 20 if ns == 12 else DF_TILE_SLOTS))
                     for ns, w, m in dfs for b in ("", "_bal")]
        if args.variants:
            variants = [v for v in variants if v[0] in args.variants.split(",")]
        assert len(stages) <= MAX_STAGES
        df = None
        runs = cp.asarray(balanced_runs(np, stages, sms))
        for vname, threads, smem in [] if args.no_persistent else variants:
            fn = probe.get_function(f"probe_chain_{vname.replace('_bal', '')}")
            prepare(fn, smem)
            if vname.startswith("df") and df is None:
                # probe_chain_df's table ({w packed, x, y, K | N << 32, ready, wait, prev_n | xoff << 32, 0}) and
                # its readiness counters (per stage: ceil(N / DF_KC) pieces, then the total).
                assert all(-(-k // DF_KC) <= DF_MAX_CHUNKS for k, _ in stages)  # a tile's chunks' partials
                wpk = [pack_fragments(cp, ws[i], n, k) for i, (k, n) in enumerate(stages)]
                offs = np.cumsum([0] + [-(-n // DF_KC) + 1 for _, n in stages])
                ready = cp.zeros(int(offs[-1]), dtype=cp.uint32)
                t8 = np.zeros((len(stages), 8), dtype=np.uint64)
                for i, (k, n) in enumerate(stages):
                    t8[i, 0], t8[i, 1], t8[i, 2] = wpk[i].data.ptr, xs[i].data.ptr, ys[i].data.ptr
                    t8[i, 3] = np.uint64(k) | (np.uint64(n) << np.uint64(32))
                    t8[i, 4] = ready.data.ptr + 4 * int(offs[i])
                    t8[i, 5] = 0 if i == 0 else ready.data.ptr + 4 * int(offs[i - 1])
                    t8[i, 6] = 0 if i == 0 else stages[i - 1][1]
                # `_ll`: the same table with `ready` / `wait` the stages' LL words (one per output).
                assert all(n % 4 == 0 for _, n in stages)  # probe_chain_df reads LL words 4 at a time
                lofs = np.cumsum([0] + [n for _, n in stages])
                words = cp.zeros(int(lofs[-1]), dtype=cp.uint32)
                t8ll = t8.copy()
                for i in range(len(stages)):
                    t8ll[i, 4] = words.data.ptr + 4 * int(lofs[i])
                    t8ll[i, 5] = 0 if i == 0 else words.data.ptr + 4 * int(lofs[i - 1])
                df = (wpk, ready, cp.asarray(t8), words, cp.asarray(t8ll), {})

            # Each launch zeroes its counters first (a memset node), then runs the chain.
            runs_ptr = np.uint64(runs.data.ptr if vname.endswith("_bal") else 0)
            kcv = 1024 if vname.split("_")[0].endswith("k1") else DF_KC
            ch = 8 if "_c8" in vname else 4 if "_c4" in vname else 2  # chunks of CH-step multiples
            assert all(min(kcv, k - c0) % (16 * ch) == 0 for k, _ in stages for c0 in range(0, k, kcv))
            if not vname.startswith("df"):
                counters, largs = bar, (dtable, np.uint32(len(stages)), bar)
            elif vname.startswith("dfsk"):  # split-K: the LL table with 64-bit words [N][PMAX] and nparts
                if len(df[5].get("sk", ())) == 0:
                    skr, npts = sk_runs(np, stages, sms)
                    wofs = np.cumsum([0] + [n * DFSK_PMAX for _, n in stages])
                    skw = cp.zeros(int(wofs[-1]), dtype=cp.uint64)
                    npd = [cp.asarray(a) for a in npts]
                    tsk = t8.copy()
                    for i in range(len(stages)):
                        tsk[i, 4] = skw.data.ptr + 8 * int(wofs[i])
                        tsk[i, 5] = 0 if i == 0 else skw.data.ptr + 8 * int(wofs[i - 1])
                        tsk[i, 7] = npd[i].data.ptr
                    df[5]["sk"] = (cp.asarray(skr), npts, npd, wofs, skw, cp.asarray(tsk))
                skr_d, npts, _, wofs, skw, tsk_d = df[5]["sk"]
                counters, largs = skw, (tsk_d, np.uint32(len(stages)), np.uint64(skr_d.data.ptr))
            else:
                counters, stab = (df[3], df[4]) if "_ll" in vname else (df[1], df[2])
                if "_sx" in vname:  # the stage table's xoff (u32 at byte 52 of each 64-byte row)
                    ns_, w_ = (int(v) for v in vname[2:].split("_")[0].split("w"))
                    xoff, span = x_ring(np, stages, cp.asnumpy(runs) if vname.endswith("_bal") else
                                        default_runs(np, stages, sms), ns_, w_)
                    if xoff is None:
                        print(f"{name:<14} persistent {vname}: skipped (the x ring cannot hold stages {span} apart)")
                        continue
                    rows = cp.asnumpy(stab).copy()
                    rows.view(np.uint32).reshape(len(stages), 16)[:, 13] = np.array(xoff, dtype=np.uint32)
                    stab = cp.asarray(rows)
                if kcv != DF_KC:  # the weights packed in chunks of kcv columns (made once per shape)
                    if kcv not in df[5]:
                        df[5][kcv] = [pack_fragments(cp, ws[i], n, k, kcv) for i, (k, n) in enumerate(stages)]
                    rows = cp.asnumpy(stab).copy()
                    rows[:, 0] = [int(a.data.ptr) for a in df[5][kcv]]
                    stab = cp.asarray(rows)
                largs = (stab, np.uint32(len(stages)), runs_ptr)

            def launches(fn=fn, smem=smem, threads=threads, counters=counters, args=largs):
                return [lambda: cp.cuda.runtime.memsetAsync(counters.data.ptr, 0, counters.nbytes,
                                                            cp.cuda.get_current_stream().ptr),
                        lambda: fn((sms, 1, 1), (threads, 1, 1), args, shared_mem=smem)]

            sec = graph_time(cp, launches())
            if vname.startswith("dfsk"):  # the stage outputs, from the words: the kernel's sums, rounded
                for i, (k, n) in enumerate(stages):
                    w2 = skw[int(wofs[i]):int(wofs[i + 1])].view(cp.uint32).reshape(n, DFSK_PMAX, 2)
                    npe = cp.asarray(np.repeat(npts[i], 16)[:n])
                    acc = cp.zeros(n, dtype=cp.float32)
                    for p_ in range(DFSK_PMAX):
                        acc = cp.where(npe > p_, acc + cp.ascontiguousarray(w2[:, p_, 0]).view(cp.float32), acc)
                    ys[i][:n] = cp.asarray(kc.BF16.store(cp.asnumpy(acc)))
            fails += report(f"persistent {vname}", sec)
        print(f"{name:<14} {'bytes at measured BW':<22} {nbytes / bandwidth / 1e3:>9.1f} "
              f"{nbytes / bandwidth / 1e3 / L:>9.2f}  ({nbytes / 1e6:.1f} MB per chain, {len(stages)} GEMVs)")
        del ws, ys, xs, df
        cp.get_default_memory_pool().free_all_blocks()
    print("probe:", "FAIL" if fails else "ok")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
