// linear.cu: kiln_linear_{dt}_{outdt}(x, weight, bias, out, rows, in_features, out_features, has_bias)
//   dt in {f32, f16, bf16} is the storage type of x, weight and bias; outdt in {dt, f32} is the
//   type of out (f32 for logits). `bias` is a null pointer when has_bias == 0.
//   Also kiln_linear_argmax_{dt}_f32 (Op::LinearArgmax) and kiln_linear[_argmax]_stats_bf16_f32
//   (Op::NormedLinear), declared at the end.
//
// Check on a GPU: python3 scripts/kernel_check.py --only linear --bench   (NVRTC build, no GPU:
// cargo test --test kernels_compile, or python3 scripts/kernel_check.py --compile-only)
//
// Semantics (Op::Linear): out[r, n] = sum_k x[r, k] * weight[n, k] (+ bias[n]), accumulated in
// f32, rounded once to outdt. weight is [out_features, in_features] row-major (HF layout).
//
// CPU reference:
//   for r, n: acc = 0f32; for k: acc += f32(x[r,k]) * f32(w[n,k]); if has_bias: acc += f32(b[n])
//             out[r,n] = OutT(acc)
//
// Two algorithms, chosen from `rows` alone so that src/plan/geometry.rs can pick the matching
// grid:
// - rows <= KILN_LINEAR_GEMV_MAX_ROWS (decode): GEMV, bound by reading the weight once. One block
//   per KILN_LINEAR_GEMV_FEATURES (16) output features (with KILN_GEMV_WALK bit 2, an experiment,
//   fewer blocks walking several: gemv_mma_walk below); grid (ceil(out_features / 16), 1), block
//   256 threads (8 warps), or 512 (16 warps) when that grid has fewer blocks than the GPU has
//   SMs (132: a 2048-wide output gives 128 blocks) and its 16-row tile is over 64 KiB, so that
//   each block keeps twice the bytes in flight (src/plan/geometry.rs GEMV_WIDE_MIN_TILE_BYTES).
//   Everything below holds for either warp count. Each kernel also exists as `_o3`
//   (at most 80 registers, three 256-thread blocks per SM; see KILN_GEMV_DENSE_BOUNDS below),
//   which the planner picks for 256-thread grids whose waves that fills better.
//   * f16 / bf16 with in_features % 8 == 0 and 16-byte aligned x and weight: tensor cores. The
//     block's 16 weight rows are the M = 16 side of `mma.m16n8k16` and the (up to 8) rows of x
//     the N = 8 side; k is split over the block's warps in runs of KILN_LINEAR_GEMV_UNROLL 32-wide
//     chunks. Lane (g, t) = (lane / 4, lane % 4) loads 16 bytes of weight rows g and g + 8 and
//     of x row g at k + 8t: the same permutation of k on both operands, so every load is
//     16 bytes and nothing is reshuffled. Each warp streams its chunks through a ring of
//     KILN_LINEAR_GEMV_DEPTH (4) register slots (gemv_mma_loop): a slot is consumed by two MMAs
//     and refilled at once with the chunk DEPTH ahead, so 3-4 KB of weight per warp are always in
//     flight (84 registers: 2 blocks of 8 warps per SM); the weight goes around the L1 (streamed
//     once), x is read coherently through L2 (common.cuh's coherence rule). The warps' partial 16x8 tiles are summed through shared memory in
//     warp order: deterministic, no atomics. linear_fused.cu uses the same main loop.
//   * PDL (programmatic dependent launch): each block issues its first DEPTH weight loads, calls
//     kiln::allow_dependents() and then kiln::wait_prior_grids(), and only then reads x and
//     writes `out`. Every other path calls both first, before any read or early return, so every
//     block of every launch waits, unconditionally. Without a programmatic launch the wait is a
//     no-op.
//   * otherwise (f32, unaligned, in_features % 8 != 0): SIMT, 2 (or 1) features per warp, lanes
//     strided over k (16-byte loads when aligned, scalar otherwise), warp-shuffle sums.
// - otherwise (prefill): a plain shared-memory tiled kernel, 64x64 outputs per block, each
//   thread 4x4. Grid (ceil(out_features / 64), ceil(rows / 64)), block 256. Correctness first; a faster
//   (tensor-core) path replaces it later.
// Every reduction order depends only on the shapes: results are identical between runs.
#pragma once  // linear_fused.cu includes it for the GEMV main loop
#include "common.cuh"

