#!/usr/bin/env python3
"""GPU check of kiln's CUDA kernels (kernels/*.cu) against NumPy references, llm.c style.

Run on a machine with an NVIDIA GPU and CuPy (cupy-cuda13x), from anywhere:

    python3 scripts/kernel_check.py                 # every kernel, f32 / f16 / bf16
    python3 scripts/kernel_check.py --only linear,attention_split --seed 7 --bench
    python3 scripts/kernel_check.py --compile-only  # no GPU, no CuPy: NVRTC build, warnings fail
    python3 scripts/kernel_check.py --compile-only --gemv-cubins DIR --gemv-variant r80=KILN_LINEAR_MAXNREG=80
                                                    # no GPU: GEMV tuning variants as DIR/NAME.cubin
    KILN_CHECK_CACHE=DIR python3 scripts/kernel_check.py --compile-only
                                                    # no GPU: the default unit's CUBIN kept in DIR; a GPU
                                                    # run with the same KILN_CHECK_CACHE loads it (and
                                                    # any variant found there) instead of compiling (~100 s)

It compiles the kernels the way kiln does (one translation unit including every *.cu;
-std=c++17; the CUDA include directory from KILN_CUDA_INCLUDE, CUDA_HOME or
/usr/local/cuda/include), launches each with the geometry of src/plan/geometry.rs on fresh
random inputs (never zeros; outputs poisoned with NaN / -1 first), and compares with a float64
NumPy implementation of the semantics written at the top of each kernel file. Sampling is
checked against a port of `sampling::sample_row` (f32, sequential sums, same generator).

Each check passes when every element is within `atol_rel * max|ref| + rtol * |ref|`; the
table gives the max abs error and the normalized error max|out - ref| / max|ref|. Decode
kernels (the GEMV path of linear, attention_split + attention_merge) are also run twice and
must agree bit for bit; the split kernel's workspace is checked slot by slot (inactive splits
must keep their poison bytes). Exits 1 on any failure, printing the first mismatches (at most
10) of each failing check.

--bench times decode-sized launches from CUDA graphs (no host gaps; median of 9 replays), with
several copies of each weight / KV cache rotating so that reads come from HBM, not the L2, and
reports GB/s against kiln's own read-bandwidth probe: the bf16 GEMV at rows 1, 2, 4, 8 on the
Llama shapes and the logits, and split + merge decode attention at context 4096 (1B and 8B
shapes; the planner's split count and one counted in launched blocks; a tuning variant of the
split kernel compiled with -D). It also times causal prefill attention (kiln_attention_prefill,
its -D tuning variants, the one-kernel kiln_attention and torch's SDPA flash backend) at T = 512
and 2048 on the same shapes; with --only attention_prefill, only that part runs.
"""

import argparse
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nvrtc_util import compile_unit, cuda_include  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KERNELS = os.path.join(ROOT, "kernels")


# ---- storage dtypes -------------------------------------------------------------------------


class Storage:
    """A storage dtype: host representation, conversions, unit roundoff."""

    def __init__(self, name, host_dtype, unit):
        self.name, self.host_dtype, self.unit = name, host_dtype, unit

    def store(self, a):
        a = np.asarray(a, dtype=np.float32)
        if self.name == "f32":
            return a.copy()
        if self.name == "f16":
            return a.astype(np.float16)
        bits = a.view(np.uint32).astype(np.uint64)
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16  # round to nearest even
        return rounded.astype(np.uint16)

    def load(self, a):
        """Stored array -> float64."""
        if self.name == "bf16":
            return (a.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        return a.astype(np.float64)

    def round(self, a):
        """float64 -> nearest storage value (via f32, as the kernels round an f32), as float64."""
        return self.load(self.store(np.asarray(a, dtype=np.float64).astype(np.float32)))

    def poison(self, shape):
        """All-ones bytes: NaN in every float storage type."""
        n = int(np.prod(shape)) * np.dtype(self.host_dtype).itemsize
        return np.frombuffer(b"\xff" * n, dtype=self.host_dtype).reshape(shape).copy()


F32 = Storage("f32", np.float32, 2.0 ** -24)
F16 = Storage("f16", np.float16, 2.0 ** -11)
BF16 = Storage("bf16", np.uint16, 2.0 ** -8)
DTYPES = {"f32": F32, "f16": F16, "bf16": BF16}

# ---- geometry: mirrors src/plan/geometry.rs -------------------------------------------------


def cdiv(a, b):
    return (a + b - 1) // b


def attention_splits(rows, heads, max_context, target_blocks=132):
    """About the planner's split choice (src/plan/planner.rs `attention_splits`,
    ATTENTION_SPLIT_TARGET_BLOCKS = 132): rows * heads * splits >= target_blocks, split_len a
    multiple of 64. Returns (splits, split_len)."""
    max_splits = max(1, cdiv(max_context, 64))
    splits = min(max(1, cdiv(target_blocks, rows * heads)), max_splits)
    split_len = cdiv(cdiv(max_context, splits), 64) * 64
    return cdiv(max_context, split_len), split_len


def gemv_threads(blocks, in_features):
    """geometry.rs gemv_grid: 512 threads for a grid of fewer blocks than SMs whose 16-row tile is over
    GEMV_WIDE_MIN_TILE_BYTES (64 KiB), else 256."""
    return 512 if blocks < 132 and 16 * in_features * 2 > 64 * 1024 else 256


def geometry(kernel, **p):
    if kernel in ("gather", "rms_norm", "kv_write"):
        return (p["rows"], 1, 1), (256, 1, 1)
    if kernel == "head_rms_norm":
        return (p["rows"], p["heads"], 1), (128, 1, 1)
    if kernel in ("rope", "rope_kv_write"):
        # geometry.rs rope_heads_per_block: 2 heads per block up to 8 rows, else 8; hpb: another
        # plan's heads per block (the kernel takes any grid). rope_kv_write counts q and kv heads.
        heads = p["heads"] + p.get("kv_heads", 0)
        return (p["rows"], cdiv(heads, p.get("hpb", 2 if p["rows"] <= 8 else 8)), 1), (128, 1, 1)
    if kernel == "qkv_linear":
        blocks = cdiv(p["out_features"], 16)
        return (blocks, 1, 1), (gemv_threads(blocks, p["in_features"]), 1, 1)
    if kernel == "linear":
        if p["rows"] <= 8:
            blocks = cdiv(p["out_features"], 16)
            return (blocks, 1, 1), (gemv_threads(blocks, p["in_features"]), 1, 1)
        return (cdiv(p["out_features"], 64), cdiv(p["rows"], 64), 1), (256, 1, 1)
    if kernel in ("fused_linear", "gated_linear"):
        return geometry("linear", **p)
    if kernel == "attention":
        return (p["rows"], p["heads"], 1), (256, 1, 1)
    if kernel == "attention_prefill":
        return attention_prefill_geometry(p["rows"], p["heads"], p["head_dim"])[:2]
    if kernel == "attention_split":
        chunks = max(1, cdiv(p["heads"] // max(1, p["kv_heads"]), 4))
        return (p["rows"] * p["kv_heads"] * chunks, p["splits"], 1), (256, 1, 1)
    if kernel == "attention_merge":
        return (p["rows"], p["heads"], 1), (256, 1, 1)
    if kernel == "attention_cluster":  # clusters of 8 splits along y (ATTENTION_CLUSTER_SPLITS)
        chunks = cdiv(p["heads"] // max(1, p["kv_heads"]), p["chunk_heads"])
        return (p["rows"] * p["kv_heads"] * chunks, 8, 1), (256, 1, 1)
    if kernel in ("swiglu", "add"):  # ELEMENTWISE_VEC = 8 elements per thread
        return (cdiv(p["n"], 256 * 8), 1, 1), (256, 1, 1)
    if kernel == "sample":  # SAMPLE_BLOCKS_PER_ROW: one cluster of 8 blocks per row
        return (p["rows"] * 8, 1, 1), (1024, 1, 1)
    raise ValueError(kernel)


def attention_prefill_geometry(rows, heads, head_dim, warps=4, bn=64, heads_on_x=True):
    """attention_prefill.cu (KILN_FA_WARPS, KILN_FA_BN, KILN_FA_HEADS_ON_X): grid (heads,
    ceil(rows / BM)), block 32 * warps, dynamic shared (BM + 4 * BN) * head_dim * 2 bytes with
    BM = 16 * warps."""
    bm = 16 * warps
    shared = (bm + 4 * bn) * head_dim * 2 if head_dim in (64, 128) else 0
    tiles = max(1, cdiv(rows, bm))
    return ((heads, tiles, 1) if heads_on_x else (tiles, heads, 1)), (32 * warps, 1, 1), shared


# ---- reporting ------------------------------------------------------------------------------


class Report:
    def __init__(self):
        self.rows = []

    def compare(self, name, dt, out, ref, rtol, atol_rel, note=""):
        out = np.asarray(out, dtype=np.float64).ravel()
        ref = np.asarray(ref, dtype=np.float64).ravel()
        scale = float(np.max(np.abs(ref))) if ref.size else 0.0
        diff = np.abs(out - ref)
        tol = atol_rel * scale + rtol * np.abs(ref)
        bad = ~(diff <= tol)  # NaN counts as bad
        max_abs = float(np.nanmax(diff)) if diff.size and not np.all(np.isnan(diff)) else float("nan")
        if np.any(np.isnan(out)):
            max_abs = float("nan")
        norm = max_abs / scale if scale > 0 else max_abs
        ok = not np.any(bad)
        self.rows.append((name, dt, max_abs, norm, int(np.sum(bad)), out.size, ok, note))
        if not ok:
            idx = np.nonzero(bad)[0]
            print(f"  MISMATCH {name} [{dt}]: {len(idx)} of {out.size} elements out of tolerance")
            for i in idx[:10]:
                print(f"    [{i}] out={out[i]!r} ref={ref[i]!r} diff={diff[i]:.3e} tol={tol[i]:.3e}")
        return ok

    def record(self, name, dt, ok, note, bad=0, total=0):
        self.rows.append((name, dt, float("nan"), float("nan"), bad, total, ok, note))
        return ok

    def table(self):
        lines = [f"{'check':<44} {'dtype':<9} {'max_abs':>10} {'norm_err':>10} {'bad':>12}  result  note"]
        for name, dt, max_abs, norm, bad, total, ok, note in self.rows:
            fa = "-" if math.isnan(max_abs) and ok else f"{max_abs:.3e}"
            fn = "-" if math.isnan(norm) and ok else f"{norm:.3e}"
            lines.append(f"{name:<44} {dt:<9} {fa:>10} {fn:>10} {f'{bad}/{total}':>12}  {'PASS' if ok else 'FAIL':<6}  {note}")
        return "\n".join(lines)

    def failed(self):
        return [r for r in self.rows if not r[6]]


# ---- the checks -----------------------------------------------------------------------------


class Checker:
    def __init__(self, cp, module, rng, report):
        self.cp, self.module, self.rng, self.report = cp, module, rng, report

    def fn(self, symbol):
        return self.module.get_function(symbol)

    def launch(self, symbol, kernel, args, **geo):
        grid, block = geometry(kernel, **geo)
        self.fn(symbol)(grid, block, args)
        self.cp.cuda.Device().synchronize()

    def rand(self, *shape, scale=1.0):
        a = self.rng.standard_normal(shape).astype(np.float32) * np.float32(scale)
        a[a == 0] = np.float32(1e-3)  # never zeros
        return a

    def dev(self, a):
        return self.cp.asarray(a)

    # gather ---------------------------------------------------------------------------------
    def gather(self, dt):
        V, D = 300, 1000
        idx = np.array([5, 0, V - 1, -1, V, 17, 123456], dtype=np.int32)
        R = len(idx)
        table = dt.store(self.rand(V, D))
        ref = np.zeros((R, D))
        for r, i in enumerate(idx):
            if 0 <= i < V:
                ref[r] = dt.load(table[i])
        for entry in ("", "release_"):  # kiln_gather_release_*: the same copy, dependents released first
            out = self.dev(dt.poison((R, D)))
            self.launch(f"kiln_gather_{entry}{dt.name}", "gather",
                        (self.dev(table), self.dev(idx), out, np.uint32(R), np.uint32(D), np.uint32(V)), rows=R)
            self.report.compare(f"gather{' release' if entry else ''} (out-of-range rows zero)", dt.name,
                                dt.load(out.get()), ref, 0.0, 0.0)

    # rms_norm / head_rms_norm ---------------------------------------------------------------
    def rms_ref(self, dt, x, w, eps):
        inv = 1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
        t = dt.round(x * inv)
        return t * w

    def fused_norm_ref(self, dt, x, w, eps):
        """The normed input of a fused linear and the factor of its sums (src/ir/op.rs NormOrder): f16
        normalizes first (RmsNorm's rounding, factor 1); f32 and bf16 round x * w and scale each
        row's sums by its inverse RMS."""
        if dt is F16:
            return dt.round(self.rms_ref(dt, x, w, eps)), np.ones((x.shape[0], 1), dtype=np.float32)
        inv = (1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)).astype(np.float32)
        return dt.round(x * w), inv

    def rms_norm(self, dt):
        # 16-byte register path (dim whole vectors, up to 4 per thread) and the scalar loop.
        for R, D in [(5, 1000), (2, 4096), (3, 1001), (2, 12288)]:
            eps = 1e-6
            x = dt.store(self.rand(R, D, scale=2.0))
            w = dt.store(self.rand(D) * 0.5 + 1.0)
            ref = self.rms_ref(dt, dt.load(x), dt.load(w), eps)
            outs = []
            for entry in ("", "release_"):  # kiln_rms_norm_release_*: the same norm, dependents released first
                out = self.dev(dt.poison((R, D)))
                self.launch(f"kiln_rms_norm_{entry}{dt.name}", "rms_norm",
                            (self.dev(x), self.dev(w), out, np.uint32(R), np.uint32(D), np.float32(eps)), rows=R)
                outs.append(out.get())
                self.report.compare(f"rms_norm{' release' if entry else ''} rows={R} dim={D}", dt.name,
                                    dt.load(outs[-1]), ref, 2.5 * dt.unit + 1e-6, 1e-6)
            self.report.record(f"rms_norm release == rms_norm rows={R} dim={D}", dt.name,
                               bool(np.array_equal(outs[0], outs[1])), "bitwise")

    def add_rms_norm(self, dt):
        """kiln_add_rms_norm: sum = T(a + b) (as kiln_add), out = rms_norm(sum)."""
        for R, D in [(5, 1000), (2, 4096), (3, 1001)]:
            eps = 1e-6
            a = dt.store(self.rand(R, D, scale=2.0))
            b = dt.store(self.rand(R, D, scale=2.0))
            w = dt.store(self.rand(D) * 0.5 + 1.0)
            sm = self.dev(dt.poison((R, D)))
            out = self.dev(dt.poison((R, D)))
            self.launch(f"kiln_add_rms_norm_{dt.name}", "rms_norm",
                        (self.dev(a), self.dev(b), self.dev(w), sm, out, np.uint32(R), np.uint32(D), np.float32(eps)),
                        rows=R)
            ref_sum = dt.load(dt.store((dt.load(a).astype(np.float32) + dt.load(b).astype(np.float32)).astype(np.float32)))
            self.report.compare(f"add_rms_norm sum rows={R} dim={D}", dt.name, dt.load(sm.get()), ref_sum, 0.0, 0.0)
            ref = self.rms_ref(dt, ref_sum, dt.load(w), eps)
            self.report.compare(f"add_rms_norm rows={R} dim={D}", dt.name, dt.load(out.get()), ref,
                                2.5 * dt.unit + 1e-6, 1e-6)

    def head_rms_norm(self, dt):
        R, H, HD = 3, 4, 128
        eps = 1e-6
        x = dt.store(self.rand(R, H * HD, scale=3.0))
        w = dt.store(self.rand(HD) * 0.5 + 1.0)
        out = self.dev(dt.poison((R, H * HD)))
        self.launch(f"kiln_head_rms_norm_{dt.name}", "head_rms_norm",
                    (self.dev(x), self.dev(w), out, np.uint32(R), np.uint32(H), np.uint32(HD), np.float32(eps)),
                    rows=R, heads=H)
        ref = self.rms_ref(dt, dt.load(x).reshape(R, H, HD), dt.load(w), eps).reshape(R, H * HD)
        self.report.compare(f"head_rms_norm rows={R} heads={H} hd={HD}", dt.name, dt.load(out.get()), ref,
                            2.5 * dt.unit + 1e-6, 1e-6)

    # linear ---------------------------------------------------------------------------------
    def linear(self, dt):
        cases = [  # rows, in, out, bias, x misaligned: GEMV (tensor-core / SIMT vector / scalar) and tiled
            (1, 1024, 777, False, False), (3, 1024, 300, True, False), (8, 1000, 257, False, False),
            (5, 4096, 1000, True, False), (4, 2056, 48, False, False), (7, 136, 16, True, False),
            (1, 8, 3, False, False), (6, 1024, 100, True, True),
            (2, 1001, 100, True, False), (9, 1001, 130, True, False), (70, 256, 200, False, False),
        ]
        for outdt in (dt, F32) if dt is not F32 else (F32,):
            for R, K, N, has_bias, misaligned in cases:
                x = dt.store(self.rand(R, K))
                w = dt.store(self.rand(N, K, scale=1.0 / math.sqrt(K)))
                b = dt.store(self.rand(N))
                if misaligned:  # x one element past a 16-byte boundary: the scalar path
                    xd = self.dev(np.concatenate([x.ravel()[:1], x.ravel()]))[1:]
                else:
                    xd = self.dev(x)
                wd = self.dev(w)
                bias_arg = self.dev(b) if has_bias else np.uint64(0)
                outs = []
                for _ in range(2):  # twice: the result must be identical
                    out = self.dev(outdt.poison((R, N)))
                    self.launch(f"kiln_linear_{dt.name}_{outdt.name}", "linear",
                                (xd, wd, bias_arg, out, np.uint32(R), np.uint32(K), np.uint32(N),
                                 np.uint32(int(has_bias))), rows=R, out_features=N, in_features=K)
                    outs.append(out.get())
                ref = dt.load(x) @ dt.load(w).T
                if has_bias:
                    ref = ref + dt.load(b)
                if R > 8:
                    path = "tiled"
                elif dt is F32 or misaligned or K % 8:
                    path = "gemv simt"
                else:
                    path = "gemv mma"
                name = f"linear {path} {R}x{K}->{N}{' +bias' if has_bias else ''}{' x misaligned' if misaligned else ''}"
                self.report.compare(name, f"{dt.name}->{outdt.name}", outdt.load(outs[0]), ref, 1.5 * outdt.unit, 2e-5)
                if R <= 8:
                    same = outs[0].tobytes() == outs[1].tobytes()
                    self.report.record(f"{name}: deterministic", f"{dt.name}->{outdt.name}", same, "two runs, bitwise")

    # bitwise comparisons of GEMV builds --------------------------------------------------------
    def gemv_operands(self, dt, R, K, N, eps):
        """Random device operands of one R x K -> N GEMV shape, (x, norm_w, weight, up weight, bias),
        and the (symbol, args(out)) launches of fused_linear (norm, bias, residual) and gated_linear
        (norm) over them: what norm_pass and dense compare between two builds or variants."""
        x = self.dev(dt.store(self.rand(R, K, scale=2.0)))
        nw = self.dev(dt.store(self.rand(K) * 0.5 + 1.0))
        w = self.dev(dt.store(self.rand(N, K, scale=1.0 / math.sqrt(K))))
        wu = self.dev(dt.store(self.rand(N, K, scale=1.0 / math.sqrt(K))))
        b = self.dev(dt.store(self.rand(N)))
        res = self.dev(dt.store(self.rand(R, N)))
        cases = [
            (f"kiln_fused_linear_{dt.name}_{dt.name}", lambda o: (x, nw, w, b, res, o, np.uint64(0), np.uint32(R),
                                                                  np.uint32(K), np.uint32(N), np.uint32(1),
                                                                  np.float32(eps), np.uint32(1), np.uint32(1),
                                                                  np.uint32(0))),
            (f"kiln_gated_linear_{dt.name}", lambda o: (x, nw, w, wu, o, np.uint32(R), np.uint32(K), np.uint32(N),
                                                        np.uint32(1), np.float32(eps))),
        ]
        return (x, nw, w, wu, b), cases

    # walking GEMV blocks ----------------------------------------------------------------------
    def walk(self, dt):
        """Walking GEMV blocks (linear.cu gemv_mma_walk, src/plan/geometry.rs gemv_walk_blocks): a grid
        of fewer 256-thread blocks than 16-feature tiles, each block walking tiles b, b + grid, ...,
        gives the bytes of one block per tile. The default build walks the default gated_linear
        variant; a build with KILN_GEMV_WALK=15 also the dense gated one, fused_linear and linear.
        Shapes: the Llama-3.2-1B gate/up (512 tiles on 264 blocks), a partial last tile, k with a
        partial chunk (in % 32 != 0) and several tiles per block."""
        if dt is F32:
            return  # f32 takes the SIMT path, which never walks
        if not hasattr(self, "walk_all"):
            self.walk_all, _ = load_module(self.cp, self.report, only=["linear.cu", "linear_fused.cu"],
                                           defines=["KILN_GEMV_WALK=15"])
        eps = 1e-5
        block = (256, 1, 1)
        for R, K, N, grid in ((1, 2048, 8192, 264), (4, 2048, 8200, 264), (8, 2056, 1000, 7), (1, 896, 4864, 132),
                              (2, 4096, 2000, 50)):
            (x, nw, w, wu, b), cases = self.gemv_operands(dt, R, K, N, eps)
            cases = cases + [(f"kiln_linear_{dt.name}_{dt.name}", lambda o: (x, w, b, o, np.uint32(R), np.uint32(K),
                                                                             np.uint32(N), np.uint32(1)))]
            staged = R * K * 2 <= 16384
            for sym, args in cases:
                # The dense variants' tensor-core path (dense_variant_covers): gated only with staged
                # rows, fused_linear's `_o3` with them too; linear always.
                variants = [""] + (["_o3"] if "linear_" in sym and ("gated" not in sym and "fused" not in sym or staged) else [])
                for variant in variants:
                    modules = [(self.walk_all, "KILN_GEMV_WALK=15")]
                    if "gated" in sym and variant == "":
                        modules.append((self.module, "default build"))
                    ref = self.dev(dt.poison((R, N)))
                    self.module.get_function(sym + variant)((cdiv(N, 16), 1, 1), block, args(ref))
                    self.cp.cuda.Device().synchronize()
                    for module, what in modules:
                        o = self.dev(dt.poison((R, N)))
                        module.get_function(sym + variant)((grid, 1, 1), block, args(o))
                        self.cp.cuda.Device().synchronize()
                        self.report.record(f"walk {sym[5:]}{variant} {R}x{K}->{N} on {grid} blocks ({what})", dt.name,
                                           o.get().tobytes() == ref.get().tobytes(), "== one block per tile, bitwise")

    # tile-packed GEMV weights (KILN_GEMV_TILES, src/lower/tiles.rs) ---------------------------
    @staticmethod
    def pack_tiles(w):
        """A [N, K] 16-bit weight (N % 16 == 0, K % 32 == 0) in KILN_GEMV_TILES's layout
        (kernels/common.cuh weight_row + weight_col): element (r, k) of tile r // 16, half (r % 16) // 8, row
        g = r % 8, chunk k // 32, lane quad t = (k % 32) // 8, element e = k % 8 goes to
        tile * 16K + chunk * 512 + half * 256 + (4 g + t) * 8 + e. A NumPy or CuPy array (a C-order
        copy of the same module)."""
        n, k = w.shape
        return w.reshape(n // 16, 2, 8, k // 32, 4, 8).transpose(0, 3, 1, 2, 4, 5).copy().reshape(n, k)

    def tiles(self, dt):
        """KILN_GEMV_TILES=1: each GEMV kernel on tile-packed weights gives the bytes the default build
        gives on the same weights row-major: linear (both output types), fused_linear, gated_linear,
        qkv_linear and qkv_rope, default and dense variants, one block per tile and walking grids (a
        KILN_GEMV_WALK=15 build), the SIMT path (unaligned x) and the tiled path (rows > 8)."""
        if dt is F32:
            return  # only 16-bit weights are packed
        if not hasattr(self, "tiles_mods"):
            self.tiles_mods = [
                (load_module(self.cp, self.report, only=["linear.cu", "linear_fused.cu"],
                             defines=["KILN_GEMV_TILES=1"] + extra)[0], what)
                for extra, what in (([], "tiles"), (["KILN_GEMV_WALK=15"], "tiles, walk 15"))]
        cp, eps, u = self.cp, 1e-5, np.uint32
        d = dt.name

        def run(module, sym, grid, threads, args, outs):
            for o in outs:
                o[...] = cp.asarray(dt.poison(o.shape)) if o.dtype == dt.host_dtype else cp.full(o.shape, np.nan, o.dtype)
            module.get_function(sym)(grid, (threads, 1, 1), args)
            cp.cuda.Device().synchronize()
            return b"".join(o.get().tobytes() for o in outs)

        for R, K, N, unaligned in ((1, 2048, 8192, False), (4, 4096, 1024, False), (8, 896, 4864, False),
                                   (1, 896, 1152, False), (2, 4096, 2048, False), (16, 512, 256, False),
                                   (2, 512, 256, True)):
            xh = dt.store(self.rand(R * K + 8, scale=2.0))
            x = self.dev(xh)[1:1 + R * K] if unaligned else self.dev(xh[:R * K])
            nw = self.dev(dt.store(self.rand(K) * 0.5 + 1.0))
            wh = [dt.store(self.rand(N, K, scale=1.0 / math.sqrt(K))) for _ in range(2)]
            rowm = [self.dev(w) for w in wh]
            tiled = [self.dev(self.pack_tiles(w)) for w in wh]
            b, res = self.dev(dt.store(self.rand(N))), self.dev(dt.store(self.rand(R, N)))
            o = cp.empty((R, N), dtype=dt.host_dtype)
            of = cp.empty((R, N), dtype=np.float32)
            nq, nk = N // 2, N // 4
            parts = [(0, nq), (nq, nq + nk), (nq + nk, N)]
            oq = [cp.empty((R, hi - lo), dtype=dt.host_dtype) for lo, hi in parts]
            staged = R * K * 2 <= 16384
            cases = [  # (symbol, dense variant, args(w, wu, qkv weights), outputs)
                (f"kiln_linear_{d}_{d}", "_o3", lambda w, wu, ws: (x, w, b, o, u(R), u(K), u(N), u(1)), [o]),
                (f"kiln_linear_{d}_f32", "_o3", lambda w, wu, ws: (x, w, b, of, u(R), u(K), u(N), u(1)), [of]),
                (f"kiln_fused_linear_{d}_{d}", "_o3" if staged else "_o3u",
                 lambda w, wu, ws: (x, nw, w, b, res, o, np.uint64(0), u(R), u(K), u(N), u(1), np.float32(eps), u(1), u(1),
                                    u(0)), [o]),
                (f"kiln_gated_linear_{d}", "_o3" if staged else None,
                 lambda w, wu, ws: (x, nw, w, wu, o, u(R), u(K), u(N), u(1), np.float32(eps)), [o]),
                (f"kiln_qkv_linear_{d}", "_o3",
                 lambda w, wu, ws: (x, nw, *ws, np.uint64(0), np.uint64(0), np.uint64(0), *oq, u(R), u(K), u(nq), u(nk),
                                    u(N - nq - nk), u(1), np.float32(eps), u(0)), oq),
            ]
            qkv_rm = [self.dev(np.ascontiguousarray(wh[0][lo:hi])) for lo, hi in parts]
            qkv_t = [self.dev(self.pack_tiles(np.ascontiguousarray(wh[0][lo:hi]))) for lo, hi in parts]
            tiles_n = N // 16
            for sym, dense, args, outs in cases:
                if R > 8:
                    # the tiled path (qkv_linear: SIMT), one geometry
                    geos = [("tiled", (cdiv(N, 64), cdiv(R, 64), 1), 256)] if "qkv" not in sym else [
                        ("simt", (tiles_n, 1, 1), 256)]
                    variants = [""]
                else:
                    geos = [("tile", (tiles_n, 1, 1), 256)] + ([("tile", (tiles_n, 1, 1), 512)] if tiles_n < 132 else [])
                    variants = [""] + ([dense] if dense else [])
                for variant in variants:
                    for what, grid, threads in geos:
                        if variant and threads != 256:
                            continue
                        ref = run(self.module, sym + variant, grid, threads, args(rowm[0], rowm[1], qkv_rm), outs)
                        runs = [(m, mw, grid) for m, mw in self.tiles_mods[:1]]
                        # qkv_linear does not walk (KILN_GEMV_WALK has no bit for it): one block per tile
                        if R <= 8 and threads == 256 and not unaligned and "qkv" not in sym:
                            slots = 132 * (3 if variant else 2)
                            if tiles_n > slots:
                                runs.append((self.tiles_mods[1][0], self.tiles_mods[1][1], (slots, 1, 1)))
                        for m, mw, g in runs:
                            got = run(m, sym + variant, g, threads, args(tiled[0], tiled[1], qkv_t), outs)
                            self.report.record(
                                f"tiles {sym[5:]}{variant} {R}x{K}->{N} {what} {threads}t grid {g[0]}"
                                f"{' x unaligned' if unaligned else ''} ({mw})", d, got == ref,
                                "packed == row-major, bitwise")
        # qkv_rope: one packed q | k | v matrix whose blocks hold rotary pairs (rows 8c + j and
        # head_dim / 2 + 8c + j of a head), so a lane's two rows come from different tiles.
        for name, R, K, H, KVH, HD in (("llama3.2-1b", 1, 2048, 32, 8, 64), ("llama3.1-8b 4 rows", 4, 4096, 32, 8, 128)):
            nq, nkv = H * HD, KVH * HD
            N, KVR = nq + 2 * nkv, 64
            x = self.dev(dt.store(self.rand(R, K, scale=2.0)))
            nw = self.dev(dt.store(self.rand(K) * 0.5 + 1.0))
            wh = dt.store(self.rand(N, K, scale=1.0 / math.sqrt(K)))
            pd = self.dev(np.array([5, 9, 17, 33][:R], dtype=np.int32))
            cd = self.dev(np.array([0, 8, 16, 24][:R], dtype=np.int32))
            kc0, vc0 = dt.store(self.rand(KVR, nkv)), dt.store(self.rand(KVR, nkv))
            rope_args = (u(HD), u(0), np.float32(5e5), u(1), np.float32(8.0), np.float32(1.0), np.float32(4.0), u(8192))
            for variant in ("", "_o3"):
                outs = []
                for m, w in ((self.module, self.dev(wh)), (self.tiles_mods[0][0], self.dev(self.pack_tiles(wh)))):
                    q_out, kc, vc = self.dev(dt.poison((R, nq))), self.dev(kc0), self.dev(vc0)
                    m.get_function(f"kiln_qkv_rope_{d}{variant}")(
                        (N // 16, 1, 1), (256, 1, 1),
                        (x, nw, w, np.uint64(0), pd, cd, q_out, kc, vc, u(R), u(K), u(H), u(KVH), u(HD), u(KVR), u(1),
                         np.float32(eps), u(0), u(1), *rope_args, rope_table(HD, 5e5, 1, 8.0, 1.0, 4.0, 8192)))
                    cp.cuda.Device().synchronize()
                    outs.append(q_out.get().tobytes() + kc.get().tobytes() + vc.get().tobytes())
                self.report.record(f"tiles qkv_rope{variant} {name} {R}x{K}", d, outs[0] == outs[1],
                                   "q_out, k_cache, v_cache: packed == row-major, bitwise")

    # one-pass norm prologue -----------------------------------------------------------------
    def norm_pass(self, dt):
        """The fused GEMVs' one-pass norm prologue (linear_fused.cu FusedNormX, default) gives the bytes
        of the two-pass one (compiled with KILN_FUSED_NORM_ONE_PASS=0): fused_linear and gated_linear,
        default and `_o3` variants, one row (one or two vectors per thread), two rows, and shapes that
        take the two-pass path either way."""
        if dt is not F16:
            return  # f32 takes the SIMT path, bf16 normalizes after the dot product: no prologue
        if not hasattr(self, "two_pass"):
            self.two_pass, _ = load_module(self.cp, self.report, only=["linear.cu", "linear_fused.cu"],
                                           defines=["KILN_FUSED_NORM_ONE_PASS=0"])
        eps = 1e-5
        for R, K, N, threads, variant in ((1, 896, 4864, 256, "_o3"), (1, 896, 1152, 512, ""), (1, 2048, 512, 256, ""),
                                          (1, 4096, 1024, 256, ""), (1, 4096, 1024, 256, "_o3"), (1, 8192, 512, 512, ""),
                                          (2, 2048, 512, 256, ""), (2, 2048, 512, 512, ""),
                                          (2, 4096, 512, 256, ""), (3, 1000, 200, 256, ""), (1, 72, 40, 256, "")):
            grid, block = (cdiv(N, 16), 1, 1), (threads, 1, 1)
            _, cases = self.gemv_operands(dt, R, K, N, eps)
            for sym, args in cases:
                outs = []
                for module in (self.module, self.two_pass):
                    o = self.dev(dt.poison((R, N)))
                    module.get_function(sym + variant)(grid, block, args(o))
                    self.cp.cuda.Device().synchronize()
                    outs.append(o.get())
                self.report.record(f"norm one pass {sym[5:]}{variant} {R}x{K}->{N} ({threads} threads)", dt.name,
                                   outs[0].tobytes() == outs[1].tobytes(), "== two-pass, bitwise")

    # dense variants ---------------------------------------------------------------------------
    def dense(self, dt):
        """The `_o3` variants (three 256-thread blocks per SM, src/plan/geometry.rs `gemv_occupancy`)
        of the linear, fused, gated and qkv kernels give the default variant's bytes at 256 threads
        wherever the planner may launch them (`dense_variant_covers`: gated only with a staged norm,
        rows x K x 2 <= 16384 bytes, fused with a norm: `_o3` staged, `_o3u` not); on rows too wide
        to stage, `_o3` fused and gated take their SIMT path, checked close to the default (a
        different sum order), and `_o3u` gives the default's bytes."""
        eps = 1e-5
        block = (256, 1, 1)
        R, K, N = 8, 2048, 1000  # 32 KiB of rows: not staged
        (x, nw, w, wu, b), fused_cases = self.gemv_operands(dt, R, K, N, eps)
        for sym, args in fused_cases:
            outs = []
            for variant in ("", "_o3"):
                o = self.dev(dt.poison((R, N)))
                self.fn(sym + variant)((cdiv(N, 16), 1, 1), block, args(o))
                self.cp.cuda.Device().synchronize()
                outs.append(dt.load(o.get()))
            self.report.compare(f"dense variant {sym[5:]} {R}x{K}->{N} (unstaged: SIMT path)", dt.name, outs[1],
                                outs[0], 4 * dt.unit, 1e-4 + 8 * dt.unit, "_o3 close to default")
        # `_o3u` (fused_linear with a norm whose rows are not staged): the default's bytes, unstaged
        # (the 8B packed QKV at 4 and 8 rows) and staged alike.
        for R, K, N in ((8, 2048, 1000), (4, 4096, 6144), (1, 896, 4864), (3, 1000, 2200)):
            (x, nw, w, wu, b), fused_cases = self.gemv_operands(dt, R, K, N, eps)
            sym, args = fused_cases[0]
            outs = []
            for variant in ("", "_o3u"):
                o = self.dev(dt.poison((R, N)))
                self.fn(sym + variant)((cdiv(N, 16), 1, 1), block, args(o))
                self.cp.cuda.Device().synchronize()
                outs.append(o.get())
            self.report.record(f"dense variant {sym[5:]}_o3u {R}x{K}->{N}", dt.name,
                               outs[0].tobytes() == outs[1].tobytes(), "_o3u == default, bitwise")
        for R, K, N in ((1, 896, 4864), (8, 1024, 4352), (3, 1000, 2200)):
            grid = (cdiv(N, 16), 1, 1)
            (x, nw, w, wu, b), fused_cases = self.gemv_operands(dt, R, K, N, eps)
            nq, nk = N - 2 * (N // 8), N // 8
            cases = [
                (f"kiln_linear_{dt.name}_{dt.name}", lambda o: (x, w, b, o, np.uint32(R), np.uint32(K), np.uint32(N),
                                                                np.uint32(1))),
                *fused_cases,
            ]
            for sym, args in cases:
                outs = []
                for variant in ("", "_o3"):
                    o = self.dev(dt.poison((R, N)))
                    self.fn(sym + variant)(grid, block, args(o))
                    self.cp.cuda.Device().synchronize()
                    outs.append(o.get())
                self.report.record(f"dense variant {sym[5:]} {R}x{K}->{N}", dt.name, outs[0].tobytes() == outs[1].tobytes(),
                                   "_o3 == default, bitwise")
            outs = []
            for variant in ("", "_o3"):
                o = [self.dev(dt.poison((R, n))) for n in (nq, nk, nk)]
                self.fn(f"kiln_qkv_linear_{dt.name}{variant}")(
                    grid, block, (x, nw, w, w, wu, b, b, b, *o, np.uint32(R), np.uint32(K), np.uint32(nq), np.uint32(nk),
                                  np.uint32(nk), np.uint32(1), np.float32(eps), np.uint32(1)))
                self.cp.cuda.Device().synchronize()
                outs.append(b"".join(t.get().tobytes() for t in o))
            self.report.record(f"dense variant qkv_linear {R}x{K}->{N}", dt.name, outs[0] == outs[1], "_o3 == default, bitwise")

    # the output norm carried by its producer (lower::fuse rewrite 10) -------------------------
    def out_norm(self, dt):
        """kiln_fused_linear_outnorm_bf16_bf16 (ir::OutNorm) against kiln_fused_linear on the same
        inputs: out == bf16(o * norm_w) and sumsq == ir::group_sumsq of o, both bit for bit, with o
        what kiln_fused_linear stores. kiln_linear[_argmax]_stats_bf16_f32[_o3] (Op::NormedLinear)
        against kiln_linear_bf16_f32[_o3] (the same variant): out == f32(plain * inv) bit for bit, inv from sumsq in
        ir::stats_inv's order; the argmax key names the first largest logit; and the logits near
        a float64 reference. bf16 only (the rewrite's dtype)."""
        if dt is not BF16:
            return
        eps = 1e-5
        f32 = np.float32

        def group_sumsq(o):  # o: f32 [R, N] -> f32 [R, N / 8], ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
            q = (o * o).astype(f32).reshape(o.shape[0], -1, 8)
            a = [(q[..., 2 * i] + q[..., 2 * i + 1]).astype(f32) for i in range(4)]
            return (((a[0] + a[1]).astype(f32) + (a[2] + a[3]).astype(f32))).astype(f32)

        def stats_inv(row, k):  # ir::stats_inv: lanes' strided sums, then a butterfly (xor 16 .. 1)
            lanes = np.zeros(32, dtype=f32)
            for l in range(32):  # sequential, as the kernel adds (np.add.reduce may pair them)
                t = f32(0)
                for v in row[l::32]:
                    t = f32(t + f32(v))
                lanes[l] = t
            off = 16
            while off:
                lanes = (lanes + lanes[np.arange(32) ^ off]).astype(f32)
                off //= 2
            return f32(1) / np.sqrt(f32(lanes[0] / f32(k) + f32(eps)))

        # Producer: the Llama-3.2-1B's and Qwen2.5-0.5B's down shapes, batch rows, with and
        # without the residual (two epilogue paths) and one with a norm of its own.
        for R, K, N, has_res, has_norm in ((1, 8192, 2048, True, False), (1, 4864, 896, True, False),
                                           (4, 1024, 256, True, False), (8, 512, 64, False, False),
                                           (2, 1024, 128, False, True)):
            x = self.dev(dt.store(self.rand(R, K, scale=2.0)))
            nw = self.dev(dt.store(self.rand(K) * 0.5 + 1.0))
            w = self.dev(dt.store(self.rand(N, K, scale=1.0 / math.sqrt(K))))
            res = self.dev(dt.store(self.rand(R, N)))
            onw = dt.store(self.rand(N) * 0.5 + 1.0)
            scal = (np.uint32(R), np.uint32(K), np.uint32(N), np.uint32(int(has_norm)), np.float32(eps), np.uint32(0),
                    np.uint32(int(has_res)), np.uint32(0))
            head = (x, nw if has_norm else np.uint64(0), w, np.uint64(0), res if has_res else np.uint64(0))
            plain = self.dev(dt.poison((R, N)))
            self.launch(f"kiln_fused_linear_{dt.name}_{dt.name}", "fused_linear", (*head, plain, np.uint64(0), *scal),
                        rows=R, out_features=N, in_features=K)
            out = self.dev(dt.poison((R, N)))
            sums = self.dev(F32.poison((R, N // 8)))
            self.launch(f"kiln_fused_linear_outnorm_{dt.name}_{dt.name}", "fused_linear",
                        (*head, out, np.uint64(0), self.dev(onw), sums, *scal), rows=R, out_features=N, in_features=K)
            o = dt.load(plain.get()).astype(f32)
            want_out = dt.store((o * dt.load(onw).astype(f32)).astype(f32))
            name = f"out_norm producer {R}x{K}->{N}{' +res' if has_res else ''}{' +norm' if has_norm else ''}"
            self.report.record(f"{name}: out", dt.name, out.get().tobytes() == want_out.tobytes(),
                               "bf16(o * w), o = fused_linear's, bitwise")
            self.report.record(f"{name}: sumsq", dt.name, sums.get().tobytes() == group_sumsq(o).tobytes(),
                               "ir::group_sumsq of o, bitwise")

        # Consumer: the Llama-3.2-1B's logits, Qwen2.5-0.5B-like and batch rows, default and _o3, the
        # sums staged in shared memory (KILN_STATS_ASYNC); the last two read them from global memory
        # instead (125 sums per row: not 16-byte rows; 8 x 512 sums: more than the stage holds).
        for R, K, N in ((1, 2048, 128256), (1, 896, 151936), (2, 896, 1000), (8, 512, 4864), (3, 1000, 700),
                        (8, 4096, 300)):
            x = self.dev(dt.store(self.rand(R, K, scale=2.0)))
            w = self.dev(dt.store(self.rand(N, K, scale=1.0 / math.sqrt(K))))
            sums_h = (np.abs(self.rand(R, K // 8)) * 8.0 + 0.5).astype(f32)
            sums = self.dev(sums_h)
            inv = np.array([stats_inv(sums_h[r], K) for r in range(R)], dtype=f32)
            ref = (dt.load(x.get()) @ dt.load(w.get()).T) * inv[:, None].astype(np.float64)
            for variant, grid_block in (("", None), ("_o3", ((cdiv(N, 16), 1, 1), (256, 1, 1)))):
                # The plain GEMV launched as the stats one is: at 8 x 4096 -> 300 the default launch
                # takes 512 threads (19 blocks of 128 KiB tiles, geometry's wide rule) and `_o3` 256,
                # so K is split over 16 warps or 8, and the sums differ in their last bits.
                plain = self.dev(F32.poison((R, N)))
                pargs = (x, w, np.uint64(0), plain, np.uint32(R), np.uint32(K), np.uint32(N), np.uint32(0))
                if grid_block is None:
                    self.launch(f"kiln_linear_{dt.name}_f32", "linear", pargs, rows=R, out_features=N, in_features=K)
                else:
                    self.fn(f"kiln_linear_{dt.name}_f32{variant}")(*grid_block, pargs)
                    self.cp.cuda.Device().synchronize()
                want = (plain.get().astype(f32) * inv[:, None]).astype(f32)
                for keyed in (False, True):
                    out = self.dev(F32.poison((R, N)))
                    key = self.dev(np.zeros(R, dtype=np.uint64))
                    a = "argmax_" if keyed else ""
                    sym = f"kiln_linear_{a}stats_{dt.name}_f32{variant}"
                    args = (x, sums, w, np.uint64(0), out, *((key,) if keyed else ()), np.uint32(R), np.uint32(K),
                            np.uint32(N), np.uint32(0), np.float32(eps))
                    if grid_block is None:
                        self.launch(sym, "linear", args, rows=R, out_features=N, in_features=K)
                    else:
                        self.fn(sym)(*grid_block, args)
                        self.cp.cuda.Device().synchronize()
                    got = out.get()
                    name = f"out_norm stats linear{variant}{' +argmax' if keyed else ''} {R}x{K}->{N}"
                    self.report.record(f"{name}: == plain * inv", "bf16->f32", got.tobytes() == want.tobytes(),
                                       "bitwise, inv in ir::stats_inv's order")
                    self.report.compare(name, "bf16->f32", got.astype(np.float64), ref, 1.5 * F32.unit, 2e-5)
                    if keyed:
                        keys = key.get()
                        idx = [int((~int(k)) & 0xFFFFFFFF) for k in keys]
                        self.report.record(f"{name}: argmax key", "bf16->f32",
                                           idx == [argmax_ref(got[r]) for r in range(R)], "first largest logit")

    # fused_linear / gated_linear -------------------------------------------------------------
    def fused(self, dt):
        """FusedLinear and GatedLinear against the CPU reference's roundings (src/runtime/cpu.rs)."""
        eps = 1e-5
        cases = [  # rows, in, out, norm, bias, residual
            (1, 2048, 300, True, True, True), (4, 2048, 257, True, False, True), (8, 2048, 64, False, True, False),
            (33, 2048, 130, True, True, True), (1, 72, 40, True, False, False), (4, 72, 33, False, True, True),
            (8, 72, 17, True, True, True), (33, 72, 70, True, False, True),
        ]
        outs_dt = (dt, F32) if dt is not F32 else (F32,)
        for R, K, N, has_norm, has_bias, has_res in cases:
            x = dt.store(self.rand(R, K, scale=2.0))
            nw = dt.store(self.rand(K) * 0.5 + 1.0)
            xf = dt.load(x)
            h, sc = self.fused_norm_ref(dt, xf, dt.load(nw), eps) if has_norm else (xf, 1.0)
            path = "tiled" if R > 8 else ("simt" if dt is F32 or K % 8 else "mma")
            flags = f"{' +norm' if has_norm else ''}{' +bias' if has_bias else ''}{' +res' if has_res else ''}"
            for outdt in outs_dt:
                w = dt.store(self.rand(N, K, scale=1.0 / math.sqrt(K)))
                b = dt.store(self.rand(N))
                res = outdt.store(self.rand(R, N))
                results = []
                # The second run asks the L2 for a planned prefetch span (Kernel::FusedLinear's
                # l2_prefetch: here the weight itself, at most 32 KiB per block, inside it): a hint
                # that must change no bit of the output.
                blocks = -(-N // 16)
                pf_bytes = min(32768, (w.nbytes // blocks) // 16 * 16)
                for run in range(2):
                    out = self.dev(outdt.poison((R, N)))
                    pf = (self.dev(w), np.uint32(pf_bytes)) if run == 1 else (np.uint64(0), np.uint32(0))
                    self.launch(f"kiln_fused_linear_{dt.name}_{outdt.name}", "fused_linear",
                                (self.dev(x), self.dev(nw) if has_norm else np.uint64(0), self.dev(w),
                                 self.dev(b) if has_bias else np.uint64(0), self.dev(res) if has_res else np.uint64(0),
                                 out, pf[0], np.uint32(R), np.uint32(K), np.uint32(N),
                                 np.uint32(int(has_norm)), np.float32(eps), np.uint32(int(has_bias)),
                                 np.uint32(int(has_res)), pf[1]),
                                rows=R, out_features=N, in_features=K)
                    results.append(out.get())
                acc = (h @ dt.load(w).T) * sc
                if has_bias:
                    acc = acc + dt.load(b)
                ref = outdt.round(acc) + outdt.load(res) if has_res else acc
                name = f"fused_linear {path} {R}x{K}->{N}{flags}"
                # h differs from the reference by at most one rounding of dt where the f32 sum of
                # squares rounds differently: a relative tolerance of a few units of dt.
                tol = 1.5 * outdt.unit + (2 * dt.unit if has_norm and dt is not F32 else 0)
                self.report.compare(name, f"{dt.name}->{outdt.name}", outdt.load(results[0]), ref, tol,
                                    2e-5 + (4 * dt.unit if has_norm and dt is not F32 else 0))
                self.report.record(f"{name}: deterministic", f"{dt.name}->{outdt.name}",
                                   results[0].tobytes() == results[1].tobytes(),
                                   "two runs (the second with an L2 prefetch span), bitwise")
        for R, K, N, has_norm, _, _ in cases:
            x = dt.store(self.rand(R, K, scale=2.0))
            nw = dt.store(self.rand(K) * 0.5 + 1.0)
            xf = dt.load(x)
            h, sc = self.fused_norm_ref(dt, xf, dt.load(nw), eps) if has_norm else (xf, 1.0)
            gw = dt.store(self.rand(N, K, scale=1.0 / math.sqrt(K)))
            uw = dt.store(self.rand(N, K, scale=1.0 / math.sqrt(K)))
            results = []
            for _ in range(2):
                out = self.dev(dt.poison((R, N)))
                self.launch(f"kiln_gated_linear_{dt.name}", "gated_linear",
                            (self.dev(x), self.dev(nw) if has_norm else np.uint64(0), self.dev(gw), self.dev(uw), out,
                             np.uint32(R), np.uint32(K), np.uint32(N), np.uint32(int(has_norm)), np.float32(eps)),
                            rows=R, out_features=N, in_features=K)
                results.append(out.get())
            g = dt.round((h @ dt.load(gw).T) * sc)
            u = dt.round((h @ dt.load(uw).T) * sc)
            ref = g / (1.0 + np.exp(-g)) * u
            path = "tiled" if R > 8 else ("simt" if dt is F32 or K % 8 else "mma")
            name = f"gated_linear {path} {R}x{K}->{N}{' +norm' if has_norm else ''}"
            tol = 3.5 * dt.unit + (2 * dt.unit if has_norm and dt is not F32 else 0) + 1e-6
            self.report.compare(name, dt.name, dt.load(results[0]), ref, tol,
                                2e-5 + (4 * dt.unit if has_norm and dt is not F32 else 0))
            self.report.record(f"{name}: deterministic", dt.name, results[0].tobytes() == results[1].tobytes(),
                               "two runs, bitwise")
        if dt is BF16:
            self.fused_timing()

    def entries(self, dt):
        """The decode entry points against the kernels they stand for, bitwise (src/runtime/cuda/abi.rs
        `launch_symbol`): kiln_fused_linear_res_* against kiln_fused_linear_* (no norm, a residual) at
        512 and 256 threads; kiln_fused_linear_res_k2_* (two 256-thread blocks per tile, in clusters of
        two) against kiln_fused_linear_res_* at 512; kiln_gated_linear_gemv_* against kiln_gated_linear_*."""
        if dt is F32:
            return
        cp = self.cp
        for R, K, N in [(1, 4864, 896), (4, 1000, 70), (8, 264, 33), (2, 8192, 300), (1, 896, 4864)]:
            x, w = dt.store(self.rand(R, K, scale=2.0)), dt.store(self.rand(N, K, scale=1.0 / math.sqrt(K)))
            b, res = dt.store(self.rand(N)), dt.store(self.rand(R, N))
            tiles = -(-N // 16)

            def run(symbol, blocks, threads, bias):
                out = self.dev(dt.poison((R, N)))
                self.fn(symbol)((blocks,), (threads,),
                                (self.dev(x), np.uint64(0), self.dev(w), self.dev(b) if bias else np.uint64(0),
                                 self.dev(res), out, np.uint64(0), np.uint32(R), np.uint32(K), np.uint32(N),
                                 np.uint32(0), np.float32(0.0), np.uint32(int(bias)), np.uint32(1), np.uint32(0)))
                cp.cuda.Device().synchronize()
                return out.get().tobytes()

            for bias in (False, True):
                shape = f"{R}x{K}->{N}{' +bias' if bias else ''} +res"
                for threads in (512, 256):
                    general = run(f"kiln_fused_linear_{dt.name}_{dt.name}", tiles, threads, bias)
                    mine = run(f"kiln_fused_linear_res_{dt.name}_{dt.name}", tiles, threads, bias)
                    self.report.record(f"fused_linear_res {shape} at {threads} threads == fused_linear", dt.name,
                                       general == mine, "bitwise")
                wide = run(f"kiln_fused_linear_res_{dt.name}_{dt.name}", tiles, 512, bias)
                k2 = run(f"kiln_fused_linear_res_k2_{dt.name}_{dt.name}", 2 * tiles, 256, bias)
                self.report.record(f"fused_linear_res_k2 {shape} == fused_linear_res at 512 threads", dt.name,
                                   wide == k2, "bitwise")
        eps = 1e-5
        for R, K, N, has_norm in [(1, 896, 4864, True), (4, 2048, 257, True), (8, 2048, 64, False), (1, 72, 40, True)]:
            x, nw = dt.store(self.rand(R, K, scale=2.0)), dt.store(self.rand(K) * 0.5 + 1.0)
            gw, uw = (dt.store(self.rand(N, K, scale=1.0 / math.sqrt(K))) for _ in range(2))
            outs = []
            for symbol in (f"kiln_gated_linear_{dt.name}", f"kiln_gated_linear_gemv_{dt.name}"):
                out = self.dev(dt.poison((R, N)))
                self.launch(symbol, "gated_linear",
                            (self.dev(x), self.dev(nw) if has_norm else np.uint64(0), self.dev(gw), self.dev(uw), out,
                             np.uint32(R), np.uint32(K), np.uint32(N), np.uint32(int(has_norm)), np.float32(eps)),
                            rows=R, out_features=N, in_features=K)
                outs.append(out.get().tobytes())
            self.report.record(f"gated_linear_gemv {R}x{K}->{N}{' +norm' if has_norm else ''} == gated_linear", dt.name,
                               outs[0] == outs[1], "bitwise")

    def fused_timing(self):
        """One timing line: rows=1 gated 2048 -> 8192 bf16 with norm (gate + up streamed once)."""
        cp = self.cp
        K, N = 2048, 8192
        nbytes = 2 * N * K * 2
        sets = 3
        wall = self.random_bf16(sets * 2 * N * K)
        ws = [(wall[(2 * i) * N * K:(2 * i + 1) * N * K], wall[(2 * i + 1) * N * K:(2 * i + 2) * N * K])
              for i in range(sets)]
        x = self.random_bf16(K)
        nw = self.random_bf16(K)
        out = cp.zeros(N, dtype=cp.uint16)
        f = self.fn("kiln_gated_linear_bf16")
        grid, block = geometry("gated_linear", rows=1, out_features=N, in_features=K)
        launches = [(lambda p=ws[i % sets]: f(grid, block, (x, nw, p[0], p[1], out, np.uint32(1), np.uint32(K),
                                                             np.uint32(N), np.uint32(1), np.float32(1e-6))))
                    for i in range(60)]
        sec, how = self.graph_time(launches)
        line = (f"TIMING gated_linear bf16 rows=1 {K}->{N} +norm: {sec * 1e6:.1f} us, "
                f"{nbytes / sec / 1e9:.0f} GB/s ({how})")
        print(line)
        self.report.record("gated_linear timing rows=1 2048->8192", "bf16", True,
                           f"{sec * 1e6:.1f} us, {nbytes / sec / 1e9:.0f} GB/s")
        del wall, ws
        cp.get_default_memory_pool().free_all_blocks()

    # rope -----------------------------------------------------------------------------------
    @staticmethod
    def inv_freq(i, rot, theta, kind, factor, low, high, orig):
        f = np.float32
        e = f(2 * i) / f(rot)
        base = f(1.0) / f(float(theta) ** float(e))
        if kind != 1:
            return base
        old = f(orig)
        low_wl, high_wl = old / f(low), old / f(high)
        wavelen = f(2.0) * f(np.pi) / base
        if wavelen < high_wl:
            return base
        if wavelen > low_wl:
            return base / f(factor)
        smooth = (old / wavelen - f(low)) / (f(high) - f(low))
        return (f(1.0) - smooth) * base / f(factor) + smooth * base

    def rope(self, dt):
        configs = [  # name, interleaved, theta, head_dim, rotary_dim, kind, factor, low, high, orig
            ("halfsplit", 0, 1e6, 64, 64, 0, 1.0, 0.0, 0.0, 0),
            ("interleaved partial linear", 1, 1e4, 64, 32, 2, 4.0, 0.0, 0.0, 0),
            ("halfsplit llama3", 0, 5e5, 128, 128, 1, 32.0, 1.0, 4.0, 8192),
        ]
        positions = np.array([0, 5, -1, 3000], dtype=np.int32)
        R, H = len(positions), 3
        for name, inter, theta, HD, rot, kind, factor, low, high, orig in configs:
            x = dt.store(self.rand(R, H * HD))
            ref = self.rope_ref(dt.load(x).reshape(R, H, HD), positions, inter, theta, rot, kind, factor, low, high,
                                orig)
            # The inverse frequencies from the host (RopeFreqs, as the runtime passes them) and from
            # the kernel (n = 0): each within the tolerance, and the same bits.
            outs = []
            for host in (True, False):
                out = self.dev(dt.poison((R, H * HD)))
                self.launch(f"kiln_rope_{dt.name}", "rope",
                            (self.dev(x), self.dev(positions), out, np.uint32(R), np.uint32(H), np.uint32(HD),
                             np.uint32(rot), np.uint32(inter), np.float32(theta), np.uint32(kind), np.float32(factor),
                             np.float32(low), np.float32(high), np.uint32(orig),
                             rope_table(rot, theta, kind, factor, low, high, orig, host)), rows=R, heads=H)
                outs.append(out.get())
                table = "host table" if host else "kernel's"
                self.report.compare(f"rope {name} {table}", dt.name, dt.load(outs[-1]), ref.reshape(R, H * HD),
                                    1.5 * dt.unit + 1e-6, 2e-6)
            self.report.record(f"rope {name}: host table == kernel's", dt.name, outs[0].tobytes() == outs[1].tobytes(),
                               "bitwise")

    def rope_ref(self, xs, positions, inter, theta, rot, kind, factor, low, high, orig):
        """Op::Rope on xs [rows, heads, head_dim] in f64 from f32 angles (padding rows copied)."""
        ref = xs.copy()
        inv = [self.inv_freq(i, rot, theta, kind, factor, low, high, orig) for i in range(rot // 2)]
        for r, p in enumerate(positions):
            if p < 0:
                continue
            pos = np.float32(p) / np.float32(factor) if kind == 2 else np.float32(p)
            for i in range(rot // 2):
                ang = float(np.float32(pos * inv[i]))
                c, s = math.cos(ang), math.sin(ang)
                ia, ib = (2 * i, 2 * i + 1) if inter else (i, i + rot // 2)
                a, b = xs[r, :, ia], xs[r, :, ib]
                ref[r, :, ia] = a * c - b * s
                ref[r, :, ib] = a * s + b * c
        return ref

    def rope_kv_write(self, dt):
        """Op::RopeKvWrite: rope(q) -> q_out; rope(k) rounded to dt and v -> cache rows."""
        positions = np.array([0, 5, -1, 3000, 7], dtype=np.int32)
        base = np.array([0, 8, 0, 0, 60], dtype=np.int32)  # the last targets row 67: skipped
        R, H, KVH, HD, KVR = len(positions), 4, 2, 64, 64
        for name, inter, theta, rot, kind, factor, low, high, orig in [
                ("halfsplit", 0, 1e6, 64, 0, 1.0, 0.0, 0.0, 0), ("interleaved llama3", 1, 5e5, 64, 1, 32.0, 1.0, 4.0, 8192)]:
            for layout, hpb in (("split", None), ("packed", None), ("packed", 8), ("split", 4)):
                name_l = f"{name} {layout}" + (f" {hpb} heads per block" if hpb else "")
                geo = {"hpb": hpb} if hpb else {}
                q, k, v = dt.store(self.rand(R, H * HD)), dt.store(self.rand(R, KVH * HD)), dt.store(self.rand(R, KVH * HD))
                kc0, vc0 = dt.store(self.rand(KVR, KVH * HD)), dt.store(self.rand(KVR, KVH * HD))
                if layout == "split":  # three tensors
                    qkv_args, strides = (self.dev(q), self.dev(k), self.dev(v)), (H * HD, KVH * HD)
                else:  # one packed [R, (H + 2 KVH) * HD] tensor: q, k, v are column ranges
                    packed = self.dev(np.ascontiguousarray(np.concatenate([q, k, v], axis=1)))
                    es = packed.itemsize
                    qkv_args = tuple(np.uint64(packed.data.ptr + off * es) for off in (0, H * HD, (H + KVH) * HD))
                    strides = ((H + 2 * KVH) * HD,) * 2
                # The kernel's own inverse frequencies (n = 0) first, then the host's table (as the
                # runtime passes it), which must give the same bits; the host's run is compared below.
                got = []
                for host in (False, True):
                    qo, kc, vc = self.dev(dt.poison((R, H * HD))), self.dev(kc0), self.dev(vc0)
                    self.launch(f"kiln_rope_kv_write_{dt.name}", "rope_kv_write",
                                (*qkv_args, self.dev(positions), self.dev(base), qo, kc, vc,
                                 np.uint32(R), np.uint32(H), np.uint32(KVH), np.uint32(HD), np.uint32(KVR),
                                 np.uint32(strides[0]), np.uint32(strides[1]), np.uint32(rot),
                                 np.uint32(inter), np.float32(theta), np.uint32(kind), np.float32(factor),
                                 np.float32(low), np.float32(high), np.uint32(orig),
                                 rope_table(rot, theta, kind, factor, low, high, orig, host)),
                                rows=R, heads=H, kv_heads=KVH, **geo)
                    got.append(b"".join(a.get().tobytes() for a in (qo, kc, vc)))
                self.report.record(f"rope_kv_write {name_l}: host table == kernel's", dt.name, got[0] == got[1],
                                   "q_out, k_cache, v_cache bitwise")
                spec = (inter, theta, rot, kind, factor, low, high, orig)
                rq = self.rope_ref(dt.load(q).reshape(R, H, HD), positions, *spec).reshape(R, H * HD)
                rkr = dt.round(self.rope_ref(dt.load(k).reshape(R, KVH, HD), positions, *spec).reshape(R, KVH * HD))
                rk, rv = dt.load(kc0), dt.load(vc0)
                for t in range(R):
                    row = base[t] + positions[t]
                    if positions[t] >= 0 and 0 <= row < KVR:
                        rk[row], rv[row] = rkr[t], dt.load(v[t])
                tol = 1.5 * dt.unit + 1e-6
                self.report.compare(f"rope_kv_write {name_l} q", dt.name, dt.load(qo.get()), rq, tol, 2e-6)
                self.report.compare(f"rope_kv_write {name_l} k_cache (padding, out of range)", dt.name,
                                    dt.load(kc.get()), rk, tol + dt.unit, 2e-6)
                self.report.compare(f"rope_kv_write {name_l} v_cache", dt.name, dt.load(vc.get()), rv, 0.0, 0.0)

    def qkv(self, dt):
        """Op::QkvLinear: three FusedLinears (no residual) over one normed x."""
        eps = 1e-5
        cases = [  # rows, in, (nq, nk, nv), norm, bias
            (1, 2048, (256, 64, 64), True, False), (4, 896, (896, 128, 128), True, True),
            (8, 72, (24, 12, 12), True, True), (3, 70, (20, 10, 10), False, True), (12, 256, (64, 32, 32), True, False),
        ]
        for R, K, ns, has_norm, has_bias in cases:
            x = dt.store(self.rand(R, K, scale=2.0))
            nw = dt.store(self.rand(K) * 0.5 + 1.0)
            xf = dt.load(x)
            h, sc = self.fused_norm_ref(dt, xf, dt.load(nw), eps) if has_norm else (xf, 1.0)
            ws = [dt.store(self.rand(n, K, scale=1.0 / math.sqrt(K))) for n in ns]
            bs = [dt.store(self.rand(n)) for n in ns]
            outs = [self.dev(dt.poison((R, n))) for n in ns]
            self.launch(f"kiln_qkv_linear_{dt.name}", "qkv_linear",
                        (self.dev(x), self.dev(nw) if has_norm else np.uint64(0), *[self.dev(w) for w in ws],
                         *[self.dev(b) if has_bias else np.uint64(0) for b in bs], *outs, np.uint32(R), np.uint32(K),
                         *[np.uint32(n) for n in ns], np.uint32(int(has_norm)), np.float32(eps),
                         np.uint32(int(has_bias))), rows=R, out_features=sum(ns), in_features=K)
            path = "simt" if R > 8 or dt is F32 or K % 8 else "mma"
            for i, part in enumerate("qkv"):
                acc = (h @ dt.load(ws[i]).T) * sc + (dt.load(bs[i]) if has_bias else 0.0)
                tol = 1.5 * dt.unit + (2 * dt.unit if has_norm and dt is not F32 else 0)
                self.report.compare(f"qkv_linear {path} {R}x{K}->{ns} {part}", dt.name, dt.load(outs[i].get()), acc, tol,
                                    2e-5 + (4 * dt.unit if has_norm and dt is not F32 else 0))

    def qkv_rope(self, dt):
        """Op::QkvRope: bitwise the launches it replaces in a decode plan (fused_linear over the packed
        weights, then rope_kv_write of the packed qkv), at 512 and 256 threads, with the positions
        read after the wait and before it (`early`); padding rows (p < 0) and rows outside the cache
        write no KV."""
        eps = 1e-5
        cases = [  # name, rows, in, heads, kv_heads, head_dim, norm, bias, (interleaved, theta, kind, factor, low, high, orig)
            ("qwen2.5 hd64 bias", 1, 896, 14, 2, 64, True, True, (0, 1e6, 0, 1.0, 0.0, 0.0, 0)),
            ("llama3 hd128 scaling", 4, 2048, 32, 8, 128, True, False, (0, 5e5, 1, 32.0, 1.0, 4.0, 8192)),
            ("llama3.1-8b 1 row", 1, 4096, 32, 8, 128, True, False, (0, 5e5, 1, 8.0, 1.0, 4.0, 8192)),
            ("llama3.1-8b 8 rows (norm not staged)", 8, 4096, 32, 8, 128, True, False, (0, 5e5, 1, 8.0, 1.0, 4.0, 8192)),
            ("interleaved hd32 8 rows", 8, 256, 4, 2, 32, True, True, (1, 1e4, 0, 1.0, 0.0, 0.0, 0)),
            ("no norm, linear scaling", 3, 512, 8, 8, 16, False, True, (0, 1e4, 2, 4.0, 0.0, 0.0, 0)),
            ("odd in (SIMT path)", 2, 100, 4, 2, 16, True, False, (0, 1e4, 0, 1.0, 0.0, 0.0, 0)),
        ]
        KVR = 64
        for name, R, K, H, KVH, HD, has_norm, has_bias, rope in cases:
            inter, theta, kind, factor, low, high, orig = rope
            pos = np.array(([5, -1, 3000, 7, 0, 12, 63, 9])[:R], dtype=np.int32)
            base = np.array(([0, 0, 0, 60, 8, 1, 0, 40])[:R], dtype=np.int32)  # row 67 is outside: skipped
            nq, nk = H * HD, KVH * HD
            N = nq + 2 * nk
            x = self.dev(dt.store(self.rand(R, K, scale=2.0)))
            nw = self.dev(dt.store(self.rand(K) * 0.5 + 1.0))
            wd = self.dev(dt.store(self.rand(N, K, scale=1.0 / math.sqrt(K))))
            bd = self.dev(dt.store(self.rand(N)))
            es = wd.itemsize
            pd, cd = self.dev(pos), self.dev(base)
            kc0, vc0 = dt.store(self.rand(KVR, nk)), dt.store(self.rand(KVR, nk))
            rope_args = (np.uint32(HD), np.uint32(inter), np.float32(theta), np.uint32(kind), np.float32(factor),
                         np.float32(low), np.float32(high), np.uint32(orig))
            blocks = N // 16
            for threads in sorted({512 if blocks < 132 else 256, 256}):
                # The unfused launches, at the same block size (the GEMV's k split follows the warps).
                qkv = self.dev(dt.poison((R, N)))
                self.fn(f"kiln_fused_linear_{dt.name}_{dt.name}")(
                    (blocks, 1, 1), (threads, 1, 1),
                    (x, nw if has_norm else np.uint64(0), wd, bd if has_bias else np.uint64(0), np.uint64(0), qkv,
                     np.uint64(0), np.uint32(R), np.uint32(K), np.uint32(N), np.uint32(int(has_norm)),
                     np.float32(eps), np.uint32(int(has_bias)), np.uint32(0), np.uint32(0)))
                ref_q, ref_k, ref_v = self.dev(dt.poison((R, nq))), self.dev(kc0), self.dev(vc0)
                p0 = qkv.data.ptr
                self.launch(f"kiln_rope_kv_write_{dt.name}", "rope_kv_write",
                            (np.uint64(p0), np.uint64(p0 + nq * es), np.uint64(p0 + (nq + nk) * es), pd, cd, ref_q,
                             ref_k, ref_v, np.uint32(R), np.uint32(H), np.uint32(KVH), np.uint32(HD), np.uint32(KVR),
                             np.uint32(N), np.uint32(N), *rope_args,
                             rope_table(HD, theta, kind, factor, low, high, orig, False)), rows=R, heads=H, kv_heads=KVH)
                ref = (ref_q.get().tobytes(), ref_k.get().tobytes(), ref_v.get().tobytes())
                # At 256 threads also the dense variant (`_o3`: three blocks per SM, 80 registers;
                # the same sums as the default's 8-warp paths).
                # The inverse frequencies from the host (RopeFreqs, as the runtime passes them) and
                # from the kernel (n = 0): both must give rope_kv_write's bits.
                for early, variant, host in [(e, v, h) for v in ("", "_o3") if v == "" or threads == 256 for e in (0, 1)
                                             for h in (True, False)]:
                    q_out, kc, vc = self.dev(dt.poison((R, nq))), self.dev(kc0), self.dev(vc0)
                    self.fn(f"kiln_qkv_rope_{dt.name}{variant}")(
                        (blocks, 1, 1), (threads, 1, 1),
                        (x, nw if has_norm else np.uint64(0), wd, bd if has_bias else np.uint64(0), pd, cd, q_out, kc,
                         vc, np.uint32(R), np.uint32(K), np.uint32(H), np.uint32(KVH), np.uint32(HD), np.uint32(KVR),
                         np.uint32(int(has_norm)), np.float32(eps), np.uint32(int(has_bias)), np.uint32(early),
                         *rope_args, rope_table(HD, theta, kind, factor, low, high, orig, host)))
                    self.cp.cuda.Device().synchronize()
                    got = (q_out.get().tobytes(), kc.get().tobytes(), vc.get().tobytes())
                    table = "host table" if host else "kernel's"
                    self.report.record(f"qkv_rope{variant} {name} {R}x{K} {threads}t early={early} {table}", dt.name,
                                       got == ref, "q_out, k_cache, v_cache == fused_linear + rope_kv_write, bitwise")

    # qkv_attention --------------------------------------------------------------------------
    def qkv_attention(self, dt):
        """Op::QkvAttention (bf16, one row, head_dim 64; sm_90+): kiln_qkv_attention against the two
        launches it replaces, kiln_qkv_rope (256 threads) then kiln_attention_cluster_g1, on the same
        inputs and caches: the attention output and K/V row p within rounding (the fused kernel sums
        each q/k/v dot product in its own order, so a projection may round to the neighbouring bf16
        value), every other cache row untouched, early == late bitwise; a padding row (p < 0) writes
        zeros and no KV row, a row past the cache no KV row."""
        if dt.name != "bf16" or int(self.cp.cuda.Device().compute_capability) < 90:
            return
        eps, KVR, HD = 1e-6, 2048, 64
        cases = [  # name, in, heads, kv_heads, norm, bias, (theta, kind, factor, low, high, orig), [(p, base)]
            ("qwen2.5-0.5b", 896, 14, 2, True, True, (1e6, 0, 1.0, 0.0, 0.0, 0),
             [(0, 0), (37, 0), (383, 0), (1000, 512), (-1, 0), (100, KVR - 50)]),
            ("no norm no bias llama3", 256, 4, 2, False, False, (5e5, 1, 8.0, 1.0, 4.0, 64), [(5, 0), (200, 7)]),
            ("in 1024 one kv head", 1024, 8, 1, True, True, (1e4, 0, 1.0, 0.0, 0.0, 0), [(63, 0), (1500, 100)]),
        ]
        for name, K, H, KVH, has_norm, has_bias, (theta, kind, factor, low, high, orig), steps in cases:
            nq, nk = H * HD, KVH * HD
            N = nq + 2 * nk
            x = self.dev(dt.store(self.rand(1, K, scale=2.0)))
            nw = self.dev(dt.store(self.rand(K) * 0.5 + 1.0))
            wd = self.dev(dt.store(self.rand(N, K, scale=1.0 / math.sqrt(K))))
            bd = self.dev(dt.store(self.rand(N)))
            kc0, vc0 = dt.store(self.rand(KVR, nk)), dt.store(self.rand(KVR, nk))
            rope_args = (np.uint32(HD), np.uint32(0), np.float32(theta), np.uint32(kind), np.float32(factor),
                         np.float32(low), np.float32(high), np.uint32(orig))
            table = rope_table(HD, theta, kind, factor, low, high, orig, True)
            scale = np.float32(1.0 / math.sqrt(HD))
            SL = cdiv(cdiv(KVR, 8), 16) * 16
            MSL = min(32, SL)
            for p, base in steps:
                pd, cd = self.dev(np.array([p], dtype=np.int32)), self.dev(np.array([base], dtype=np.int32))
                # The two launches it replaces.
                q = self.dev(dt.poison((1, nq)))
                rk, rv = self.dev(kc0), self.dev(vc0)
                self.fn(f"kiln_qkv_rope_{dt.name}")(
                    (N // 16, 1, 1), (256, 1, 1),
                    (x, nw if has_norm else np.uint64(0), wd, bd if has_bias else np.uint64(0), pd, cd, q, rk, rv,
                     np.uint32(1), np.uint32(K), np.uint32(H), np.uint32(KVH), np.uint32(HD), np.uint32(KVR),
                     np.uint32(int(has_norm)), np.float32(eps), np.uint32(int(has_bias)), np.uint32(1), *rope_args, table))
                ref = self.dev(dt.poison((1, nq)))
                self.launch(f"kiln_attention_cluster_g1_{dt.name}", "attention_cluster",
                            (q, rk, rv, pd, cd, ref, np.uint32(1), np.uint32(H), np.uint32(KVH), np.uint32(HD), scale,
                             np.uint32(KVR), np.uint32(SL), np.uint32(MSL), np.uint32(1), np.uint32(1)),
                            rows=1, heads=H, kv_heads=KVH, chunk_heads=1)
                got = []
                for early in (0, 1):
                    out, fk, fv = self.dev(dt.poison((1, nq))), self.dev(kc0), self.dev(vc0)
                    self.fn(f"kiln_qkv_attention_{dt.name}")(
                        (H, 8, 1), (256, 1, 1),
                        (x, nw if has_norm else np.uint64(0), wd, bd if has_bias else np.uint64(0), pd, cd, fk, fv, out,
                         np.uint32(K), np.uint32(H), np.uint32(KVH), np.uint32(HD), np.uint32(KVR),
                         np.uint32(int(has_norm)), np.float32(eps), np.uint32(int(has_bias)), np.uint32(early), scale,
                         np.uint32(SL), np.uint32(MSL), *rope_args, table))
                    self.cp.cuda.Device().synchronize()
                    got.append((out.get(), fk.get(), fv.get()))
                (out, fk, fv), (out2, fk2, fv2) = got
                tag = f"qkv_attention {name} p={p} base={base}"
                self.report.record(f"{tag}: early == late", dt.name,
                                   out.tobytes() == out2.tobytes() and fk.tobytes() == fk2.tobytes() and fv.tobytes() == fv2.tobytes(),
                                   "out and caches, bitwise")
                self.report.compare(f"{tag}: out", dt.name, dt.load(out), dt.load(ref.get()), 0.0, 2e-2,
                                    "vs qkv_rope + attention_cluster_g1")
                row = base + p if p >= 0 and base + p < KVR else None
                others = [r for r in range(KVR) if r != row]
                rk_h, rv_h = rk.get(), rv.get()
                self.report.record(f"{tag}: other cache rows untouched", dt.name,
                                   np.array_equal(fk[others], kc0[others]) and np.array_equal(fv[others], vc0[others])
                                   and np.array_equal(rk_h[others], kc0[others]), "bitwise; no row past the cache")
                if row is not None:
                    self.report.compare(f"{tag}: K/V row p", dt.name, dt.load(np.concatenate([fk[row], fv[row]])),
                                        dt.load(np.concatenate([rk_h[row], rv_h[row]])), 2 * dt.unit, 1e-2,
                                        "vs qkv_rope")
                if p < 0:
                    self.report.record(f"{tag}: padding row", dt.name, not np.any(dt.load(out)), "zeros")

    # kv_write -------------------------------------------------------------------------------
    def kv_write(self, dt):
        KVD, KVR = 256, 64
        positions = np.array([3, -1, 0, 10, 10], dtype=np.int32)
        base = np.array([0, 0, 16, 32, 60], dtype=np.int32)  # the last targets row 70: skipped
        R = len(positions)
        k, v = dt.store(self.rand(R, KVD)), dt.store(self.rand(R, KVD))
        kc0, vc0 = dt.store(self.rand(KVR, KVD)), dt.store(self.rand(KVR, KVD))
        kc, vc = self.dev(kc0), self.dev(vc0)
        self.launch(f"kiln_kv_write_{dt.name}", "kv_write",
                    (self.dev(k), self.dev(v), self.dev(positions), self.dev(base), kc, vc, np.uint32(R),
                     np.uint32(KVD), np.uint32(KVR)), rows=R)
        rk, rv = dt.load(kc0), dt.load(vc0)
        for t in range(R):
            row = base[t] + positions[t]
            if positions[t] >= 0 and 0 <= row < KVR:
                rk[row], rv[row] = dt.load(k[t]), dt.load(v[t])
        ok = self.report.compare("kv_write k_cache (padding, out of range)", dt.name, dt.load(kc.get()), rk, 0.0, 0.0)
        self.report.compare("kv_write v_cache", dt.name, dt.load(vc.get()), rv, 0.0, 0.0)
        return ok

    # attention ------------------------------------------------------------------------------
    def attention(self, dt):
        cases = [  # name, heads, kv_heads, head_dim, kv_rows, positions, cache_base
            ("prefill-like gqa4 hd128", 8, 2, 128, 256, [0, 7, -1, 100, 200], [0, 0, 0, 32, 40]),
            ("decode long ctx hd64", 4, 4, 64, 4096, [2047, 4000], [0, 0]),
            ("odd head_dim 80 gqa2", 6, 3, 80, 64, [10, 63, 5], [0, 0, 50]),
        ]
        for name, H, KVH, HD, KVR, pos, cb in cases:
            pos, cb = np.array(pos, dtype=np.int32), np.array(cb, dtype=np.int32)
            R = len(pos)
            scale = 1.0 / math.sqrt(HD)
            q = dt.store(self.rand(R, H * HD, scale=2.0))
            kc = dt.store(self.rand(KVR, KVH * HD))
            vc = dt.store(self.rand(KVR, KVH * HD))
            out = self.dev(dt.poison((R, H * HD)))
            self.launch(f"kiln_attention_{dt.name}", "attention",
                        (self.dev(q), self.dev(kc), self.dev(vc), self.dev(pos), self.dev(cb), out, np.uint32(R),
                         np.uint32(H), np.uint32(KVH), np.uint32(HD), np.float32(scale), np.uint32(KVR)),
                        rows=R, heads=H)
            qf = dt.load(q).reshape(R, H, HD)
            kf = dt.load(kc).reshape(KVR, KVH, HD)
            vf = dt.load(vc).reshape(KVR, KVH, HD)
            ref = np.zeros((R, H, HD))
            for t in range(R):
                if pos[t] < 0:
                    continue
                rows = slice(cb[t], cb[t] + pos[t] + 1)
                for h in range(H):
                    g = h // (H // KVH)
                    s = np.float64(np.float32(scale)) * (kf[rows, g] @ qf[t, h])
                    e = np.exp(s - s.max())
                    ref[t, h] = (e @ vf[rows, g]) / e.sum()
            self.report.compare(f"attention {name}", dt.name, dt.load(out.get()), ref.reshape(R, H * HD),
                                1.5 * dt.unit + 1e-5, 2e-5)

    # attention_prefill ----------------------------------------------------------------------
    @staticmethod
    def attention_ref(qf, kf, vf, pos, cb, KVR):
        """float64 Op::Attention: qf [R, H, HD], kf / vf [KVR, KVH, HD] -> [R, H, HD]."""
        R, H, HD = qf.shape
        KVH = kf.shape[1]
        scale = np.float64(np.float32(1.0 / math.sqrt(HD)))
        ref = np.zeros((R, H, HD))
        for t in range(R):
            p, b = int(pos[t]), int(cb[t])
            n = min(p + 1, KVR - b)
            if p < 0 or b < 0 or n <= 0:
                continue
            k, v = kf[b:b + n], vf[b:b + n]  # [n, KVH, HD]
            qg = qf[t].reshape(KVH, H // KVH, HD)
            s = scale * np.einsum("kgd,nkd->kgn", qg, k)
            e = np.exp(s - s.max(axis=-1, keepdims=True))
            ref[t] = (np.einsum("kgn,nkd->kgd", e, v) / e.sum(axis=-1)[..., None]).reshape(H, HD)
        return ref

    def launch_prefill(self, dt, q, kc, vc, pos, cb, out, R, H, KVH, HD, KVR, fn=None, warps=4, bn=64):
        grid, block, shared = attention_prefill_geometry(R, H, HD, warps, bn)
        f = fn or self.fn(f"kiln_attention_prefill_{dt.name}")
        f.max_dynamic_shared_size_bytes = max(shared, 1)
        f(grid, block, (q, kc, vc, pos, cb, out, np.uint32(R), np.uint32(H), np.uint32(KVH), np.uint32(HD),
                        np.float32(1.0 / math.sqrt(HD)), np.uint32(KVR)), shared_mem=shared)

    def attention_prefill(self, dt):
        """The flash-attention prefill kernel against float64 (P is rounded to T before P.V, so
        the tolerance is a few units of T relative to max|ref|), padding rows exactly zero, rows
        past `rows` unwritten, and a row's bytes independent of the row count and of its tile."""
        if dt.name == "f32":
            return
        cp = self.cp
        KVR = 1400

        def prompt(n, p0, base):  # one sequence's chunk: positions p0..p0+n-1 at cache_base base
            return list(range(p0, p0 + n)), [base] * n

        def mixed():
            pos, cb = prompt(20, 0, 0)  # sequence A from the start
            p2, c2 = prompt(20, 100, 500)  # sequence B, a later chunk
            pos, cb = pos + p2, cb + c2
            pos += [-1, 7, 0, 999, 300, 3, 250, 2000, 5, 40, 1, 62, 63, 64, 65, 9, 10, 200, 33, 1, 0, 128, 127, 64]
            cb += [77, 900, 1399, 0, 1100, -5, 1300, 1000, 16, 16, 16, 600, 600, 600, 600, 1390, 1395, 50, 0, 0, 64, 700, 700, 700]
            return pos, cb  # 64 rows: two prompts, decode-like rows, clamped, negative base, padding

        scenarios = [
            ("1 row", *prompt(1, 0, 0)),
            ("17 rows base 0", *prompt(17, 0, 0)),
            ("64 rows base 0", *prompt(64, 0, 0)),
            ("300 rows 2nd chunk p0 200 base 1000", *prompt(300, 200, 1000 - 200)),
            ("70 rows + 10 padding", [*range(5, 75), *[-1] * 10], [300] * 70 + [0, 5, -1, 1399, 2000, 0, 0, 7, 9, 1]),
            ("mixed bases in one tile", *mixed()),
        ]
        shapes = [(64, 8, 8), (64, 8, 2), (64, 16, 2), (128, 8, 8), (128, 8, 2), (128, 16, 2)]  # hd, heads, kv_heads
        for HD, H, KVH in shapes:
            kc = dt.store(self.rand(KVR, KVH * HD))
            vc = dt.store(self.rand(KVR, KVH * HD))
            kf, vf = dt.load(kc).reshape(KVR, KVH, HD), dt.load(vc).reshape(KVR, KVH, HD)
            kd, vd = self.dev(kc), self.dev(vc)
            for name, pos, cb in scenarios:
                pos, cb = np.array(pos, dtype=np.int32), np.array(cb, dtype=np.int32)
                R = len(pos)
                q = dt.store(self.rand(R, H * HD, scale=2.0))
                extra = 64  # poisoned rows past `rows`: must stay unwritten
                out = self.dev(dt.poison((R + extra, H * HD)))
                self.launch_prefill(dt, self.dev(q), kd, vd, self.dev(pos), self.dev(cb), out, R, H, KVH, HD, KVR)
                cp.cuda.Device().synchronize()
                got = out.get()
                ref = self.attention_ref(dt.load(q).reshape(R, H, HD), kf, vf, pos, cb, KVR)
                label = f"attention_prefill hd{HD} {H}/{KVH} {name}"
                self.report.compare(label, dt.name, dt.load(got[:R]), ref.reshape(R, H * HD),
                                    2 * dt.unit, 4 * dt.unit)
                zero_rows = [t for t in range(R) if not (pos[t] >= 0 and cb[t] >= 0 and cb[t] < KVR)]
                zeros_ok = all(not np.any(got[t].view(np.uint16)) for t in zero_rows)
                tail_ok = bytes(got[R:].tobytes()) == bytes(dt.poison((extra, H * HD)).tobytes())
                if not (zeros_ok and tail_ok):
                    self.report.record(label + ": zero rows / tail", dt.name, False,
                                       f"zero rows exact {zeros_ok}, rows past `rows` untouched {tail_ok}")
            # Bit identity: n real rows in buffers of several row counts (padding p = -1), and with
            # another sequence's rows in the same tile.
            for n, buckets in ((50, (50, 64, 2048)), (300, (300, 512, 2048))):
                p0, base = 37, 600
                q = dt.store(self.rand(2048, H * HD, scale=2.0))
                qd = self.dev(q)
                results = []
                for B in buckets:
                    pos = np.full(B, -1, dtype=np.int32)
                    cb = np.zeros(B, dtype=np.int32)
                    pos[:n], cb[:n] = np.arange(p0, p0 + n), base
                    cb[n:] = np.arange(B - n) % 7  # padding rows' bases must not matter
                    out = self.dev(dt.poison((B, H * HD)))
                    self.launch_prefill(dt, qd, kd, vd, self.dev(pos), self.dev(cb), out, B, H, KVH, HD, KVR)
                    results.append((f"rows {B}", out.get()[:n].tobytes()))
                # Shared tile: the rest of the last tile holds another sequence's rows, or rows of
                # the same sequence far later (the tile then visits KV blocks past every real row).
                B = cdiv(n, 64) * 64 + 64
                for what, other_base in (("another base", 10), ("later rows of the same base", base)):
                    pos = np.full(B, -1, dtype=np.int32)
                    cb = np.zeros(B, dtype=np.int32)
                    pos[:n], cb[:n] = np.arange(p0, p0 + n), base
                    pos[n:], cb[n:] = np.arange(B - n) + 500, other_base
                    out = self.dev(dt.poison((B, H * HD)))
                    self.launch_prefill(dt, qd, kd, vd, self.dev(pos), self.dev(cb), out, B, H, KVH, HD, KVR)
                    results.append((f"tile shared with {what} ({B} rows)", out.get()[:n].tobytes()))
                same = [lbl for lbl, r in results[1:] if r == results[0][1]]
                differ = [lbl for lbl, r in results[1:] if r != results[0][1]]
                self.report.record(f"attention_prefill hd{HD} {H}/{KVH} bit identity n={n}", dt.name, not differ,
                                   f"vs rows {n}: identical {', '.join(same) or '-'}"
                                   + (f"; DIFFERENT {', '.join(differ)}" if differ else ""),
                                   bad=len(differ), total=len(results) - 1)

    def bench_attention_prefill(self, variants=()):
        """Causal prefill attention (one sequence, positions 0..T-1, base 0; bf16) on the Llama
        shapes: kiln_attention_prefill (and tuning variants), the one-kernel kiln_attention, and
        torch's SDPA flash backend. FLOPs = 4 * head_dim * heads * T (T + 1) / 2 (Q K^T and P V,
        2 per multiply-add, over the T (T + 1) / 2 causal (query, key) pairs)."""
        cp = self.cp
        lines = [f"{'prefill attention (bf16, causal)':<52} {'T':>5} {'ms':>9} {'TFLOP/s':>8} {'vs torch':>9}"]
        try:
            import torch
            import torch.nn.functional as F
        except Exception as e:  # noqa: BLE001 - torch is optional
            torch = None
            lines.append(f"(torch unavailable: {e})")
        for shape, H, KVH, HD in (("Llama-3.1-8B 32/8 hd128", 32, 8, 128), ("Llama-3.2-1B 32/8 hd64", 32, 8, 64)):
            for T in (512, 2048):
                flops = 4.0 * HD * H * T * (T + 1) / 2
                q = self.random_bf16(T * H * HD)
                kc = self.random_bf16(T * KVH * HD)
                vc = self.random_bf16(T * KVH * HD)
                pos = cp.arange(T, dtype=cp.int32)
                cb = cp.zeros(T, dtype=cp.int32)
                out = cp.zeros(T * H * HD, dtype=cp.uint16)
                torch_ms = None
                if torch is not None:
                    try:
                        from torch.nn.attention import SDPBackend, sdpa_kernel

                        tq = torch.randn(1, H, T, HD, device="cuda", dtype=torch.bfloat16)
                        tk = torch.randn(1, KVH, T, HD, device="cuda", dtype=torch.bfloat16).repeat_interleave(H // KVH, 1)
                        tv = torch.randn(1, KVH, T, HD, device="cuda", dtype=torch.bfloat16).repeat_interleave(H // KVH, 1)
                        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                            for _ in range(3):
                                F.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
                            torch.cuda.synchronize()
                            times = []
                            for _ in range(9):
                                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                                e0.record()
                                for _ in range(10):
                                    F.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
                                e1.record()
                                e1.synchronize()
                                times.append(e0.elapsed_time(e1) / 10)
                        torch_ms = sorted(times)[len(times) // 2]
                        lines.append(f"{shape + ' torch SDPA flash':<52} {T:>5} {torch_ms:>9.3f} "
                                     f"{flops / torch_ms / 1e9:>8.1f} {1.0:>9.2f}")
                    except Exception as e:  # noqa: BLE001
                        lines.append(f"{shape} torch SDPA flash: failed ({e})")
                for vname, module, warps, bn, heads_on_x in (("", self.module, 4, 64, True), *variants):
                    f = module.get_function("kiln_attention_prefill_bf16")
                    grid, block, shared = attention_prefill_geometry(T, H, HD, warps, bn, heads_on_x)
                    f.max_dynamic_shared_size_bytes = shared
                    args = (q, kc, vc, pos, cb, out, np.uint32(T), np.uint32(H), np.uint32(KVH), np.uint32(HD),
                            np.float32(1.0 / math.sqrt(HD)), np.uint32(T))
                    sec, how = self.graph_time([lambda f=f, grid=grid, block=block, shared=shared, args=args:
                                                f(grid, block, args, shared_mem=shared)] * 10)
                    ms = sec * 1e3
                    vs = f"{ms / torch_ms:>9.2f}" if torch_ms else f"{'-':>9}"
                    label = f"{shape} kiln_attention_prefill{' ' + vname if vname else ''}"
                    lines.append(f"{label:<52} {T:>5} {ms:>9.3f} {flops / sec / 1e12:>8.1f} {vs}"
                                 + ("" if how == "graph" else f"  ({how})"))
                fa = self.fn("kiln_attention_bf16")
                args = (q, kc, vc, pos, cb, out, np.uint32(T), np.uint32(H), np.uint32(KVH), np.uint32(HD),
                        np.float32(1.0 / math.sqrt(HD)), np.uint32(T))
                sec, _ = self.graph_time([lambda: fa((T, H, 1), (256, 1, 1), args)] * 2, reps=3)
                ms = sec * 1e3
                vs = f"{ms / torch_ms:>9.2f}" if torch_ms else f"{'-':>9}"
                lines.append(f"{shape + ' kiln_attention (one-kernel)':<52} {T:>5} {ms:>9.3f} {flops / sec / 1e12:>8.1f} {vs}")
                if torch is not None:
                    tq = tk = tv = None
                    torch.cuda.empty_cache()
        return lines

    # attention_split / attention_merge ------------------------------------------------------
    @staticmethod
    def live_split_len(p, splits, split_len, min_split_len):
        """src/plan/mod.rs live_split_len: the keys spread over the splits, rounded up to 16,
        clamped to [min_split_len, split_len]."""
        even = cdiv(cdiv(max(p, 0) + 1, max(splits, 1)), 16) * 16
        return max(min(max(even, min_split_len), split_len), 1)

    @staticmethod
    def split_attention_ref(qf, kf, vf, pos, cb, H, KVH, HD, KVR, scale, splits, planned_len, min_split_len):
        """float64 reference of the split kernel's workspace slots (None: inactive) and of the
        merged output, with the kernel's clamping of cache rows to [0, kv_rows)."""
        R = len(pos)
        group = H // KVH
        slots = {}
        out = np.zeros((R, H, HD))
        sc32 = np.float64(np.float32(scale))
        for t in range(R):
            p, base = int(pos[t]), int(cb[t])
            if p < 0:
                continue
            n = p + 1 if base >= 0 else 0
            n = min(n, KVR - base) if base >= 0 else 0
            split_len = Checker.live_split_len(p, splits, planned_len, min_split_len)
            n_active = min(p // split_len + 1, splits)
            for h in range(H):
                g = h // group
                if n > 0:
                    s_all = sc32 * (kf[base:base + n, g] @ qf[t, h])
                    e = np.exp(s_all - s_all.max())
                    out[t, h] = (e @ vf[base:base + n, g]) / e.sum()
                for sp in range(n_active):
                    lo, hi = sp * split_len, min((sp + 1) * split_len, n)
                    if hi <= lo:
                        slots[(t, h, sp)] = (np.zeros(HD), -np.inf, 0.0)
                        continue
                    sc = sc32 * (kf[base + lo:base + hi, g] @ qf[t, h])
                    m = sc.max()
                    e = np.exp(sc - m)
                    slots[(t, h, sp)] = (e @ vf[base + lo:base + hi, g], m, e.sum())
        return slots, out

    def attention_split(self, dt):
        cases = [  # name, heads, kv_heads, head_dim, splits, split_len, positions, cache_base, kv_rows[, min_split_len]
            ("live splits gqa7 hd64 (Qwen2.5, 34 x 128, min 32)", 14, 2, 64, 34, 128, [129, 5, 300, 4351, 31, 32],
             [0, 4352, 0, 4352, 0, 0], 8704, 32),
            ("live splits gqa4 hd128 (8 x 512, min 16)", 32, 8, 128, 8, 512, [0, 15, 16, 100, 4095], [0, 0, 0, 0, 0],
             4096, 16),
            ("gqa4 hd64 split boundaries", 8, 2, 64, 4, 64, [0, 63, 64, 65, 127, 128, 255, -1], [0, 0, 256, 0, 512, 0, 768, 0], 1024),
            ("gqa1 hd128", 4, 4, 128, 3, 128, [0, 127, 128, 383, -1, 1], [0, 384, 0, 384, 0, 0], 768),
            ("gqa7 hd64 (Qwen2.5)", 14, 2, 64, 5, 64, [319, 64, 63, 0], [0, 320, 640, 0], 960),
            ("gqa16 2 head chunks hd80", 16, 1, 80, 3, 64, [100, 191, 5], [0, 192, 0], 384),
            ("gqa3 hd36 scalar loads", 6, 2, 36, 2, 64, [70, 10, 127], [0, 128, 128], 256),
            ("gqa2 hd256", 4, 2, 256, 2, 64, [127, 30], [0, 128], 256),
            ("gqa2 hd16", 4, 2, 16, 2, 64, [100, 0], [0, 128], 256),
            ("cache end clamps (rows past kv_rows)", 8, 2, 64, 4, 64, [150, 200], [50, 100], 256),
            ("decode long ctx hd128 gqa4", 32, 8, 128, 8, 512, [4095, 2000, 511, 512], [0, 4096, 8192, 12288], 16384),
        ]
        for name, H, KVH, HD, S, SL, pos, cb, KVR, *msl in cases:
            MSL = msl[0] if msl else SL  # min_split_len = split_len: fixed splits
            pos, cb = np.array(pos, dtype=np.int32), np.array(cb, dtype=np.int32)
            R = len(pos)
            scale = 1.0 / math.sqrt(HD)
            q = dt.store(self.rand(R, H * HD, scale=2.0))
            kc = dt.store(self.rand(KVR, KVH * HD))
            vc = dt.store(self.rand(KVR, KVH * HD))
            qd, kd, vd, pd, cd = (self.dev(a) for a in (q, kc, vc, pos, cb))
            slot = HD + 2
            results = []
            for early in (0, 1):  # twice: the positions read after / before the wait, bitwise identical
                ws = self.dev(F32.poison((R, H, S, slot)))
                out = self.dev(dt.poison((R, H * HD)))
                self.launch(f"kiln_attention_split_{dt.name}", "attention_split",
                            (qd, kd, vd, pd, cd, ws, np.uint32(R), np.uint32(H), np.uint32(KVH), np.uint32(HD),
                             np.float32(scale), np.uint32(KVR), np.uint32(S), np.uint32(SL), np.uint32(MSL),
                             np.uint32(early)),
                            rows=R, heads=H, kv_heads=KVH, splits=S)
                self.launch(f"kiln_attention_merge_{dt.name}", "attention_merge",
                            (ws, pd, out, np.uint32(R), np.uint32(H), np.uint32(HD), np.uint32(S), np.uint32(SL),
                             np.uint32(MSL), np.uint32(early)),
                            rows=R, heads=H)
                results.append((ws.get(), out.get()))
            (wsg, outg), (wsg2, outg2) = results
            slots, ref = self.split_attention_ref(dt.load(q).reshape(R, H, HD), dt.load(kc).reshape(KVR, KVH, HD),
                                                  dt.load(vc).reshape(KVR, KVH, HD), pos, cb, H, KVH, HD, KVR,
                                                  scale, S, SL, MSL)
            # Workspace: active slots against the reference, inactive ones untouched (poison bytes).
            acc_got, acc_ref, ml_got, ml_ref = [], [], [], []
            untouched = True
            for t in range(R):
                for h in range(H):
                    for sp in range(S):
                        got = wsg[t, h, sp].astype(np.float64)
                        if (t, h, sp) not in slots:
                            untouched &= wsg[t, h, sp].view(np.uint32).tolist() == [0xFFFFFFFF] * slot
                            continue
                        a, m, l = slots[(t, h, sp)]
                        acc_got.append(got[:HD]), acc_ref.append(a)
                        if m == -np.inf:  # an empty split: exactly (0, -inf, 0)
                            ok_empty = got[HD] == -np.inf and got[HD + 1] == 0.0 and not np.any(got[:HD])
                            untouched &= bool(ok_empty)
                            continue
                        ml_got.append((got[HD], got[HD + 1])), ml_ref.append((m, l))
            if acc_got:
                self.report.compare(f"attention_split {name}: workspace acc", dt.name, np.concatenate(acc_got),
                                    np.concatenate(acc_ref), 1e-5, 1e-5)
                self.report.compare(f"attention_split {name}: workspace m, l", dt.name, np.array(ml_got),
                                    np.array(ml_ref), 1e-5, 1e-6)
            self.report.record(f"attention_split {name}: inactive slots unwritten", dt.name, untouched,
                               "poison bytes kept; empty splits (0, -inf, 0)")
            self.report.compare(f"attention_merge {name}", dt.name, dt.load(outg), ref.reshape(R, H * HD),
                                1.5 * dt.unit + 1e-5, 2e-5)
            # The same attention in one launch (Kernel::AttentionCluster, sm_90+): 8 splits long
            # enough for the longest position, merged through a cluster's shared memory.
            if int(self.cp.cuda.Device().compute_capability) >= 90:
                SLc = max(16, cdiv(cdiv(int(pos.max()) + 1, 8), 16) * 16)
                for G in (1, 2, 4):
                    outs = []
                    for early in (0, 1):
                        out_c = self.dev(dt.poison((R, H * HD)))
                        self.launch(f"kiln_attention_cluster_g{G}_{dt.name}", "attention_cluster",
                                    (qd, kd, vd, pd, cd, out_c, np.uint32(R), np.uint32(H), np.uint32(KVH),
                                     np.uint32(HD), np.float32(scale), np.uint32(KVR), np.uint32(SLc),
                                     np.uint32(min(MSL, SLc)), np.uint32(G), np.uint32(early)),
                                    rows=R, heads=H, kv_heads=KVH, chunk_heads=G)
                        outs.append(out_c.get())
                    self.report.compare(f"attention_cluster {name} chunk {G} (8 x {SLc})", dt.name, dt.load(outs[0]),
                                        ref.reshape(R, H * HD), 1.5 * dt.unit + 1e-5, 2e-5)
                    self.report.record(f"attention_cluster {name} chunk {G}: early == late", dt.name,
                                       bool(np.array_equal(outs[0].view(np.uint8), outs[1].view(np.uint8))), "bitwise")
            same = wsg.tobytes() == wsg2.tobytes() and outg.tobytes() == outg2.tobytes()
            self.report.record(f"attention_split+merge {name}: deterministic", dt.name, same,
                               "two runs (early 0 and 1), bitwise")

    # elementwise ----------------------------------------------------------------------------
    def swiglu(self, dt):
        n = 10000
        g, u = dt.store(self.rand(n, scale=4.0)), dt.store(self.rand(n, scale=2.0))
        out = self.dev(dt.poison((n,)))
        self.launch(f"kiln_swiglu_{dt.name}", "swiglu", (self.dev(g), self.dev(u), out, np.uint32(n)), n=n)
        gf, uf = dt.load(g), dt.load(u)
        self.report.compare(f"swiglu n={n}", dt.name, dt.load(out.get()), gf / (1.0 + np.exp(-gf)) * uf,
                            1.5 * dt.unit + 1e-6, 1e-6)

    def add(self, dt):
        n = 10001
        a, b = dt.store(self.rand(n)), dt.store(self.rand(n))
        out = self.dev(dt.poison((n,)))
        self.launch(f"kiln_add_{dt.name}", "add", (self.dev(a), self.dev(b), out, np.uint32(n)), n=n)
        self.report.compare(f"add n={n}", dt.name, dt.load(out.get()), dt.load(a) + dt.load(b), 1.01 * dt.unit, 0.0)

    # sample ---------------------------------------------------------------------------------
    def sample(self):
        rows = []  # (label, logits f32 [V], temperature, top_k, top_p, seed, counter)
        V = 151936
        seeds = range(8)
        for label, t, k, p in [
            ("greedy", 0.0, 0, 1.0), ("T<0 greedy", -1.0, 40, 0.9), ("T=inf greedy", float("inf"), 0, 1.0),
            ("exact: T0.7 k40 p0.9", 0.7, 40, 0.9), ("exact: T1 k50", 1.0, 50, 0.0),
            ("exact: T1 k4096 p0.5", 1.0, 4096, 0.5),
            ("large: T1 p0.95", 1.0, 0, 0.95), ("large: T1 pure", 1.0, 0, 1.0), ("large: T0.8 k5000", 0.8, 5000, 1.0),
        ]:
            for s in seeds:
                rows.append((label, self.rand(V, scale=3.0), t, k, p, 1000 + s, 17 * s))
        for s in seeds:  # flat: the top_p prefix is far beyond the exact path's capacity
            rows.append(("large flat: T1 p0.9", self.rand(V, scale=0.05), 1.0, 0, 0.9, 2000 + s, s))
        tie = self.rand(V, scale=3.0)
        tie[100] = tie[5000] = np.float32(50.0)
        rows.append(("greedy tie -> lowest index", tie, 0.0, 0, 1.0, 0, 0))
        nan = self.rand(V, scale=3.0)
        nan[0], nan[7], nan[9000] = np.nan, np.nan, np.nan
        rows.append(("greedy with NaNs", nan, 0.0, 0, 1.0, 0, 0))
        self._sample_batch("vocab=151936", rows)

        small = []
        for s in seeds:  # vocab <= capacity: every setting takes the exact path
            for t, k, p in [(1.0, 0, 1.0), (0.5, 0, 0.8), (1.5, 10, 0.9)]:
                small.append((f"T{t} k{k} p{p}", self.rand(1000, scale=2.0), t, k, p, 3000 + s, s))
        self._sample_batch("vocab=1000", small)

    def _sample_batch(self, what, rows):
        cp = self.cp
        R, V = len(rows), len(rows[0][1])
        logits = np.stack([r[1] for r in rows]).astype(np.float32)
        temp = np.array([r[2] for r in rows], dtype=np.float32)
        topk = np.array([r[3] for r in rows], dtype=np.int32)
        topp = np.array([r[4] for r in rows], dtype=np.float32)
        seed = np.array([r[5] for r in rows], dtype=np.uint32)
        counter = np.array([r[6] for r in rows], dtype=np.uint32)
        args = [self.dev(a) for a in (logits, temp, topk, topp, seed, counter)]
        outs = []
        for _ in range(2):  # twice: the result must be deterministic
            out = self.dev(np.full(R, -1, dtype=np.int32))
            self.launch("kiln_sample_f32", "sample", (*args, out, np.uint32(R), np.uint32(V)), rows=R)
            outs.append(out.get())
        got = outs[0]
        self.report.record(f"sample {what}: deterministic", "f32", bool(np.array_equal(outs[0], outs[1])), "two runs")
        by_label = {}
        for i, row in enumerate(rows):
            label = row[0]
            ref = sample_row_ref(*row[1:])
            exact = got[i] == ref
            near = not exact and 0 <= got[i] < V and within_rounding(*row[1:], int(got[i]))
            e = by_label.setdefault(label, [0, 0, 0, []])
            e[0 if exact else (1 if near else 2)] += 1
            if not exact:
                e[3].append(f"row {i}: got {got[i]} ref {ref}")
        for label, (n_exact, n_near, n_far, notes) in by_label.items():
            # The large path sums in 40-bit fixed point, the CPU sequentially in f32: where those
            # roundings straddle a boundary they pick neighbouring candidates. Elsewhere (the
            # exact path, greedy) the token must be identical.
            large = label.startswith("large")
            ok = n_far == 0 and (large or n_near == 0)
            total = n_exact + n_near + n_far
            note = f"{n_exact}/{total} identical to f32 sample_row, {n_near} within f32 rounding of the exact sums"
            if not ok:
                print(f"  MISMATCH sample {label}: " + "; ".join(notes[:10]))
            self.report.record(f"sample {what} {label}", "f32", ok, note, bad=n_far + (0 if large else n_near),
                               total=total)

    # benchmarks -----------------------------------------------------------------------------
    def graph_time(self, launches, reps=9):
        """Seconds per launch sequence: `launches` (zero-argument callables) captured once into a
        CUDA graph (no host launch gaps), replayed `reps` times after a warm-up; the median
        replay over len(launches). Falls back to plain launches where capture is unavailable."""
        cp = self.cp
        stream = cp.cuda.Stream(non_blocking=True)
        with stream:
            for f in launches:  # warm-up, and proof that every launch runs
                f()
            stream.synchronize()
            try:
                stream.begin_capture()
                for f in launches:
                    f()
                graph = stream.end_capture()
                run, how = (lambda: graph.launch(stream)), "graph"
            except Exception as e:  # noqa: BLE001 - any capture failure: time plain launches
                print(f"  (graph capture unavailable: {e}; timing plain launches)")
                run, how = (lambda: [f() for f in launches]), "launches"
            run()
            stream.synchronize()
            times = []
            for _ in range(reps):
                e0, e1 = cp.cuda.Event(), cp.cuda.Event()
                e0.record(stream)
                run()
                e1.record(stream)
                e1.synchronize()
                times.append(cp.cuda.get_elapsed_time(e0, e1) * 1e-3)
        times.sort()
        return times[len(times) // 2] / len(launches), how

    def random_bf16(self, n):
        """n random bf16 values (standard normal, scaled) generated on the device."""
        cp = self.cp
        a = cp.random.standard_normal(n, dtype=cp.float32) * cp.float32(0.05)
        return (a.view(cp.uint32) >> 16).astype(cp.uint16)

    def bench_linear(self, bandwidth, gemv_variants=()):
        """bf16 decode GEMVs: the weight streamed once; several weight copies rotate so that none
        is in the 60 MB L2 when it is read. Plain linear at rows 1, 2, 4, 8 on the Llama shapes
        and the logits; fused_linear (+norm +residual, and +residual alone as the decode o / down
        projections run) and gated_linear (+norm) next to the plain
        GEMV of the same weight bytes; each with plain launches and with PDL launches (graph with
        programmatic edges: each kernel's first weight loads overlap the previous one's tail).
        `gemv_variants`: (name, module) tuning variants, timed at rows 1 and 8, plain and PDL. Returns lines."""
        cp = self.cp
        try:
            pdl = PdlLaunch(cp)
        except Exception as e:  # noqa: BLE001 - no driver entry point: plain launches only
            print(f"(PDL launches unavailable: {e})")
            pdl = None
        head = (f"{'kernel':<34} {'weight [out x in]':<18} {'rows':>4} {'us':>8} {'GB/s':>7} {'of 4.6TB/s':>10} "
                f"{'of measured':>11}")
        lines = [head]
        # (kind, out, in, outdt): gated reads two [out x in] matrices; its plain reference is 2*out.
        shapes = [("linear", 2048, 8192, "bf16"), ("fused", 2048, 8192, "bf16"), ("linear", 8192, 2048, "bf16"),
                  ("fused", 8192, 2048, "bf16"), ("linear", 4096, 14336, "bf16"), ("fused", 4096, 14336, "bf16"),
                  ("fusedres", 4096, 14336, "bf16"), ("linear", 4096, 4096, "bf16"), ("fusedres", 4096, 4096, "bf16"),
                  ("linear", 14336, 4096, "bf16"), ("fused", 14336, 4096, "bf16"), ("linear", 16384, 2048, "bf16"),
                  ("gated", 8192, 2048, "bf16"), ("linear", 28672, 4096, "bf16"), ("gated", 14336, 4096, "bf16"),
                  ("linear", 128256, 2048, "f32"), ("linear", 2048, 2048, "bf16"), ("linear", 896, 896, "bf16"),
                  ("linear", 4864, 896, "bf16")]
        for kind, out_f, in_f, outdt in shapes:
            q = 2 if kind == "gated" else 1
            nbytes = q * out_f * in_f * 2
            sets = max(1, min(8, cdiv(256 << 20, nbytes)))
            wall = self.random_bf16(sets * q * out_f * in_f)
            n = out_f * in_f
            weights = [[wall[(q * i + j) * n:(q * i + j + 1) * n] for j in range(q)] for i in range(sets)]
            grid, block = geometry("linear", rows=1, out_features=out_f, in_features=in_f)
            est = nbytes / 4.0e12
            iters = max(sets, min(400, cdiv(int(2e-3 / est), sets) * sets))
            runs = [("", self.module, (1, 2, 4, 8), (False, True))]
            if kind != "linear" or out_f in (2048, 8192, 4096, 14336, 128256):
                runs += [(name, m, (1, 8), (False, True)) for name, m in gemv_variants]
            for vname, module, rows_list, modes in runs:
                for use_pdl in modes:
                    if use_pdl and pdl is None:
                        continue
                    for R in rows_list:
                        x = self.random_bf16(R * in_f)
                        nw = self.random_bf16(in_f) if kind not in ("linear", "fusedres") else None
                        res = cp.zeros(R * out_f, dtype=cp.uint16)
                        out = cp.zeros(R * out_f, dtype=cp.float32 if outdt == "f32" else cp.uint16)
                        if kind == "linear":
                            f = module.get_function(f"kiln_linear_bf16_{outdt}")
                            argf = lambda w: (x, w[0], np.uint64(0), out, np.uint32(R), np.uint32(in_f),
                                              np.uint32(out_f), np.uint32(0))
                        elif kind in ("fused", "fusedres"):
                            f = module.get_function(f"kiln_fused_linear_bf16_{outdt}")
                            argf = lambda w, nrm=int(kind == "fused"): (
                                x, nw if nrm else np.uint64(0), w[0], np.uint64(0), res, out, np.uint64(0),
                                np.uint32(R), np.uint32(in_f), np.uint32(out_f), np.uint32(nrm), np.float32(1e-5),
                                np.uint32(0), np.uint32(1), np.uint32(0))
                        else:
                            f = module.get_function("kiln_gated_linear_bf16")
                            argf = lambda w: (x, nw, w[0], w[1], out, np.uint32(R), np.uint32(in_f), np.uint32(out_f),
                                              np.uint32(1), np.float32(1e-5))
                        if use_pdl:
                            launches = [(lambda a=argf(weights[i % sets]): pdl(f, grid, block, a)) for i in range(iters)]
                        else:
                            launches = [(lambda a=argf(weights[i % sets]): f(grid, block, a)) for i in range(iters)]
                        try:
                            sec, how = self.graph_time(launches)
                        except Exception as e:  # noqa: BLE001 - report and go on
                            lines.append(f"{kind} {out_f}x{in_f} rows {R} {vname} pdl={use_pdl}: failed ({e})")
                            if use_pdl:
                                pdl = None
                            break
                        gbs = nbytes / sec / 1e9
                        extra = {"linear": "", "fused": " +norm+res", "fusedres": " +res", "gated": " +norm"}[kind]
                        label = (f"{kind}{extra}{' pdl' if use_pdl else ''}{' ' + vname if vname else ''}")
                        shape = f"{q}x{out_f}x{in_f}" if q == 2 else f"{out_f}x{in_f}"
                        lines.append(f"{label:<34} {shape:<18} {R:>4} {sec * 1e6:>8.1f} {gbs:>7.0f} "
                                     f"{gbs / 4600:>10.2f} {gbs / bandwidth:>11.2f}" + ("" if how == "graph" else f"  ({how})"))
                        print(lines[-1], flush=True)
            del wall, weights
            cp.get_default_memory_pool().free_all_blocks()
        return lines

    def bench_attention(self, bandwidth, split_variants=()):
        """Decode attention at context 4096 (p = 4095): split + merge as a pair, and the one-kernel
        attention for comparison. K and V of several sequences rotate (one cache_base each) so
        that the reads come from HBM. Returns table lines."""
        cp = self.cp
        lines = [f"{'attention (bf16, ctx 4096)':<58} {'rows':>4} {'splits x len':>12} {'us':>8} {'KV GB/s':>8} {'of 4.6TB/s':>10} {'of measured':>11}"]
        ctx = 4096
        for shape, H, KVH, HD in (("Llama-3.2-1B 32/8 hd64", 32, 8, 64), ("Llama-3.1-8B 32/8 hd128", 32, 8, 128)):
            kv_bytes_seq = 2 * ctx * KVH * HD * 2
            seqs = max(8, cdiv(384 << 20, kv_bytes_seq))
            KVR = seqs * ctx
            kc = self.random_bf16(KVR * KVH * HD)
            vc = self.random_bf16(KVR * KVH * HD)
            for R in (1, 4, 8):
                n_sets = seqs // R
                q = self.random_bf16(R * H * HD)
                pos = cp.full(R, ctx - 1, dtype=cp.int32)
                bases = [cp.asarray(np.arange(i * R, (i + 1) * R, dtype=np.int32) * ctx) for i in range(n_sets)]
                out = cp.zeros(R * H * HD, dtype=cp.uint16)
                kv_bytes = R * kv_bytes_seq
                planner = attention_splits(R, H, ctx)
                by_kv = attention_splits(R, KVH, ctx)  # the same rule counting blocks as the kernel launches them
                variants = [("planner", planner), ("kv-blocks", by_kv)]
                if by_kv == planner:
                    variants = variants[:1]
                fm = self.fn("kiln_attention_merge_bf16")
                for label, (S, SL) in variants:
                    for vname, module in (("", self.module), *split_variants):
                        ws = cp.zeros(R * H * S * (HD + 2), dtype=cp.float32)
                        fs = module.get_function("kiln_attention_split_bf16")
                        gs, bs = geometry("attention_split", rows=R, heads=H, kv_heads=KVH, splits=S)
                        gm, bm = geometry("attention_merge", rows=R, heads=H)
                        for what in ("split+merge", "split only"):
                            if what == "split only" and vname:
                                continue
                            launches = []
                            for i in range(max(2 * n_sets, 40)):
                                cb = bases[i % n_sets]
                                launches.append(lambda cb=cb, S=S, SL=SL, ws=ws, fs=fs: fs(gs, bs, (
                                    q, kc, vc, pos, cb, ws, np.uint32(R), np.uint32(H), np.uint32(KVH), np.uint32(HD),
                                    np.float32(1.0 / math.sqrt(HD)), np.uint32(KVR), np.uint32(S), np.uint32(SL),
                                    np.uint32(SL), np.uint32(0))))
                                if what == "split+merge":
                                    launches.append(lambda S=S, SL=SL, ws=ws: fm(gm, bm, (
                                        ws, pos, out, np.uint32(R), np.uint32(H), np.uint32(HD), np.uint32(S),
                                        np.uint32(SL), np.uint32(SL), np.uint32(0))))
                            sec, how = self.graph_time(launches)
                            sec *= 2 if what == "split+merge" else 1  # per split (+ merge)
                            gbs = kv_bytes / sec / 1e9
                            name = f"{shape} {what} {label}{' ' + vname if vname else ''}"
                            lines.append(f"{name:<58} {R:>4} {f'{S}x{SL}':>12} {sec * 1e6:>8.1f} {gbs:>8.0f} "
                                         f"{gbs / 4600:>10.2f} {gbs / bandwidth:>11.2f}"
                                         + ("" if how == "graph" else f"  ({how})"))
                if R == 1:
                    fa = self.fn("kiln_attention_bf16")
                    launches = [
                        (lambda cb=bases[i % n_sets]: fa((R, H, 1), (256, 1, 1), (
                            q, kc, vc, pos, cb, out, np.uint32(R), np.uint32(H), np.uint32(KVH), np.uint32(HD),
                            np.float32(1.0 / math.sqrt(HD)), np.uint32(KVR))))
                        for i in range(8)
                    ]
                    sec, how = self.graph_time(launches, reps=3)
                    gbs = kv_bytes / sec / 1e9
                    lines.append(f"{shape + ' one-kernel attention':<58} {R:>4} {'-':>12} {sec * 1e6:>8.1f} {gbs:>8.0f} "
                                 f"{gbs / 4600:>10.2f} {gbs / bandwidth:>11.2f}")
            del kc, vc
            cp.get_default_memory_pool().free_all_blocks()
        return lines

    def read_bandwidth(self):
        """Read bandwidth with kiln's own probe (kernels/bench_read.cu) over 4 GiB, GB/s."""
        cp = self.cp
        n16 = (4 << 30) // 16
        buf = cp.empty(n16 * 4, dtype=cp.uint32)
        acc = cp.zeros(1, dtype=cp.uint32)
        self.fn("kiln_bench_fill")((cdiv(n16, 256), 1, 1), (256, 1, 1), (buf, np.uint64(n16), np.uint64(1)))
        sm = cp.cuda.Device().attributes["MultiProcessorCount"]
        read = self.fn("kiln_bench_read")
        sec, _ = self.graph_time([lambda: read((sm * 8, 1, 1), (256, 1, 1), (buf, np.uint64(n16), acc))] * 5, reps=5)
        del buf
        cp.get_default_memory_pool().free_all_blocks()
        return n16 * 16 / sec / 1e9

    def bench(self, split_variants=(), gemv_variants=()):
        cp = self.cp
        lines = []
        try:
            bandwidth = self.read_bandwidth()
            lines.append(f"read bandwidth (kiln_bench_read, 4 GiB): {bandwidth:.0f} GB/s")
        except Exception as e:  # noqa: BLE001 - the probe's signature changed: use the recorded number
            bandwidth = 4605.0
            lines.append(f"read bandwidth probe failed ({e}); using the recorded 4605 GB/s")
        lines.append("")
        lines += self.bench_linear(bandwidth, gemv_variants)
        lines.append("")
        lines += self.bench_attention(bandwidth, split_variants)
        lines.append("")
        V = 151936
        for label, t, k, p, sc in [("greedy", 0.0, 0, 1.0, 3.0), ("T0.7 k40 p0.9", 0.7, 40, 0.9, 3.0)]:
            R = 8
            logits = self.dev(self.rand(R, V, scale=sc))
            args = [self.dev(np.full(R, v, dtype=d)) for v, d in
                    ((t, np.float32), (k, np.int32), (p, np.float32), (1, np.uint32), (2, np.uint32))]
            out = self.dev(np.zeros(R, dtype=np.int32))
            f = self.fn("kiln_sample_f32")
            sec, _ = self.graph_time([lambda: f(*geometry("sample", rows=R), (logits, *args, out, np.uint32(R), np.uint32(V)))] * 5,
                                     reps=5)
            lines.append(f"sample {R} rows vocab {V} {label}: {sec * 1e6:.1f} us")
        return lines


class PdlLaunch:
    """Kernel launches through the driver's cuLaunchKernelEx with the programmatic stream
    serialization attribute (PDL): captured into a graph, consecutive kernels get programmatic
    edges, so a kernel may start while its predecessor finishes (kiln::wait_prior_grids orders
    the dependent reads)."""

    def __init__(self, cp):
        import ctypes

        self.cp, self.ct = cp, ctypes
        self.lib = ctypes.CDLL("libcuda.so.1")

        class Attr(ctypes.Structure):
            _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_char * 64)]

        class Config(ctypes.Structure):
            _fields_ = [("gx", ctypes.c_uint), ("gy", ctypes.c_uint), ("gz", ctypes.c_uint), ("bx", ctypes.c_uint),
                        ("by", ctypes.c_uint), ("bz", ctypes.c_uint), ("smem", ctypes.c_uint),
                        ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(Attr)), ("nattrs", ctypes.c_uint)]

        self.Attr, self.Config = Attr, Config
        self.lib.cuLaunchKernelEx.argtypes = [ctypes.POINTER(Config), ctypes.c_void_p,
                                              ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
        self.lib.cuLaunchKernelEx.restype = ctypes.c_int
        assert ctypes.sizeof(Attr) == 72 and ctypes.sizeof(Config) == 56

    def __call__(self, fn, grid, block, args, smem=0):
        """Launches `fn` with `smem` bytes of dynamic shared memory (over 48 KB needs
        `max_dynamic_smem` first)."""
        ct, cp = self.ct, self.cp
        attr = self.Attr()
        attr.id = 6  # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        one = ct.c_int(1)
        ct.memmove(ct.addressof(attr) + 8, ct.addressof(one), 4)
        cfg = self.Config(grid[0], grid[1], grid[2], block[0], block[1], block[2], smem,
                          cp.cuda.get_current_stream().ptr, ct.pointer(attr), 1)
        vals = []
        for a in args:
            if isinstance(a, cp.ndarray):
                vals.append(ct.c_uint64(a.data.ptr))
            elif isinstance(a, np.uint64):
                vals.append(ct.c_uint64(int(a)))
            elif isinstance(a, np.uint32):
                vals.append(ct.c_uint32(int(a)))
            elif isinstance(a, np.float32):
                vals.append(ct.c_float(float(a)))
            elif isinstance(a, np.void):  # a by-value struct: a NumPy structured scalar (rope_table)
                vals.append((ct.c_char * a.dtype.itemsize).from_buffer_copy(a.tobytes()))
            else:
                raise TypeError(type(a))
        ptrs = (ct.c_void_p * len(vals))(*[ct.addressof(v) for v in vals])
        rc = self.lib.cuLaunchKernelEx(ct.byref(cfg), ct.c_void_p(getattr(fn, "kernel", fn).ptr), ptrs, None)
        if rc:
            raise RuntimeError(f"cuLaunchKernelEx: CUresult {rc}")

    def max_dynamic_smem(self, fn, nbytes):
        """Lets `fn` take up to `nbytes` of dynamic shared memory
        (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES); raises on a driver error."""
        ct = self.ct
        rc = self.lib.cuFuncSetAttribute(ct.c_void_p(getattr(fn, "kernel", fn).ptr), 8, ct.c_int(nbytes))
        if rc:
            raise RuntimeError(f"cuFuncSetAttribute({nbytes} bytes of shared memory): CUresult {rc}")


# ---- sampling reference: a port of src/runtime/sampling.rs -------------------------------------

MASK64 = (1 << 64) - 1


def splitmix64(z):
    z = (z + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def uniform(seed, counter):
    return np.float32((splitmix64((int(seed) << 32) | int(counter)) >> 40) / 16777216.0)


def argmax_ref(l):
    valid = ~np.isnan(l)
    if not valid.any():
        return 0
    m = l[valid].max()
    return int(np.nonzero(valid & (l == m))[0][0])


def candidates(logits, temperature, top_k):
    """Steps 2-3 of sample_row: f32 weights, candidate order (w descending, index ascending),
    the top_k prefix, and each index's rank in that order."""
    l = np.asarray(logits, dtype=np.float32)
    mx = l[argmax_ref(l)]
    with np.errstate(over="ignore", invalid="ignore"):
        w = np.exp((l - mx) / np.float32(temperature)).astype(np.float32)
    order = np.lexsort((np.arange(len(l)), -w))
    rank_of = np.empty(len(l), dtype=np.int64)
    rank_of[order] = np.arange(len(l))
    cand = order[:top_k] if 0 < top_k < len(order) else order
    return w, cand, rank_of


def sample_row_ref(logits, temperature, top_k, top_p, seed, counter):
    """sampling::sample_row: f32 throughout, sequential sums (as Rust's Iterator::sum)."""
    t = np.float32(temperature)
    if not (t > 0) or not np.isfinite(t):
        return argmax_ref(np.asarray(logits, dtype=np.float32))
    w, cand, _ = candidates(logits, t, top_k)
    cw = w[cand]
    if 0 < top_p < 1:
        cs = np.cumsum(cw, dtype=np.float32)  # np.add.accumulate: sequential
        hit = np.nonzero(cs >= np.float32(top_p) * cs[-1])[0]
        keep = int(hit[0]) + 1 if len(hit) else len(cand)
        cand, cw = cand[:keep], cw[:keep]
    cs = np.cumsum(cw, dtype=np.float32)
    hit = np.nonzero(cs > uniform(seed, counter) * cs[-1])[0]
    return int(cand[hit[0]]) if len(hit) else int(cand[-1])


def within_rounding(logits, temperature, top_k, top_p, seed, counter, got, tol=1e-6):
    """Whether `got` is sample_row's pick when its sums are exact (f64 over the same f32 weights),
    up to `tol` of the kept mass at the top_p boundary and at the draw."""
    t = np.float32(temperature)
    if not (t > 0) or not np.isfinite(t):
        return False
    w, cand, rank_of = candidates(logits, t, top_k)
    cs = np.cumsum(w[cand].astype(np.float64))
    total = cs[-1]
    eps = tol * total
    lo_keep = hi_keep = len(cand)
    if 0 < top_p < 1:
        goal = float(np.float32(top_p)) * total
        lo_keep = int(np.searchsorted(cs, goal - eps)) + 1
        hi_keep = min(int(np.searchsorted(cs, goal + eps)) + 1, len(cand))
    r = int(rank_of[got])
    if r >= hi_keep:
        return False
    u = float(uniform(seed, counter))
    target_lo, target_hi = u * cs[lo_keep - 1] - eps, u * cs[hi_keep - 1] + eps
    before = cs[r - 1] if r > 0 else 0.0
    return before <= target_hi and cs[r] >= target_lo


# ---- main -----------------------------------------------------------------------------------


def nvrtc_cubin(cp, arch, only=None, defines=()):
    """Compiles kernels/ exactly as src/runtime/cuda/nvrtc.rs does (one unit including every *.cu,
    every file registered as an NVRTC header) and returns (cubin bytes, log). `only` limits the
    unit to some .cu files and `defines` adds -D options: the tuning sweep of --bench compiles
    variants of one kernel that way. `cp` may be None (--compile-only, no GPU)."""
    if cp is not None:
        cp.cuda.nvrtc.getVersion()  # makes CuPy load libnvrtc, so the soname below resolves
    files = sorted(n for n in os.listdir(KERNELS) if n.endswith(".cu") or n.endswith(".cuh"))
    unit = "".join(f'#include "{n}"\n' for n in files if n.endswith(".cu") and (only is None or n in only)).encode()
    headers = [(n, open(os.path.join(KERNELS, n), "rb").read()) for n in files]
    opts = [f"--gpu-architecture={arch}", "-std=c++17", "-lineinfo", f"--include-path={cuda_include()}"]
    opts += [f"-D{d}" for d in defines]
    # KILN_CHECK_CACHE=DIR: CUBINs kept by a hash of the unit, the kernel sources and the options
    # (the CUDA include directory left out, so a --compile-only run on a machine without a GPU can
    # fill it for a GPU machine with the same CUDA version): a GPU run then skips NVRTC's ~100 s.
    # NVRTC's log is kept beside it, so a cached build reports the warnings its compile gave.
    cache = os.environ.get("KILN_CHECK_CACHE")
    path = None
    if cache:
        import hashlib

        h = hashlib.sha256(unit)
        for n, text in headers:
            h.update(n.encode() + b"\0" + text + b"\0")
        for o in opts:
            if not o.startswith("--include-path="):
                h.update(o.encode() + b"\0")
        path = os.path.join(cache, f"check-{h.hexdigest()[:24]}.cubin")
        if os.path.exists(path):
            with open(path, "rb") as f:
                cubin = f.read()
            log_path = path + ".log"
            return cubin, open(log_path).read() if os.path.exists(log_path) else ""
    cubin, log = compile_unit(unit, "kiln_kernels.cu", headers, opts)
    if path:
        os.makedirs(cache, exist_ok=True)
        with open(path, "wb") as f:
            f.write(cubin)
        if log:
            with open(path + ".log", "w") as f:
                f.write(log)
    return cubin, log


ROPE_TABLE = 64  # kernels/rope.cuh KILN_ROPE_TABLE


def rope_table(head_dim, theta, kind, factor, low, high, orig, host=True):
    """The rotating kernels' by-value `RopeFreqs` {n, v[64]} (qkv_rope, rope, rope_kv_write; `head_dim`:
    the rotary width) as a NumPy structured scalar: with `host`, the inverse frequencies of the CPU
    reference (`Checker.inv_freq`, src/ir/op.rs `RopeSpec::inv_freq`: what the runtime passes); else
    n = 0, and the kernel computes them (kernels/rope.cuh rope_inv_freq)."""
    rec = np.zeros((), dtype=np.dtype([("n", "<u4"), ("v", "<f4", ROPE_TABLE)]))
    pairs = head_dim // 2
    if not host or pairs > ROPE_TABLE:
        return rec[()]
    rec["n"] = pairs
    for i in range(pairs):
        rec["v"][i] = Checker.inv_freq(i, head_dim, theta, kind, factor, low, high, orig)
    return rec[()]


def load_module(cp, report, only=None, defines=()):
    """The kernels as a CuPy module: kiln's own NVRTC compile when libnvrtc is reachable through
    ctypes (CUBIN for the device's arch, sm_90a on Hopper), else CuPy's compile of the same unit.
    `only` / `defines`: a tuning variant (see nvrtc_cubin)."""
    major, minor = cp.cuda.Device().compute_capability[:-1], cp.cuda.Device().compute_capability[-1]
    arch = "sm_90a" if (major, minor) == ("9", "0") else f"sm_{major}{minor}"
    try:
        cubin, log = nvrtc_cubin(cp, arch, only=only, defines=defines)
        what = "nvrtc compile: no warnings" + (f" ({','.join(only or [])} {' '.join(defines)})" if only or defines else "")
        report.record(what, arch, "warning" not in log.lower(), log.splitlines()[0] if log else "")
        if log:
            print(log)
        import tempfile

        path = os.path.join(tempfile.mkdtemp(), "kiln_kernels.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        return cp.RawModule(path=path), f"kiln's NVRTC unit, {arch}, {len(cubin)} bytes"
    except OSError as e:
        print(f"(own NVRTC compile unavailable: {e}; using CuPy's)")
    if only or defines:
        raise RuntimeError("tuning variants need kiln's own NVRTC compile")
    names = sorted(n for n in os.listdir(KERNELS) if n.endswith(".cu"))
    unit = "".join(f'#include "{n}"\n' for n in names)
    options = ("-std=c++17", f"--include-path={KERNELS}", f"--include-path={cuda_include()}")
    module = cp.RawModule(code=unit, options=options)
    module.compile()
    return module, "CuPy RawModule"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", help="comma-separated checks (gather,rms_norm,...,sample)")
    ap.add_argument("--dtypes", default="f32,f16,bf16")
    ap.add_argument("--seed", type=int, default=None, help="NumPy seed (default: fresh, printed)")
    ap.add_argument("--bench", action="store_true", help="also time decode-sized launches (CUDA graphs, medians)")
    ap.add_argument("--bench-gemv-only", action="store_true", help="--bench: only the GEMV table")
    ap.add_argument("--gemv-variant", action="append", default=[], metavar="NAME=DEF[,DEF...]",
                    help="--bench: also time the GEMVs of linear.cu / linear_fused.cu compiled with these -D defines")
    ap.add_argument("--gemv-cubins", metavar="DIR",
                    help="--bench: also time the GEMVs of each DIR/NAME.cubin (tuning variants built elsewhere); "
                         "with --compile-only: write each --gemv-variant there")
    ap.add_argument("--define", action="append", default=[], metavar="NAME=VALUE",
                    help="compile the checked unit with -DNAME=VALUE (a tuning define, e.g. "
                         "KILN_ATTN_SPLIT_UNROLL=1; as kiln's KILN_NVRTC_DEFINES)")
    ap.add_argument("--compile-only", metavar="ARCH", nargs="?", const="sm_90a",
                    help="no GPU: compile kernels/ with NVRTC for ARCH (default sm_90a) and report warnings")
    args = ap.parse_args()

    if args.compile_only and args.gemv_cubins:
        # Off the GPU: build each --gemv-variant's linear.cu + linear_fused.cu as
        # DIR/NAME.cubin, for a later `--bench --gemv-cubins DIR` on the GPU (NVRTC takes ~30 s
        # per variant there, device time that a 2-core build machine can spend instead).
        os.makedirs(args.gemv_cubins, exist_ok=True)
        failed = False
        for spec in args.gemv_variant:
            name, _, defs = spec.partition("=")
            t0 = time.time()
            cubin, log = nvrtc_cubin(None, args.compile_only, only=["linear.cu", "linear_fused.cu"],
                                     defines=[d for d in defs.split(",") if d])
            path = os.path.join(args.gemv_cubins, f"{name}.cubin")
            with open(path, "wb") as f:
                f.write(cubin)
            warned = "warning" in log.lower()
            failed |= warned
            if log:
                print(log)
            print(f"{path}: {defs} ({args.compile_only}, {len(cubin)} bytes, {time.time() - t0:.1f} s"
                  f"{', WARNINGS' if warned else ''})")
        sys.exit(1 if failed else 0)

    if args.compile_only:
        t0 = time.time()
        cubin, log = nvrtc_cubin(None, args.compile_only, defines=args.define)
        if log:
            print(log)
        warned = "warning" in log.lower()
        print(f"{args.compile_only}: {len(cubin)} bytes of CUBIN in {time.time() - t0:.1f} s, "
              f"{'WARNINGS' if warned else 'no warnings'}")
        sys.exit(1 if warned else 0)

    import cupy as cp

    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    print(f"kernel_check: seed {seed}, device {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}")
    report = Report()
    t0 = time.time()
    module, how = load_module(cp, report, defines=args.define)
    print(f"compiled the kernels ({how}) in {time.time() - t0:.1f} s")

    checker = Checker(cp, module, np.random.default_rng(seed), report)
    per_dtype = ["gather", "rms_norm", "add_rms_norm", "head_rms_norm", "linear", "dense", "walk", "tiles", "norm_pass", "fused", "entries", "out_norm", "qkv", "qkv_rope", "qkv_attention", "rope", "rope_kv_write", "kv_write", "attention",
                 "attention_prefill",
                 "attention_split",
                 "swiglu", "add"]
    only = set(args.only.split(",")) if args.only else None
    for name in per_dtype:
        if only and name not in only:
            continue
        for dt in args.dtypes.split(","):
            getattr(checker, name)(DTYPES[dt])
    if not only or "sample" in only:
        checker.sample()
    print()
    print(report.table())
    if args.bench and (not only or "attention_prefill" in only):
        # Tuning variants of the prefill kernel: (name, module, warps, BN, heads on x), as compiled
        # with -D.
        variants = []
        for vname, defines, warps, bn, heads_on_x in (
                ("tiles on x", ["KILN_FA_HEADS_ON_X=0"], 4, 64, False),
                ("min-blocks 3", ["KILN_FA_MIN_BLOCKS=3"], 4, 64, True),
                ("8 warps", ["KILN_FA_WARPS=8"], 8, 64, True),
                ("BN 32 min-blocks 3", ["KILN_FA_BN=32", "KILN_FA_MIN_BLOCKS=3"], 4, 32, True)):
            try:
                m, _ = load_module(cp, report, only=["attention_prefill.cu"], defines=defines)
                variants.append((vname, m, warps, bn, heads_on_x))
            except Exception as e:  # noqa: BLE001 - a variant is optional
                print(f"(variant {vname} unavailable: {e})")
        print()
        for line in checker.bench_attention_prefill(variants):
            print(line)
    if args.bench and (not only or only - {"attention_prefill"}):
        # Tuning variant of the split kernel: registers capped for 2 blocks per SM.
        variants = []
        try:
            if not args.bench_gemv_only:
                m, _ = load_module(cp, report, only=["attention_split.cu"], defines=["KILN_ATTN_SPLIT_MIN_BLOCKS=2"])
                variants.append(("min-blocks-2", m))
        except Exception as e:  # noqa: BLE001 - a variant is optional
            print(f"(variant min-blocks-2 unavailable: {e})")
        gemv = []
        for spec in args.gemv_variant:
            name, _, defs = spec.partition("=")
            try:
                m, _ = load_module(cp, report, only=["linear.cu", "linear_fused.cu"], defines=defs.split(","))
                gemv.append((name, m))
            except Exception as e:  # noqa: BLE001 - a variant is optional
                print(f"(variant {name} unavailable: {e})")
        if args.gemv_cubins:
            for fname in sorted(os.listdir(args.gemv_cubins)):
                if fname.endswith(".cubin"):
                    gemv.append((fname[:-6], cp.RawModule(path=os.path.join(args.gemv_cubins, fname))))
        print()
        if args.bench_gemv_only:
            bw = checker.read_bandwidth()
            print(f"read bandwidth (kiln_bench_read, 4 GiB): {bw:.0f} GB/s")
            lines = checker.bench_linear(bw, gemv)
            print()
            for line in lines:
                print(line)
            variants = None
        for line in checker.bench(variants, gemv) if variants is not None else ():
            print(line)
    failed = report.failed()
    print()
    print(f"{len(report.rows) - len(failed)} passed, {len(failed)} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