namespace kiln {

#define KILN_LINEAR_GEMV_MAX_ROWS 8
#define KILN_LINEAR_GEMV_WARPS 8
#define KILN_LINEAR_GEMV_MAX_WARPS 16
#define KILN_LINEAR_GEMV_FEATURES 16
// Tuning knobs of the tensor-core main loop, overridable only for the sweep of
// scripts/kernel_check.py --bench (the geometry does not depend on them):
// UNROLL: contiguous 32-wide chunks a warp takes per round (UNROLL x 64 bytes of each weight row);
// DEPTH: chunks in flight per warp (the register ring, a multiple of UNROLL); XPRE: 1 to load x
// into the ring with the weights, 0 to load it from L1 when its chunk is consumed.
#ifndef KILN_LINEAR_GEMV_UNROLL
#define KILN_LINEAR_GEMV_UNROLL 1
#endif
#ifndef KILN_LINEAR_GEMV_DEPTH
#define KILN_LINEAR_GEMV_DEPTH 4
#endif
#ifndef KILN_LINEAR_GEMV_XPRE
#define KILN_LINEAR_GEMV_XPRE 1
#endif
// Register cap of the linear kernels (more blocks per SM); the default is the 512-thread bound.
#ifdef KILN_LINEAR_MAXNREG
#define KILN_LINEAR_BOUNDS __maxnreg__(KILN_LINEAR_MAXNREG)
#else
#define KILN_LINEAR_BOUNDS __launch_bounds__(32 * KILN_LINEAR_GEMV_MAX_WARPS)
#endif
#define KILN_LINEAR_TILE 64
#define KILN_LINEAR_TILE_K 32
// Shared floats of a linear block: the tiled path's two 32 x 65 tiles; the GEMV's partial tiles
// (16 warps x 4 x 32) fit in the same space.
#define KILN_LINEAR_SMEM (2 * KILN_LINEAR_TILE_K * (KILN_LINEAR_TILE + 1))
static_assert(KILN_LINEAR_GEMV_MAX_ROWS == 8, "the MMA's N side holds at most 8 rows of x");
static_assert(KILN_LINEAR_GEMV_FEATURES == 2 * KILN_LINEAR_GEMV_WARPS, "SIMT GEMV: 2 features per warp");
static_assert(KILN_LINEAR_GEMV_FEATURES == KILN_LINEAR_GEMV_MAX_WARPS, "SIMT GEMV: 1 feature per warp");
static_assert(KILN_LINEAR_GEMV_DEPTH % KILN_LINEAR_GEMV_UNROLL == 0, "the ring holds whole runs");
static_assert(KILN_LINEAR_GEMV_MAX_WARPS * 4 * 32 <= KILN_LINEAR_SMEM, "GEMV partials fit the tile space");

template <typename T> struct IsHalf16 {
  static constexpr bool value = sizeof(T) == 2;
};

// 16 bytes of a weight (load16_stream's instruction, KILN_STREAM_LOAD), volatile so that it is
// issued in program order with the other loads of the ring and all of an iteration's loads are in
// flight before the first MMA.
__device__ __forceinline__ uint4 load16_stream_ordered(const void* p) {
  uint4 v;
  asm volatile(KILN_LD_STREAM " {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// The x operand (the MMA's B side) of the plain GEMV: 16 bytes of x row rx at element `first + off`.
template <typename T> struct GemvPlainX {
  const T* px;  // x + rx * in + first
  __device__ __forceinline__ void prefetch() {}
  __device__ __forceinline__ void prepare() {}
  __device__ __forceinline__ uint4 load(unsigned int off) const { return load16_act(px + off); }
  __device__ __forceinline__ uint4 finish(const uint4& v, unsigned int) const { return v; }
};

// Op::NormedLinear (kiln_linear_*stats_*): inv[i] = 1 / sqrt(sum(row i) / in + eps) for i < n, the
// inverse RMS of the rows whose statistics an out-norm (linear_fused.cu OutNormArgs) stored: row i
// is `groups` = in / 8 floats at rows[i * groups], added as ir::stats_inv does: warp w takes rows w,
// w + warps, ..; lane l adds the row's sums l, l + 32, .. in order, then warp_sum (xor 16 .. 1).
// `rows` is the prior grid's sumsq (read with ld.cg after kiln::wait_prior_grids(), never through
// the non-coherent path) or the block's shared-memory copy of it (GemvStatsX's stage). A barrier must
// come before another warp reads `inv`.
template <bool SHARED>
__device__ __forceinline__ void stats_inv_rows(const float* rows, unsigned int n, unsigned int groups, unsigned int in,
                                               float eps, float* inv) {
  const unsigned int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (unsigned int i = warp; i < n; i += warps) {
    const float* row = rows + (size_t)i * groups;
    float t = 0.0f;
    for (unsigned int g = lane; g < groups; g += 32) t = __fadd_rn(t, SHARED ? row[g] : __ldcg(row + g));
    t = warp_sum(t);
    if (lane == 0) inv[i] = 1.0f / sqrtf(t / (float)in + eps);
  }
}

// KILN_STATS_ASYNC (default 1; `KILN_NVRTC_DEFINES=KILN_STATS_ASYNC=0` for an A/B): right after the
// wait, warp w copies row w of sumsq into shared memory with cp.async (ld.cg's L2 path, no register
// and no stall) and sums it at the end of its main loop, before the block sum's barrier; 0, or rows
// that do not fit the stage (rows x in / 8 floats, 16-byte rows: in % 32 == 0), read and sum sumsq
// there (an L2 round trip before the block sum; summing right after the wait instead, the first
// form, made the warp's first MMA wait for it). The same additions in the same order either way:
// the same bits.
#ifndef KILN_STATS_ASYNC
#define KILN_STATS_ASYNC 1
#endif

// The plain GEMV's x operand for an Op::NormedLinear: x as GemvPlainX; prepare() (right after the
// wait) starts the copy of the block's rows of sumsq into the stage (the shared memory `smem` holds
// past the block sum's partials, WARPS x 4 x 32 floats), and finish_stats() (every thread, after the
// main loop, before gemv_mma_sum's barrier, which publishes inv to the epilogue) sums the staged copy,
// or, where the rows do not fit the stage, sumsq itself (ld.cg). Warp w copies and sums row w: __syncwarp() after its own
// copies' wait is the only ordering the stage needs. Nothing but what the GEMV keeps anyway (x, the
// shared-memory base, the shapes) lives across the main loop.
template <typename T, int WARPS> struct GemvStatsX {
  static constexpr unsigned int STAGE = KILN_LINEAR_SMEM - WARPS * 4 * 32;  // floats
  GemvPlainX<T> x;
  const float* sumsq;
  float* smem;
  float* inv;
  unsigned int rows, in;
  float eps;
  __device__ __forceinline__ bool staged() const {
    return KILN_STATS_ASYNC != 0 && (in / 8) % 4 == 0 && rows * (in / 8) <= STAGE;
  }
  __device__ __forceinline__ void prefetch() {}
  __device__ __forceinline__ void prepare() {
    const unsigned int groups = in / 8;
    if (!staged()) return;
    float* stage = smem + WARPS * 4 * 32;
    const unsigned int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (unsigned int r = warp; r < rows; r += WARPS) {
      for (unsigned int v = lane; v < groups / 4; v += 32) {
        const size_t at = (size_t)r * groups + 4 * v;
        const unsigned int dst = static_cast<unsigned int>(__cvta_generic_to_shared(stage + at));
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(sumsq + at));
      }
    }
    asm volatile("cp.async.commit_group;\n");
  }
  // Idempotent (a walking block calls it once per tile: the same sums again).
  __device__ __forceinline__ void finish_stats() const {
    if (!staged()) {
      stats_inv_rows<false>(sumsq, rows, in / 8, in, eps, inv);
      return;
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    __syncwarp();
    stats_inv_rows<true>(smem + WARPS * 4 * 32, rows, in / 8, in, eps, inv);
  }
  __device__ __forceinline__ uint4 load(unsigned int off) const { return x.load(off); }
  __device__ __forceinline__ uint4 finish(const uint4& v, unsigned int off) const { return x.finish(v, off); }
};

// First element of lane (warp, t) in the tensor-core GEMV main loop.
template <int WARPS, int U> __device__ __forceinline__ unsigned int gemv_mma_first() {
  return (threadIdx.x >> 5) * U * 32 + 8 * (threadIdx.x & 3);
}

// Lane group g's two weight rows of the 16-feature tile from n0: n0 + g (MMA rows 0-7) and
// n0 + g + 8 (8-15). Rows past out_features read row 0 instead: each output of the MMA depends on
// one weight row and one x row only, and those outputs are never stored, so the main loop needs
// no predicates.
__device__ __forceinline__ void gemv_tile_rows(unsigned int n0, unsigned int g, unsigned int outf, unsigned int& ra,
                                               unsigned int& rb) {
  ra = n0 + g < outf ? n0 + g : 0;
  rb = n0 + g + 8 < outf ? n0 + g + 8 : 0;
}

// The two MMAs of one 16-byte strand per lane: weight rows (a: tile rows 0-7, b: 8-15) against x;
// elements k+8t .. k+8t+3 feed the first MMA, k+8t+4 .. +7 the second.
template <typename T>
__device__ __forceinline__ void gemv_mma_strand(float (&c)[4], const uint4& a, const uint4& b, const uint4& xb) {
  mma_m16n8k16<T>(c, a.x, b.x, a.y, b.y, xb.x, xb.y);
  mma_m16n8k16<T>(c, a.z, b.z, a.w, b.w, xb.z, xb.w);
}

// One full chunk of the ring: x of slot s (preloaded in xr when XPRE, else loaded now at element
// offset o), finished by the x operand, against the slot's weights of each matrix q.
template <typename T, int Q, int D, bool XPRE, typename X>
__device__ __forceinline__ void gemv_mma_slot(float (&c)[Q][4], const uint4 (&wa)[Q][D], const uint4 (&wb)[Q][D],
                                              const uint4 (&xr)[XPRE ? D : 1], X& xop, int s, unsigned int o) {
  uint4 xraw;
  if constexpr (XPRE) {
    xraw = xr[XPRE ? s : 0];
  } else {
    xraw = xop.load(o);
  }
  const uint4 xb = xop.finish(xraw, o);
#pragma unroll
  for (int q = 0; q < Q; ++q) gemv_mma_strand<T>(c[q], wa[q][s], wb[q][s], xb);
}

// The ring's start: this lane's first D chunks of weights (row_a(q) / row_b(q): its rows of matrix
// q at its `first` element; so(s): slot s's element offset), then xop.prefetch() (operands that
// depend on no kernel, the norm weight), both before kiln::wait_prior_grids(); after it
// xop.prepare() and, XPRE, the slots' x. Every thread of the block calls it.
template <typename T, int Q, int D, bool XPRE, typename X, typename RowA, typename RowB, typename So>
__device__ __forceinline__ void gemv_mma_ring_start(uint4 (&wa)[Q][D], uint4 (&wb)[Q][D], uint4 (&xr)[XPRE ? D : 1],
                                                    unsigned int nj, X& xop, RowA row_a, RowB row_b, So so) {
#pragma unroll
  for (int s = 0; s < D; ++s) {
    if ((unsigned int)s < nj) {
#pragma unroll
      for (int q = 0; q < Q; ++q) {
        wa[q][s] = load16_stream_ordered(row_a(q) + KILN_W_STEP(T, so(s)));
        wb[q][s] = load16_stream_ordered(row_b(q) + KILN_W_STEP(T, so(s)));
      }
    }
  }
  xop.prefetch();
  allow_dependents();
  wait_prior_grids();
  xop.prepare();
  if constexpr (XPRE) {
#pragma unroll
    for (int s = 0; s < D; ++s)
      if ((unsigned int)s < nj) xr[XPRE ? s : 0] = xop.load(so(s));
  }
}

// The partial last chunk of a warp's k (in % 32 != 0; lanes past `in` contribute zeros), if this
// warp owns it: the chunk after its nj full ones. row_a(q) / row_b(q): this lane's weight rows of
// matrix q at its `first` element.
template <typename T, int Q, int U, unsigned int RS, typename X, typename RowA, typename RowB>
__device__ __forceinline__ void gemv_mma_tail(float (&c)[Q][4], unsigned int nj, unsigned int first, unsigned int in,
                                              X& xop, RowA row_a, RowB row_b) {
  const unsigned int rel = (nj / U) * RS * 32 + (nj % U) * 32;
  if (first - 8 * (threadIdx.x & 3) + rel < in) {
    const bool ok = first + rel < in;
    const uint4 zero4 = make_uint4(0u, 0u, 0u, 0u);
    const uint4 x1 = ok ? xop.finish(xop.load(rel), rel) : zero4;
#pragma unroll
    for (int q = 0; q < Q; ++q) {
      const uint4 a1 = ok ? load16_stream(row_a(q) + KILN_W_STEP(T, rel)) : zero4;
      const uint4 b1 = ok ? load16_stream(row_b(q) + KILN_W_STEP(T, rel)) : zero4;
      gemv_mma_strand<T>(c[q], a1, b1, x1);
    }
  }
}

// The main loop of the tensor-core GEMVs of linear.cu and linear_fused.cu: c[q] += the 16 x 8
// tile of (weight rows ra (A rows 0-7) and rb (8-15) of matrix q) x (x operand rows), over this
// warp's k. Q weight matrices share the x operand (2: gate and up). Lane (g, t) loads 16 bytes of
// rows ra, rb and of x at k + 8t of each 32-wide chunk k: the same permutation of k on both
// operands. Warp w takes chunks [U * (w + WARPS * i), + U). Its full chunks go through a ring of D
// register slots: chunk j is consumed from slot j % D, which is then refilled with chunk j + D, so
// D - 1 to D chunks (2 x 512 bytes of weight each per q) are always in flight. The last, partial
// chunk (in % 32 != 0; lanes past `in` contribute zeros) is done after the ring by its warp.
//
// PDL: the first D chunks' weight loads are issued before kiln::wait_prior_grids() (weights never
// depend on an earlier kernel), and so are xop.prefetch()'s (weights too); x, and whatever
// xop.prepare() reads, come after it. Every thread
// of the block must call this (xop.prepare() may hold barriers).
// gemv_mma_loop_rows takes the start of each lane's two weight rows itself (rows_a[q], rows_b[q]):
// the QKV GEMV's rows come from three matrices.
template <typename T, int Q, int WARPS, int D, int U, bool XPRE, typename X>
__device__ __forceinline__ void gemv_mma_loop_rows(const T* const (&rows_a)[Q], const T* const (&rows_b)[Q],
                                                   unsigned int in, X& xop, float (&c)[Q][4]) {
  static_assert(D % U == 0, "the ring holds whole runs");
  constexpr unsigned int RS = WARPS * U;            // chunks per round of the block's warps
  constexpr unsigned int CYCLE = D * WARPS * 32;    // elements a slot advances per ring cycle
  const unsigned int warp = threadIdx.x >> 5;
  const unsigned int first = gemv_mma_first<WARPS, U>();
  const T* pa[Q];
  const T* pb[Q];
#pragma unroll
  for (int q = 0; q < Q; ++q) {
    pa[q] = rows_a[q] + KILN_W_COL(T, first);
    pb[q] = rows_b[q] + KILN_W_COL(T, first);
  }
  const unsigned int full = in / 32;
  const unsigned int rounds = full / RS;
  const int rem = (int)(full - rounds * RS) - (int)(warp * U);
  const unsigned int nj = rounds * U + (rem <= 0 ? 0u : (rem >= U ? (unsigned int)U : (unsigned int)rem));
  // Element offset (from `first`) of ring slot s in the first cycle.
#define KILN_GEMV_SO(s) (((unsigned int)(s) / U) * RS * 32 + ((unsigned int)(s) % U) * 32)
  uint4 wa[Q][D], wb[Q][D], xr[XPRE ? D : 1];
  gemv_mma_ring_start<T, Q, D, XPRE>(wa, wb, xr, nj, xop, [&](int q) { return pa[q]; }, [&](int q) { return pb[q]; },
                                     [](int s) { return KILN_GEMV_SO(s); });
  unsigned int off = 0, j0 = 0;
  // One chunk: the MMAs of slot s (chunk at `off + SO(s)`), then, if `next`, its refill.
  auto step = [&](const int s, const bool next) {
    const unsigned int o = off + KILN_GEMV_SO(s);
    gemv_mma_slot<T, Q, D, XPRE>(c, wa, wb, xr, xop, s, o);
    if (next) {
#pragma unroll
      for (int q = 0; q < Q; ++q) {
        wa[q][s] = load16_stream_ordered(pa[q] + KILN_W_STEP(T, o) + KILN_W_STEP(T, CYCLE));
        wb[q][s] = load16_stream_ordered(pb[q] + KILN_W_STEP(T, o) + KILN_W_STEP(T, CYCLE));
      }
      if constexpr (XPRE) xr[XPRE ? s : 0] = xop.load(o + CYCLE);
    }
  };
  // Steady state: every slot consumed and refilled.
  while (j0 + 2 * D <= nj) {
#pragma unroll
    for (int s = 0; s < D; ++s) step(s, true);
    off += CYCLE;
    j0 += D;
  }
  // Drain: fewer than 2D chunks left.
#pragma unroll
  for (int s = 0; s < D; ++s)
    if (j0 + s < nj) step(s, j0 + D + s < nj);
  off += CYCLE;
  j0 += D;
#pragma unroll
  for (int s = 0; s < D; ++s)
    if (j0 + s < nj) step(s, false);
#undef KILN_GEMV_SO
  gemv_mma_tail<T, Q, U, RS>(c, nj, first, in, xop, [&](int q) { return pa[q]; }, [&](int q) { return pb[q]; });
}

template <typename T, int Q, int WARPS, int D, int U, bool XPRE, typename X>
__device__ __forceinline__ void gemv_mma_loop(const T* const (&wq)[Q], unsigned int ra, unsigned int rb,
                                              unsigned int in, X& xop, float (&c)[Q][4]) {
  const T* rows_a[Q];
  const T* rows_b[Q];
#pragma unroll
  for (int q = 0; q < Q; ++q) {
    rows_a[q] = wq[q] + KILN_W_ROW(T, ra, in);
    rows_b[q] = wq[q] + KILN_W_ROW(T, rb, in);
  }
  gemv_mma_loop_rows<T, Q, WARPS, D, U, XPRE, X>(rows_a, rows_b, in, xop, c);
}

// Walking GEMV blocks: a grid of fewer 256-thread blocks than 16-feature tiles, each block walking
// the tiles blockIdx.x, + gridDim.x, ... < tiles with one ring: the last chunks of a tile refill
// their slots with the next tile's first chunks, so the next tile's weights are in flight during
// this tile's drain, block sum and epilogue (a new block of a multi-wave grid starts from an
// empty ring), and the wait, the norm's prologue and the first loads happen once per block. Each
// tile's sums are gemv_mma_loop's, in its order: the same bits as one block per tile.
// KILN_GEMV_WALK says which kernels can walk (bits: 1 the default `gated_linear`, 2 `linear`, 4 the
// other `fused_linear`s, 8 the dense `gated_linear_o3`); the planner walks only launches of those
// (src/plan/geometry.rs `gemv_walk_blocks`; the runtime compiles with the bits of its
// `gemv_walk_define`, set by the plan-time knob KILN_GEMV_WALK). By default (1) the one that won on
// the H200 (bench/results/2026-12-01-h200-decode-ab-s19.md): the Llama-3.2-1B gate/up (512 tiles
// on the default variant's 264 slots: 1.94 waves) +1.5% at batch 1; the dense gated kernel walking
// the Llama-3.1-8B's (896 tiles on 396 slots) lost 1.6%, `linear` walking the logits lost 0.4-2%.
// rows_of(t, ra, rb): this lane's weight rows of tile t. done(t, c): every thread, after the
// tile's main loop (it may hold barriers; the first thing it must do for t != blockIdx.x is a
// barrier, before it writes the shared memory the previous tile's sum read).
#ifndef KILN_GEMV_WALK
#define KILN_GEMV_WALK 1
#endif
template <typename T, int Q, int WARPS, int D, int U, bool XPRE, typename X, typename RowsOf, typename Done>
__device__ __forceinline__ void gemv_mma_walk(const T* const (&wq)[Q], unsigned int in, unsigned int tiles, X& xop,
                                              RowsOf rows_of, Done done) {
  static_assert(D % U == 0, "the ring holds whole runs");
  constexpr unsigned int RS = WARPS * U;
  constexpr unsigned int CYCLE = D * WARPS * 32;
  const unsigned int warp = threadIdx.x >> 5;
  const unsigned int first = gemv_mma_first<WARPS, U>();
  const unsigned int full = in / 32;
  const unsigned int rounds = full / RS;
  const int rem = (int)(full - rounds * RS) - (int)(warp * U);
  const unsigned int nj = rounds * U + (rem <= 0 ? 0u : (rem >= U ? (unsigned int)U : (unsigned int)rem));
#define KILN_GEMV_SO(s) (((unsigned int)(s) / U) * RS * 32 + ((unsigned int)(s) % U) * 32)
  // Weight rows as element offsets (their lane's `first` included) into each matrix: two registers
  // for any Q, recomputed from the tile index rather than kept across a tile's epilogue.
  unsigned int t = blockIdx.x, ka, kb;
  auto point = [&](unsigned int tt, unsigned int& a, unsigned int& b) {
    unsigned int ra, rb;
    rows_of(tt, ra, rb);
    a = KILN_W_ROW32(T, ra, in) + KILN_W_COL(T, first);
    b = KILN_W_ROW32(T, rb, in) + KILN_W_COL(T, first);
  };
  point(t, ka, kb);
  uint4 wa[Q][D], wb[Q][D], xr[XPRE ? D : 1];
  gemv_mma_ring_start<T, Q, D, XPRE>(wa, wb, xr, nj, xop, [&](int q) { return wq[q] + ka; },
                                     [&](int q) { return wq[q] + kb; }, [](int s) { return KILN_GEMV_SO(s); });
  for (;;) {
    const bool more = t + gridDim.x < tiles;
    float c[Q][4];
#pragma unroll
    for (int q = 0; q < Q; ++q)
#pragma unroll
      for (int i = 0; i < 4; ++i) c[q][i] = 0.0f;
    unsigned int off = 0, j0 = 0, na = 0, nb = 0;
    // One chunk: the MMAs of slot s, then its refill: mode 1 this tile's chunk D ahead, 2 the next
    // tile's chunk s (the slot's last use in this tile), 0 none.
    auto step = [&](const int s, const int mode) {
      const unsigned int o = off + KILN_GEMV_SO(s);
      gemv_mma_slot<T, Q, D, XPRE>(c, wa, wb, xr, xop, s, o);
      if (mode == 1) {
#pragma unroll
        for (int q = 0; q < Q; ++q) {
          wa[q][s] = load16_stream_ordered(wq[q] + ka + KILN_W_STEP(T, (o + CYCLE)));
          wb[q][s] = load16_stream_ordered(wq[q] + kb + KILN_W_STEP(T, (o + CYCLE)));
        }
        if constexpr (XPRE) xr[XPRE ? s : 0] = xop.load(o + CYCLE);
      } else if (mode == 2) {
#pragma unroll
        for (int q = 0; q < Q; ++q) {
          wa[q][s] = load16_stream_ordered(wq[q] + na + KILN_W_STEP(T, KILN_GEMV_SO(s)));
          wb[q][s] = load16_stream_ordered(wq[q] + nb + KILN_W_STEP(T, KILN_GEMV_SO(s)));
        }
        if constexpr (XPRE) xr[XPRE ? s : 0] = xop.load(KILN_GEMV_SO(s));
      }
    };
    while (j0 + 2 * D <= nj) {
#pragma unroll
      for (int s = 0; s < D; ++s) step(s, 1);
      off += CYCLE;
      j0 += D;
    }
    if (more) point(t + gridDim.x, na, nb);
    const int last = more ? 2 : 0;
#pragma unroll
    for (int s = 0; s < D; ++s)
      if (j0 + s < nj) step(s, j0 + D + s < nj ? 1 : last);
    off += CYCLE;
    j0 += D;
#pragma unroll
    for (int s = 0; s < D; ++s)
      if (j0 + s < nj) step(s, last);
    gemv_mma_tail<T, Q, U, RS>(c, nj, first, in, xop, [&](int q) { return wq[q] + ka; }, [&](int q) { return wq[q] + kb; });
#undef KILN_GEMV_SO
    done(t, c);
    if (!more) break;
    t += gridDim.x;
    point(t, ka, kb);
  }
}

// The block's sum of the warps' tiles c[q], in warp order, through `partial` (Q x WARPS x 4 x 32
// floats of shared memory). Returns, in threads 0..127, s[q] for feature n0 + (l / 4) + 8 (i / 2),
// row 2 (l % 4) + i % 2, where i = thread / 32 and l = thread % 32 (c[q][i] of lane l is that
// feature and row).
template <int Q, int WARPS>
__device__ __forceinline__ void gemv_mma_sum(const float (&c)[Q][4], float* partial, float (&s)[Q]) {
  const unsigned int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int q = 0; q < Q; ++q)
#pragma unroll
    for (int i = 0; i < 4; ++i) partial[((q * WARPS + warp) * 4 + i) * 32 + lane] = c[q][i];
  __syncthreads();
#pragma unroll
  for (int q = 0; q < Q; ++q) s[q] = 0.0f;
  if (threadIdx.x < 128) {
    const unsigned int i = threadIdx.x >> 5, l = threadIdx.x & 31;
#pragma unroll
    for (int q = 0; q < Q; ++q)
#pragma unroll
      for (int w2 = 0; w2 < WARPS; ++w2) s[q] += partial[((q * WARPS + w2) * 4 + i) * 32 + l];
  }
}

// Tensor-core GEMV for f16 / bf16 (see the header), WARPS = blockDim.x / 32 (8 or 16). Needs
// in % 8 == 0, x and w 16-byte aligned.
// ARGMAX (kiln_linear_argmax_*, Op::LinearArgmax): each row's largest argmax_key over the
// block's stored outputs is folded into argmax[r] with one atomic max per warp that holds the row,
// where it beats the key read at the start of the block's epilogue (KILN_ARGMAX_FILTER).
#ifndef KILN_ARGMAX_FILTER
#define KILN_ARGMAX_FILTER 1
#endif
// STATS (Op::NormedLinear): each row's sums times its inverse RMS from `sumsq` (GemvStatsX, into
// `inv`) before the bias-less rounding; otherwise `sumsq`, `eps` and `inv` are unused.
template <typename T, typename O, int WARPS, bool ARGMAX, bool STATS = false>
__device__ void linear_gemv_mma(const T* x, const T* w, const T* bias,
                                O* __restrict__ out, unsigned long long* argmax, unsigned int rows, unsigned int in,
                                unsigned int outf, bool has_bias, float* partial, const float* sumsq = nullptr,
                                float eps = 0.0f, float* inv = nullptr) {
  constexpr int U = KILN_LINEAR_GEMV_UNROLL, D = KILN_LINEAR_GEMV_DEPTH;
  const unsigned int lane = threadIdx.x & 31;
  const unsigned int g = lane >> 2;
  const unsigned int rx = g < rows ? g : 0;
  const GemvPlainX<T> plain{x + (size_t)rx * in + gemv_mma_first<WARPS, U>()};
  auto xop = [&]() {
    if constexpr (STATS) {
      return GemvStatsX<T, WARPS>{plain, sumsq, partial, inv, rows, in, eps};
    } else {
      return plain;
    }
  }();
  const T* const wq[1] = {w};
  // The block's sum of its warps' tiles for features n0.., and the stores (threads < 128).
  auto store = [&](unsigned int n0, const float (&c)[1][4]) {
    float s[1];
    // ARGMAX: the row's key as it stands now (ld.cg: where the atomics land), a lower bound of the
    // final one: a block whose best key is not above it folds nothing in. Loaded before the block's
    // sum so that the round trip overlaps it. Without the filter (KILN_ARGMAX_FILTER=0) every
    // block folds: two atomics per row per block on one address, ~16k per step on a 128k
    // vocabulary, which slowed the Llama-3.2-1B's logits GEMV 115.4 -> 118.2 us (session 36 call A).
    unsigned long long seen = 0ull;
#if KILN_ARGMAX_FILTER
    if constexpr (ARGMAX) {
      const unsigned int fr = 2 * (threadIdx.x & 3) + ((threadIdx.x >> 5) & 1);
      if (threadIdx.x < 128 && (threadIdx.x & 31) < 4 && fr < rows) seen = __ldcg(argmax + fr);
    }
#endif
    if constexpr (STATS) xop.finish_stats();
    gemv_mma_sum<1, WARPS>(c, partial, s);
    if (threadIdx.x < 128) {
      const unsigned int i = threadIdx.x >> 5, l = threadIdx.x & 31;
      const unsigned int n = n0 + (l >> 2) + 8 * (i >> 1), r = 2 * (l & 3) + (i & 1);
      unsigned long long key = 0ull;
      if (r < rows && n < outf) {
        float v = s[0];
        if constexpr (STATS) v = __fmul_rn(v, inv[r]);
        const O o = from_f32<O>(has_bias ? v + to_f32(bias[n]) : v);
        out[(size_t)r * outf + n] = o;
        if constexpr (ARGMAX) key = argmax_key(to_f32(o), n);
      }
      if constexpr (ARGMAX) {
        // Lanes l, l ^ 4, .. (the same l % 4) of warp i hold row r's features n0 + 8 (i / 2) + 0..7.
#pragma unroll
        for (int o = 4; o < 32; o <<= 1) {
          const unsigned long long k2 = __shfl_xor_sync(0xffffffffu, key, o);
          key = k2 > key ? k2 : key;
        }
        if (l < 4 && r < rows && key > seen) atomicMax(argmax + r, key);
      }
    }
  };
#if (KILN_GEMV_WALK) & 2
  // 256-thread blocks walk (KILN_GEMV_WALK bit 2); a grid of 512-thread blocks has fewer blocks
  // than SMs: nothing to walk.
  if constexpr (WARPS == 8) {
    const unsigned int tiles = (outf + KILN_LINEAR_GEMV_FEATURES - 1) / KILN_LINEAR_GEMV_FEATURES;
    auto rows_of = [&](unsigned int t, unsigned int& a, unsigned int& b) {
      gemv_tile_rows(t * KILN_LINEAR_GEMV_FEATURES, g, outf, a, b);
    };
    auto done = [&](unsigned int t, const float (&c)[1][4]) {
      if (t != blockIdx.x) __syncthreads();  // the previous tile's partials have been read
      store(t * KILN_LINEAR_GEMV_FEATURES, c);
    };
    gemv_mma_walk<T, 1, WARPS, D, U, KILN_LINEAR_GEMV_XPRE != 0>(wq, in, tiles, xop, rows_of, done);
  } else
#endif
  {
    const unsigned int n0 = blockIdx.x * KILN_LINEAR_GEMV_FEATURES;
    // Weight rows past out_features (and x rows past `rows`, rx above) read row 0 instead.
    unsigned int ra, rb;
    gemv_tile_rows(n0, g, outf, ra, rb);
    float c[1][4] = {{0.0f, 0.0f, 0.0f, 0.0f}};
    gemv_mma_loop<T, 1, WARPS, D, U, KILN_LINEAR_GEMV_XPRE != 0>(wq, ra, rb, in, xop, c);
    store(n0, c);
  }
}

// SIMT GEMV: with 8 warps, warp w computes features n0 + 2w and n0 + 2w + 1 for NR rows of x;
// with 16, feature n0 + w.
template <typename T, typename O, int NR, bool ARGMAX>
__device__ void linear_gemv_simt(const T* x, const T* w, const T* bias, O* __restrict__ out,
                                 unsigned long long* argmax, unsigned int in, unsigned int outf, bool has_bias) {
  const unsigned int lane = threadIdx.x & 31;
  const unsigned int per_warp = KILN_LINEAR_GEMV_FEATURES / (blockDim.x >> 5);
  const unsigned int n = blockIdx.x * KILN_LINEAR_GEMV_FEATURES + per_warp * (threadIdx.x >> 5);
  if (n >= outf) return;
  const bool two = per_warp == 2 && n + 1 < outf;
  const T* w0 = w + KILN_W_ROW(T, n, in);
  const T* w1 = w + KILN_W_ROW(T, two ? n + 1 : n, in);
  float acc0[NR], acc1[NR];
#pragma unroll
  for (int r = 0; r < NR; ++r) acc0[r] = acc1[r] = 0.0f;

  constexpr int V = Vec16<T>::N;
  const bool vec = (in % V == 0) && aligned16(w) && aligned16(x);
  if (vec) {
#pragma unroll 2
    for (unsigned int k = lane * V; k < in; k += 32 * V) {
      float f0[V], f1[V];
      unpack16_as<T>(load16_stream(w0 + KILN_W_COL(T, k)), f0);
      unpack16_as<T>(load16_stream(w1 + KILN_W_COL(T, k)), f1);
#pragma unroll
      for (int r = 0; r < NR; ++r) {
        float xf[V];
        load16<T>(x + (size_t)r * in + k, xf);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          acc0[r] = __fmaf_rn(xf[j], f0[j], acc0[r]);
          acc1[r] = __fmaf_rn(xf[j], f1[j], acc1[r]);
        }
      }
    }
  } else {
    for (unsigned int k = lane; k < in; k += 32) {
      const float f0 = to_f32(w0[KILN_W_COL(T, k)]), f1 = to_f32(w1[KILN_W_COL(T, k)]);
#pragma unroll
      for (int r = 0; r < NR; ++r) {
        const float xf = to_f32(x[(size_t)r * in + k]);
        acc0[r] = __fmaf_rn(xf, f0, acc0[r]);
        acc1[r] = __fmaf_rn(xf, f1, acc1[r]);
      }
    }
  }
  const float b0 = has_bias ? to_f32(bias[n]) : 0.0f;
  const float b1 = has_bias && two ? to_f32(bias[n + 1]) : 0.0f;
#pragma unroll
  for (int r = 0; r < NR; ++r) {
    const float s0 = warp_sum(acc0[r]), s1 = warp_sum(acc1[r]);
    if (lane == 0) {
      const O o0 = from_f32<O>(has_bias ? s0 + b0 : s0);
      out[(size_t)r * outf + n] = o0;
      unsigned long long key = 0ull;
      if constexpr (ARGMAX) key = argmax_key(to_f32(o0), n);
      if (two) {
        const O o1 = from_f32<O>(has_bias ? s1 + b1 : s1);
        out[(size_t)r * outf + n + 1] = o1;
        if constexpr (ARGMAX) {
          const unsigned long long k1 = argmax_key(to_f32(o1), n + 1);
          key = k1 > key ? k1 : key;
        }
      }
      if (ARGMAX && key != 0ull) atomicMax(argmax + r, key);
    }
  }
}

template <typename T, typename O, bool ARGMAX>
__device__ void linear_tiled(const T* x, const T* w, const T* bias, O* __restrict__ out,
                             unsigned long long* argmax, unsigned int rows, unsigned int in, unsigned int outf,
                             bool has_bias, float* smem) {
  constexpr int TM = KILN_LINEAR_TILE, TN = KILN_LINEAR_TILE, TK = KILN_LINEAR_TILE_K;
  // Two [TK][65] tiles in `smem`; +1 column of padding: the transposing stores hit distinct banks.
  float (*xs)[TM + 1] = reinterpret_cast<float (*)[TM + 1]>(smem);
  float (*ws)[TN + 1] = reinterpret_cast<float (*)[TN + 1]>(smem + TK * (TM + 1));
  const unsigned int tid = threadIdx.x;
  const unsigned int tx = tid % 16, ty = tid / 16;
  const unsigned int row0 = blockIdx.y * TM, col0 = blockIdx.x * TN;
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;

  for (unsigned int k0 = 0; k0 < in; k0 += TK) {
    // 64 x 32 elements of each operand, 8 per thread, consecutive threads along k.
    for (unsigned int e = tid; e < TM * TK; e += blockDim.x) {
      const unsigned int m = e / TK, kk = e % TK;
      const unsigned int k = k0 + kk;
      const unsigned int r = row0 + m, c = col0 + m;
      xs[kk][m] = (r < rows && k < in) ? to_f32(x[(size_t)r * in + k]) : 0.0f;
      ws[kk][m] = (c < outf && k < in) ? to_f32(w[KILN_W_ROW(T, c, in) + KILN_W_COL(T, k)]) : 0.0f;
    }
    __syncthreads();
#pragma unroll 8
    for (int kk = 0; kk < TK; ++kk) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = xs[kk][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = ws[kk][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = __fmaf_rn(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const unsigned int r = row0 + ty + 16 * i;
    if (r >= rows) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const unsigned int c = col0 + tx + 16 * j;
      if (c >= outf) continue;
      const float v = has_bias ? acc[i][j] + to_f32(bias[c]) : acc[i][j];
      const O o = from_f32<O>(v);
      out[(size_t)r * outf + c] = o;
      if constexpr (ARGMAX) {
        const unsigned long long key = argmax_key(to_f32(o), c);
        if (key != 0ull) atomicMax(argmax + r, key);
      }
    }
  }
}

// STATS (kiln_linear_*stats_*, Op::NormedLinear): the tensor-core GEMV path only; any other path
// traps (the plan checker's rule 14 plans none). GEMV_ONLY (kiln_linear[_argmax]_gemv_*): the same,
// for a launch the runtime knows takes that path (src/runtime/cuda/abi.rs `gemv_only_entry`).
template <typename T, typename O, bool ARGMAX, bool STATS = false, bool GEMV_ONLY = false>
__device__ void linear(const T* x, const T* w, const T* bias, O* out, unsigned long long* argmax, unsigned int rows,
                       unsigned int in, unsigned int outf, unsigned int has_bias_u, const float* sumsq = nullptr,
                       float eps = 0.0f) {
  __shared__ __align__(16) float smem[KILN_LINEAR_SMEM];
  __shared__ float inv_s[STATS ? KILN_LINEAR_GEMV_MAX_ROWS : 1];
  KILN_ABLATED(64);
  const bool has_bias = has_bias_u != 0 && bias != nullptr;
  if constexpr (IsHalf16<T>::value) {
    if (rows != 0 && rows <= KILN_LINEAR_GEMV_MAX_ROWS && in % 8 == 0 && aligned16(w) && aligned16(x)) {
      // Waits for the prior grids inside, after its first weight loads.
      if (blockDim.x == 32 * KILN_LINEAR_GEMV_MAX_WARPS) {
        linear_gemv_mma<T, O, KILN_LINEAR_GEMV_MAX_WARPS, ARGMAX, STATS>(x, w, bias, out, argmax, rows, in, outf,
                                                                         has_bias, smem, sumsq, eps, inv_s);
      } else {
        linear_gemv_mma<T, O, KILN_LINEAR_GEMV_WARPS, ARGMAX, STATS>(x, w, bias, out, argmax, rows, in, outf, has_bias,
                                                                     smem, sumsq, eps, inv_s);
      }
      return;
    }
  }
  if constexpr (STATS || GEMV_ONLY) __trap();
#if (KILN_GEMV_WALK) & 2
  // A walked grid (fewer blocks than tiles) is planned for the tensor-core path only.
  if (rows <= KILN_LINEAR_GEMV_MAX_ROWS && gridDim.x * KILN_LINEAR_GEMV_FEATURES < outf) __trap();
#endif
  allow_dependents();
  wait_prior_grids();
  if (rows == 0) return;
  if (rows > KILN_LINEAR_GEMV_MAX_ROWS) {
    linear_tiled<T, O, ARGMAX>(x, w, bias, out, argmax, rows, in, outf, has_bias, smem);
    return;
  }
  switch (rows) {
    case 1: linear_gemv_simt<T, O, 1, ARGMAX>(x, w, bias, out, argmax, in, outf, has_bias); return;
    case 2: linear_gemv_simt<T, O, 2, ARGMAX>(x, w, bias, out, argmax, in, outf, has_bias); return;
    case 3: linear_gemv_simt<T, O, 3, ARGMAX>(x, w, bias, out, argmax, in, outf, has_bias); return;
    case 4: linear_gemv_simt<T, O, 4, ARGMAX>(x, w, bias, out, argmax, in, outf, has_bias); return;
    case 5: linear_gemv_simt<T, O, 5, ARGMAX>(x, w, bias, out, argmax, in, outf, has_bias); return;
    case 6: linear_gemv_simt<T, O, 6, ARGMAX>(x, w, bias, out, argmax, in, outf, has_bias); return;
    case 7: linear_gemv_simt<T, O, 7, ARGMAX>(x, w, bias, out, argmax, in, outf, has_bias); return;
    default: linear_gemv_simt<T, O, 8, ARGMAX>(x, w, bias, out, argmax, in, outf, has_bias); return;
  }
}

}  // namespace kiln

// Each linear-family kernel comes in two variants: the default (KILN_LINEAR_BOUNDS: 256 or 512
// threads, up to 128 registers, two 256-thread blocks per SM) and `_o3`, compiled for three
// 256-thread blocks per SM (at most 80 registers) for grids whose waves that fills better
// (src/plan/geometry.rs `gemv_occupancy`; launched with 256 threads only). Same code, same results
// (linear_fused.cu's dense fused and gated GEMVs keep only the staged-norm tensor-core path:
// `dense_variant_covers`).
#define KILN_GEMV_DENSE_BOUNDS __launch_bounds__(32 * KILN_LINEAR_GEMV_WARPS, 3)

// INFIX: empty, or `gemv_` with GEMV_ONLY true (the GEMV-only entries below).
#define KILN_LINEAR_VARIANT(dt, T, outdt, O, SUFFIX, BOUNDS, INFIX, GEMV_ONLY)                      \
  extern "C" __global__ void BOUNDS kiln_linear_##INFIX##dt##_##outdt##SUFFIX(                      \
      const T* x, const T* weight, const T* bias, O* out, unsigned int rows, unsigned int in_features, \
      unsigned int out_features, unsigned int has_bias) {                                           \
    KILN_TRACE_BLOCK_END();                                                                                     \
    kiln::linear<T, O, false, false, GEMV_ONLY>(x, weight, bias, out, nullptr, rows, in_features, out_features, \
                                                has_bias);                                          \
  }
#define KILN_LINEAR_OUT_AS(dt, T, outdt, O, INFIX, GEMV_ONLY)                                       \
  KILN_LINEAR_VARIANT(dt, T, outdt, O, , KILN_LINEAR_BOUNDS, INFIX, GEMV_ONLY)                      \
  KILN_LINEAR_VARIANT(dt, T, outdt, O, _o3, KILN_GEMV_DENSE_BOUNDS, INFIX, GEMV_ONLY)
#define KILN_LINEAR_OUT(dt, T, outdt, O) KILN_LINEAR_OUT_AS(dt, T, outdt, O, , false)
KILN_LINEAR_OUT(f32, float, f32, float)
KILN_LINEAR_OUT(f16, __half, f16, __half)
KILN_LINEAR_OUT(f16, __half, f32, float)
KILN_LINEAR_OUT(bf16, __nv_bfloat16, bf16, __nv_bfloat16)
KILN_LINEAR_OUT(bf16, __nv_bfloat16, f32, float)

// kiln_linear_gemv_{dt}_{outdt}[_o3] and kiln_linear_argmax_gemv_{dt}_f32[_o3] (16-bit x only): the
// kernels above and below with only their tensor-core GEMV path (any other input traps), ~1/4 of the
// instructions: the runtime calls them for launches that take that path (src/runtime/cuda/abi.rs
// `gemv_only_entry`; KILN_GEMV_ONLY_ENTRY=0 off; session 55, H100: +4.1% / +1.1%). Same code, same bits.
// Session 54 measured the same cut for the o and down projections (kiln_fused_linear_res_*: +5.1%
// on the Qwen2.5-0.5B, +2.3% on the Llama-3.2-1B, an H100).
#define KILN_LINEAR_GEMV_OUT(dt, T, outdt, O) KILN_LINEAR_OUT_AS(dt, T, outdt, O, gemv_, true)
KILN_LINEAR_GEMV_OUT(f16, __half, f16, __half)
KILN_LINEAR_GEMV_OUT(f16, __half, f32, float)
KILN_LINEAR_GEMV_OUT(bf16, __nv_bfloat16, bf16, __nv_bfloat16)
KILN_LINEAR_GEMV_OUT(bf16, __nv_bfloat16, f32, float)

// kiln_linear_argmax_{dt}_f32[_o3](x, weight, bias, out, argmax_key, rows, in_features, out_features,
// has_bias): Op::LinearArgmax, the vocabulary projection of a device loop's step. The linear above
// (the same logits, bit for bit), and each row's largest kiln::argmax_key(out[r, n], n) folded into
// argmax_key[r] (u64, zero before the launch: `SampleAdvance` zeroes it after reading) by atomic max,
// in any order: the same key. CPU reference: the `Kernel::Linear { argmax: true }` arm of
// src/runtime/cpu.rs. Check on a GPU: kiln gate --checks 5 (greedy device loops == one-step decode,
// whose `sample` scans the logits).
#define KILN_LINEAR_ARGMAX_VARIANT(dt, T, SUFFIX, BOUNDS, INFIX, GEMV_ONLY)                         \
  extern "C" __global__ void BOUNDS kiln_linear_argmax_##INFIX##dt##_f32##SUFFIX(                    \
      const T* x, const T* weight, const T* bias, float* out, unsigned long long* argmax_key,         \
      unsigned int rows, unsigned int in_features, unsigned int out_features, unsigned int has_bias) { \
    KILN_TRACE_BLOCK_END();                                                                             \
    kiln::linear<T, float, true, false, GEMV_ONLY>(x, weight, bias, out, argmax_key, rows, in_features, \
                                                   out_features, has_bias);                          \
  }
#define KILN_LINEAR_ARGMAX_AS(dt, T, INFIX, GEMV_ONLY)                                              \
  KILN_LINEAR_ARGMAX_VARIANT(dt, T, , KILN_LINEAR_BOUNDS, INFIX, GEMV_ONLY)                         \
  KILN_LINEAR_ARGMAX_VARIANT(dt, T, _o3, KILN_GEMV_DENSE_BOUNDS, INFIX, GEMV_ONLY)
#define KILN_LINEAR_ARGMAX(dt, T) KILN_LINEAR_ARGMAX_AS(dt, T, , false)
KILN_LINEAR_ARGMAX(f32, float)
KILN_LINEAR_ARGMAX(f16, __half)
KILN_LINEAR_ARGMAX(bf16, __nv_bfloat16)
#define KILN_LINEAR_ARGMAX_GEMV(dt, T) KILN_LINEAR_ARGMAX_AS(dt, T, gemv_, true)
KILN_LINEAR_ARGMAX_GEMV(f16, __half)
KILN_LINEAR_ARGMAX_GEMV(bf16, __nv_bfloat16)

// kiln_linear_stats_bf16_f32[_o3](x, sumsq, weight, bias, out, rows, in_features, out_features,
// has_bias, eps) and kiln_linear_argmax_stats_bf16_f32[_o3](x, sumsq, weight, bias, out, argmax_key,
// ..): Op::NormedLinear (lower::fuse rewrite 10), the vocabulary projection of an output norm its
// producer carried: x is the producer's output times the norm weight (bf16), sumsq its f32 [rows, in / 8]
// sums of squares; out[r, n] = f32((x[r] . w[n]) * inv[r]) with inv[r] from sumsq (stats_inv_rows:
// ir::stats_inv's order), then the argmax key as kiln_linear_argmax. bf16 only (the rewrite's
// dtype). CPU reference: the `Kernel::Linear { stats }` arm of src/runtime/cpu.rs. Check on a GPU:
// python3 scripts/kernel_check.py --only out_norm
#define KILN_LINEAR_STATS_VARIANT(dt, T, SUFFIX, BOUNDS)                                              \
  extern "C" __global__ void BOUNDS kiln_linear_stats_##dt##_f32##SUFFIX(                            \
      const T* x, const float* sumsq, const T* weight, const T* bias, float* out, unsigned int rows,   \
      unsigned int in_features, unsigned int out_features, unsigned int has_bias, float eps) {        \
    KILN_TRACE_BLOCK_END();                                                                             \
    kiln::linear<T, float, false, true>(x, weight, bias, out, nullptr, rows, in_features, out_features, \
                                        has_bias, sumsq, eps);                                       \
  }                                                                                                   \
  extern "C" __global__ void BOUNDS kiln_linear_argmax_stats_##dt##_f32##SUFFIX(                     \
      const T* x, const float* sumsq, const T* weight, const T* bias, float* out,                     \
      unsigned long long* argmax_key, unsigned int rows, unsigned int in_features,                    \
      unsigned int out_features, unsigned int has_bias, float eps) {                                  \
    KILN_TRACE_BLOCK_END();                                                                          \
    kiln::linear<T, float, true, true>(x, weight, bias, out, argmax_key, rows, in_features,          \
                                       out_features, has_bias, sumsq, eps);                          \
  }
KILN_LINEAR_STATS_VARIANT(bf16, __nv_bfloat16, , KILN_LINEAR_BOUNDS)
KILN_LINEAR_STATS_VARIANT(bf16, __nv_bfloat16, _o3, KILN_GEMV_DENSE_BOUNDS)
