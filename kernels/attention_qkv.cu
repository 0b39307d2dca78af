// attention_qkv.cu: QKV-RoPE and the decode attention of its q in one launch (Op::QkvAttention,
// Kernel::QkvAttention; `lower::fuse` rewrite 11, plan-time knob KILN_FUSE_QKV_ATTN=1).
//
//   kiln_qkv_attention_bf16(x, norm_w, weight, bias, positions, cache_base, k_cache, v_cache, out,
//                           in_features, heads, kv_heads, head_dim, kv_rows, has_norm, eps,
//                           has_bias, early, scale, split_len, min_split_len, <rope scalars>,
//                           RopeFreqs by value)
//   One row (batch 1), bf16. weight is the packed QKV matrix [(heads + 2 kv_heads) * 64][in]
//   row-major (q rows, then k, then v), bias the packed biases (null without); norm_w null without
//   a norm. Writes K and V row p = positions[0] at cache_base[0] + p (the clusters of each KV
//   group's first head) and out [heads][64], the attention output.
//
// Check on a GPU: python3 scripts/kernel_check.py --only qkv_attention   (NVRTC build, no GPU:
// cargo test --test kernels_compile)
//
// Semantics (CPU reference, src/runtime/cpu.rs Kernel::QkvAttention): Kernel::QkvRope's
// projections, RoPE and KV write (q rounded to bf16 and rotated as it stores q_out), then
// Kernel::AttentionCluster's attention over that q (chunks of one head). The GPU sums each dot
// product in its own order (below), as every GEMV does; the rest is the two kernels' arithmetic.
//
// Algorithm (the design: bench/NOTES-decode.md, session 48; scripts/probe_qkv_attn_fold.py times it
// against kiln's qkv_rope -> attention_cluster chain and replays its index arithmetic in NumPy). Grid (heads, 8), one thread-block cluster of 8 (along y) per
// query head h (KV group g = h / (heads / kv_heads)), 256 threads (8 warps):
// - block rank s computes 24 rows of the packed matrix: q dims {4s..4s+3, 32+4s..32+4s+3} of head
//   h and the same k dims of group g (each rotary pair (i, i + 32) within one block), and v dims
//   8s..8s+7 of group g; on tensor cores, warp w taking 32-input groups w + 8c of all 24 rows
//   (KILN_QKV_ATTN_MMA below; in <= 1024). The group's clusters each compute the group's k / v
//   rows (the same bits: the same code on the same data), so their extra reads hit the L2, not
//   the DRAM;
// - before the wait: the block's rows and the norm weight into registers, the biases (into shared
//   memory); and, `early` (positions and cache bases predate the program), the angles of its 4
//   pairs and the K/V rows of its split other than row p (attention_split.cu's
//   KILN_ATTN_KV_EARLY loads). Not `early` (a launch right after a gather that released its
//   dependents first, src/plan/planner.rs plan_release_early), the wait comes after the weights,
//   before the position is read;
// - after it: x, its sum of squares, the dot products (h = bf16(x * norm_w); the warps' partial
//   sums added in warp order), the norm and bias as linear_fused.cu's post-norm epilogue, RoPE
//   from the rounded values, and an all-gather that gives every block q, k_p and v_p (pushed
//   into each block's shared memory, KILN_QKV_ATTN_PUSH below; or a cluster barrier and
//   distributed-shared-memory reads);
// - then attention_split.cu's split block for one head (8 lanes of 8 dims per key, 2 steps per
//   stage, online softmax; its warps merged after one barrier, KILN_QKV_ATTN_MERGE1, by 64 threads
//   one dim each, KILN_QKV_ATTN_MERGE64) with row p from shared memory, and its cluster merge.
//   That half is a copy of attention_split.cu's arithmetic rather than a call into it: the split
//   block loads row p from the cache after its wait, which here no block may do (another cluster
//   writes it), and threading a hook and a shared-memory row through the measured cluster kernel
//   would change its code before this one is measured. If this kernel becomes the default, the
//   two should share one device function.
// Shapes other than head_dim 64, in % 8 == 0, in <= 1024 and 8 splits write nothing (the planner
// plans no other: plan::geometry::qkv_attention_fits). sm_90+ (clusters); elsewhere it traps.
#include "attention_split.cuh"  // live_split_len, weight_of: the split attention's, the same bits
#include "rope.cuh"

#define KILN_QKV_ATTN_THREADS 256
#define KILN_QKV_ATTN_WARPS 8
#define KILN_QKV_ATTN_SPLITS 8  // = KILN_ATTN_CLUSTER_SPLITS, plan::ATTENTION_CLUSTER_SPLITS
#define KILN_QKV_ATTN_HD 64
#define KILN_QKV_ATTN_ROWS 24                           // packed rows per block
#define KILN_QKV_ATTN_RPW (KILN_QKV_ATTN_ROWS / KILN_QKV_ATTN_WARPS)  // per warp
#define KILN_QKV_ATTN_CHUNKS 4                          // 16-byte chunks per lane: in <= 1024
// Key steps per warp and pass (attention_split.cu's KILN_ATTN_SPLIT_UNROLL), each of 4 keys; the first pass's K/V
// rows are loaded before the wait. A -D for A/Bs (KILN_NVRTC_DEFINES=KILN_QKV_ATTN_UNROLL=1: half the loop's code).
#ifndef KILN_QKV_ATTN_UNROLL
#define KILN_QKV_ATTN_UNROLL 2
#endif
// Blocks per SM the registers must allow (__launch_bounds__): 2 (the default) caps them at 128 (no
// spills, sm_90a) so that a block of the o projection after it (105 registers x 256 threads) fits
// beside one of these and waits there, resident, while this kernel runs (scripts/coresidency.py);
// 1 keeps more in registers (202, no spills) but leaves o's 56 blocks to the 20 SMs these leave
// empty. Session 52 on an H100, kiln's 0.5B decode over four placements, three runs: 2 vs 1 +5.2%
// at context 128, -0.8% at 4096 (bench/results/2026-12-05-h100-decode-ab-s52.md). A -D for A/Bs
// (KILN_NVRTC_DEFINES=KILN_QKV_ATTN_MIN_BLOCKS=1; scripts/probe_qkv_attn_fold.py --kiln-define).
#ifndef KILN_QKV_ATTN_MIN_BLOCKS
#define KILN_QKV_ATTN_MIN_BLOCKS 2
#endif

// The two exchanges between the cluster's blocks (q, k_p, v_p to every block; each split's (acc, m, l)
// to rank 0). 1 (the default): each block pushes its values into the readers' shared memory with
// st.async, which completes a transaction count on the reader's mbarrier; a reader waits on its own
// mbarrier, so no fence sits between the producer's store and the consumer's read (common.cuh's push
// protocol: mbarriers published before the PDL wait by a relaxed cluster barrier, off the critical path;
// each block leaves once it has every push into it: KILN_QKV_ATTN_LAST_BARRIER below). 0: each block leaves
// its values in its own shared memory and the others read them after a cluster barrier
// (barrier.cluster.arrive.release: ptxas puts a GPU-scope fence, MEMBAR.ALL.GPU, in front of each of
// the kernel's three barriers, and the last one waits for the `out` store to reach the L2). The same
// values in the same order: the same bits. Session 53 on the H200, kiln's 0.5B decode over four
// placements, two rounds: 1 vs 0 +5.35% at context 128 (every placement), +2.78% at 4096; the same
// greedy ids, kernel_check and gate checks 1, 2, 5 pass (bench/results/2026-12-05-h200-decode-ab-s53.md).
// Its ncu (H100) had put 10% of the kernel's warp-stall samples on those fences' ERRBAR. A -D for A/Bs
// (KILN_NVRTC_DEFINES=KILN_QKV_ATTN_PUSH=0).
#ifndef KILN_QKV_ATTN_PUSH
#define KILN_QKV_ATTN_PUSH 1
#endif

// How a block computes its 24 rows' dot products after its wait. 1 (the default since session 62): warp w takes
// 32-input groups w + 8c (c < 4) of all 24 rows and sums them with mma.sync m16n8k16 (bf16, f32 accumulation): rows
// 0-15 as one A tile, rows 16-23 as another (its upper half zero), the normed x as B in every column; lane (g, t)
// holds 16 bytes of rows g, g + 8 and 16 + g at inputs 8t..8t+7 of each group (k permuted alike in A and B, as
// linear.cu's tensor-core GEMV does), so the weights feed the MMA as loaded and x * norm_w is rounded once per input.
// The warps' partial sums and sums of squares meet in shared memory after one block barrier, and warp 0 adds them in
// warp order, then the norm, the bias (copied to shared memory by cp.async before the wait) and the rounding, and
// RoPE as before. 0: warp w takes rows 3w..3w+2 over all of x, its lanes 16-byte chunks lane + 32c, so every warp
// unpacks x and the norm weight, squares x and rounds x * norm_w (done 8 times a block), and unpacks every weight
// to f32 for its FMAs. 1 and 0 differ in the last bits (summation order). Session 62 on H100s, kiln's 0.5B decode at
// context 128 over four placements, two rounds, two machines: +1.33% (bias by plain loads) and +0.70% (cp.async),
// every placement; kernel_check's qkv_attention checks and gate checks 1, 2, 5 pass
// (bench/results/2026-12-06-decode-s62.md). A -D for A/Bs (KILN_NVRTC_DEFINES=KILN_QKV_ATTN_MMA=0).
#ifndef KILN_QKV_ATTN_MMA
#define KILN_QKV_ATTN_MMA 1
#endif

// How a split block merges its 8 warps' (acc, m, l) after their keys. 1 (the default since session 63): every warp
// stores its (m, l) and its unscaled acc in shared memory, one block barrier, and warp 0's 8 writer lanes rescale the
// 8 accs (each product rounded, as the tree's stores round it) and add them in the tree's order
// (((w0 + w4) + (w2 + w6)) + ((w1 + w5) + (w3 + w7))): the same bits as 0. 0: attention_split.cu's warp tree (each
// warp's (m, l) through shared memory and a barrier, every warp rescales its acc, then three halving levels of a
// shared-memory store, a barrier, an add and a barrier: 7 block barriers). Session 63 on an H100, kiln's 0.5B decode at
// context 128 over four placements, two rounds: +0.34% (paired +0.37%), all 8 pairs won, the same greedy ids; gate
// checks 1, 2, 5 pass; traced, the merge after its first barrier 0.62 -> 0.48 us (bench/results/2026-12-06-decode-s63.md).
// A -D for A/Bs (KILN_NVRTC_DEFINES=KILN_QKV_ATTN_MERGE1=0).
#ifndef KILN_QKV_ATTN_MERGE1
#define KILN_QKV_ATTN_MERGE1 1
#endif

// Who merges a split block's 8 warps (KILN_QKV_ATTN_MERGE1 1 and KILN_QKV_ATTN_PUSH 1 only; the same products and sums
// in the same order: the same bits). 1 (the default since session 67): the 64 threads of warps 0 and 1, one dim each:
// (m, l) of every warp, its own dim's 8 rescaled accs and the tree's adds, then a 4-byte push of that dim to rank 0
// (thread 0 also pushes (m, l)): 8 products a thread, 24 shared loads. 0: warp 0's 8 writer lanes, 8 dims each, 64
// products a lane (~300 instructions of warp 0 alone). Session 65's H100 trace: the QKV-attention's last-ending block
// spent 1.9 us in that merge (its median block 0.54), past every other phase's median. Session 67 on an H100, kiln's
// 0.5B decode at context 128 over four placements, two rounds: 2061.7 -> 2087.4 tok/s (+1.25%, paired +1.25%), every
// placement; the same greedy ids; gate checks 1, 2, 5 26/26; traced, the step 545.7 -> 536.2 us, the launch 6.66 ->
// 6.34 us a layer, the last block's merge 1.89 -> 1.03 us (bench/results/2026-12-07-decode-s67.md).
// A -D for A/Bs (KILN_NVRTC_DEFINES=KILN_QKV_ATTN_MERGE64=0); off by itself where MERGE1 or PUSH is 0.
#ifndef KILN_QKV_ATTN_MERGE64
#define KILN_QKV_ATTN_MERGE64 (KILN_QKV_ATTN_MERGE1 && KILN_QKV_ATTN_PUSH)
#endif
#if KILN_QKV_ATTN_MERGE64 && !(KILN_QKV_ATTN_MERGE1 && KILN_QKV_ATTN_PUSH)
#error "KILN_QKV_ATTN_MERGE64 merges MERGE1's shared accs and pushes them"
#endif

// Two cuts in the push exchanges' chain (KILN_QKV_ATTN_PUSH 1 only; the same values in the same order: the same bits):
// - KILN_QKV_ATTN_PUSH_WARP0 1 (the default since session 64): warp 0, which computes `mine`, also makes all 48 pushes
//   of it (lanes 0-15 two each) after a __syncwarp; 0: warps 0 and 1 push after a block barrier.
// - KILN_QKV_ATTN_LAST_BARRIER 0 (the default since session 64): no cluster barrier at the end. Every push into a
//   block completes on that block's own mbarrier, which the block waits for before it reads: rank r has every push
//   into it (gath) before its split starts, and rank 0 every push (mslot) before its merge; no block reads another's
//   shared memory, and a push's source is registers. So no block is the target of a push once it is past its waits,
//   and each leaves then (ranks 1-7 right after their pushes to rank 0, rank 0 after its store) instead of rank 0
//   waiting out the barrier's round trip after its store, and the grid's end with it. 1: the relaxed last barrier.
// Session 64 on an H100, kiln's 0.5B decode at context 128 over four placements, two rounds, both cuts together
// against both off: 2027.8 -> 2069.4 tok/s (+2.05%, paired +2.06%), every placement (the slowest with them above the
// fastest without); the same greedy ids; gate checks 1, 2, 5 26/26; kernel_check's qkv_attention 40/40
// (bench/results/2026-12-06-decode-s64.md). A -D for A/Bs (KILN_NVRTC_DEFINES=KILN_QKV_ATTN_PUSH_WARP0=0,
// KILN_QKV_ATTN_LAST_BARRIER=1).
#ifndef KILN_QKV_ATTN_PUSH_WARP0
#define KILN_QKV_ATTN_PUSH_WARP0 1
#endif
#ifndef KILN_QKV_ATTN_LAST_BARRIER
#define KILN_QKV_ATTN_LAST_BARRIER 0
#endif

// Hooks for a probe (none is defined in kiln's build, so its code is what it was without them):
// scripts/probe_qkv_attn_o.cu includes this file with the o projection as a tail. With
// KILN_QKV_ATTN_EVERY_RANK_MERGES 1 every rank merges the splits and stores the head's output (the
// bf16 values `out` gets, as floats) in KILN_QKV_ATTN_ATT[tid]; KILN_QKV_ATTN_BEFORE_WAIT() runs
// just before the PDL wait, KILN_QKV_ATTN_AFTER_MERGE() at the kernel's end: after the last cluster
// barrier in the probe's KILN_QKV_ATTN_PUSH 0 build, which has one (both see the kernel's locals: h,
// s, tid, ...).
#ifndef KILN_QKV_ATTN_EVERY_RANK_MERGES
#define KILN_QKV_ATTN_EVERY_RANK_MERGES 0
#endif
#ifndef KILN_QKV_ATTN_BEFORE_WAIT
#define KILN_QKV_ATTN_BEFORE_WAIT()
#endif
#ifndef KILN_QKV_ATTN_AFTER_MERGE
#define KILN_QKV_ATTN_AFTER_MERGE()
#endif
#if KILN_QKV_ATTN_PUSH && KILN_QKV_ATTN_EVERY_RANK_MERGES
#error "KILN_QKV_ATTN_PUSH pushes the splits to rank 0 only"
#endif

namespace kiln {
namespace qkv_attn {

// Dim of rank s's j-th q (or k) row within its head (j < 8): the rotary pairs (j, j + 4) of a block.
__device__ __forceinline__ unsigned int qk_dim(unsigned int s, unsigned int j) { return j < 4 ? 4 * s + j : 32 + 4 * s + (j - 4); }
__device__ __forceinline__ void unpack_bf16x8(const uint4& r, float (&f)[8]) { unpack16<__nv_bfloat16>(r, f); }

__device__ void qkv_attention(const __nv_bfloat16* x, const __nv_bfloat16* norm_w, const __nv_bfloat16* w,
                              const __nv_bfloat16* bias, const int* positions, const int* cache_base,
                              __nv_bfloat16* k_cache, __nv_bfloat16* v_cache, __nv_bfloat16* out, unsigned int in,
                              unsigned int heads, unsigned int kv_heads, unsigned int head_dim, unsigned int kv_rows,
                              bool has_norm, float eps, bool has_bias, bool early, float scale, unsigned int planned_len,
                              unsigned int min_split_len, unsigned int rotary_dim, float theta, unsigned int scaling_kind,
                              float factor, float low, float high, unsigned int orig, const RopeFreqs& freqs) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr unsigned int HD = KILN_QKV_ATTN_HD, S = KILN_QKV_ATTN_SPLITS, NW = KILN_QKV_ATTN_WARPS;
  constexpr unsigned int RPW = KILN_QKV_ATTN_RPW, CH = KILN_QKV_ATTN_CHUNKS, U = KILN_QKV_ATTN_UNROLL;
  __shared__ float vals[KILN_QKV_ATTN_ROWS];  // the block's projections (+ bias, rounded)
  __shared__ __align__(16) float mine[KILN_QKV_ATTN_ROWS];  // its q, k (rotated) and v values, read by the cluster
  __shared__ __align__(16) __nv_bfloat16 full[3 * HD];  // q, k_p, v_p of the head
  __shared__ float2 ang[4];
  __shared__ float sh_m[NW], sh_l[NW];
#if KILN_QKV_ATTN_MERGE1
  __shared__ __align__(16) float sh_acc[NW][HD];  // every warp's acc (unscaled), merged by warp 0
#else
  __shared__ float sh_acc[NW / 2][HD];
#endif
#if !KILN_QKV_ATTN_PUSH
  __shared__ float slot[HD + 2];  // this split's (acc, m, l), merged by rank 0
#else
  constexpr unsigned int SLOT = HD + 4;  // (acc, m, l, 0, 0): 17 16-byte pushes
  __shared__ __align__(16) float gath[S][KILN_QKV_ATTN_ROWS];  // every rank's `mine`, pushed
  __shared__ __align__(16) float mslot[S][SLOT];               // every split's slot (rank 0's are read)
  __shared__ __align__(8) unsigned long long bars[2];          // [0] gath's, [1] mslot's
  const unsigned int bar_x = smem_addr(&bars[0]), bar_m = smem_addr(&bars[1]);
#endif
  const unsigned int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const unsigned int h = blockIdx.x, s = blockIdx.y;
  // Shapes the planner never plans: every block of the cluster returns alike (no barrier reached).
  if (head_dim != HD || kv_heads == 0 || heads % kv_heads != 0 || in % 8 != 0 || in > 32 * CH * 8 || h >= heads ||
      gridDim.y != S || planned_len == 0) {
    wait_prior_grids();
    return;
  }
  const unsigned int group = heads / kv_heads, g = h / group;
  const size_t nq = (size_t)heads * HD, kvd = (size_t)kv_heads * HD;
  // ---- before the wait (the weights; when early, the rest up to the second wait below) ---------
#if KILN_QKV_ATTN_PUSH
  if (tid == 0) {
    mbar_init(bar_x);
    mbar_init(bar_m);
    fence_mbarrier_init();
    mbar_expect(bar_x, S * KILN_QKV_ATTN_ROWS * 4);
    mbar_expect(bar_m, blockIdx.y == 0 ? S * SLOT * 4 : 0u);
  }
  cluster_arrive_relaxed();  // waited on before the first push: every block's mbarriers are live
#endif
  int p = 0;
  long long base_t = 0;
  if (early) {
    p = __ldcg(positions);
    base_t = __ldcg(cache_base);
  }
  const unsigned int n8 = in / 8;
  uint4 wr[RPW][CH], nr[CH];
#if KILN_QKV_ATTN_MMA
  // Packed row of the block's row r (< 24): q dims, k dims, v dims (`vals` keeps this order).
  auto row_of = [&](unsigned int r) -> size_t {
    return r < 8 ? h * HD + qk_dim(s, r) : r < 16 ? nq + g * HD + qk_dim(s, r - 8) : nq + kvd + g * HD + 8 * s + (r - 16);
  };
  // Lane (gq, tq): rows gq, gq + 8, 16 + gq; 16-byte chunk k8 = 4 (warp + 8c) + tq of x (inputs 8 k8..8 k8 + 7).
  const unsigned int gq = lane >> 2, tq = lane & 3;
#pragma unroll
  for (unsigned int i = 0; i < RPW; ++i) {
    const __nv_bfloat16* wp = w + row_of(i == 0 ? gq : i == 1 ? gq + 8 : 16 + gq) * in;
#pragma unroll
    for (unsigned int c = 0; c < CH; ++c) {
      const unsigned int k = 4 * (warp + 8 * c) + tq;
      wr[i][c] = k < n8 ? load16_stream(wp + 8 * k) : make_uint4(0, 0, 0, 0);
    }
  }
#pragma unroll
  for (unsigned int c = 0; c < CH; ++c) {
    const unsigned int k = 4 * (warp + 8 * c) + tq;
    nr[c] = has_norm && k < n8 ? load16_stream(norm_w + 8 * k) : make_uint4(0, 0, 0, 0);
  }
  // The rows' biases, read by warp 0 after the block barrier below: five runs of the packed bias (q dims 4s..4s+3 and
  // 32+4s..+3, the same k dims, v dims 8s..8s+7) copied by cp.async, so that no thread waits for them before the PDL
  // wait (a plain load and store held warp 0 there: its blocks reached the wait 0.4 us later, session 62's trace).
  __shared__ __align__(16) __nv_bfloat16 bsh[KILN_QKV_ATTN_ROWS];
  const bool bias_async = has_bias && (reinterpret_cast<unsigned long long>(bias) & 15) == 0;
  if (bias_async && tid < 5) {
    const unsigned int r0 = 4 * tid, dst = smem_addr(&bsh[r0]);
    const __nv_bfloat16* src = bias + row_of(r0);
    if (tid < 4) {
      cp_async_ca<8>(dst, src);
    } else {
      cp_async_ca<16>(dst, src);
    }
    cp_async_commit();
  }
#else
  float br[RPW];
#pragma unroll
  for (unsigned int i = 0; i < RPW; ++i) {
    const unsigned int r = RPW * warp + i;
    const size_t row = r < 8 ? h * HD + qk_dim(s, r) : r < 16 ? nq + g * HD + qk_dim(s, r - 8) : nq + kvd + g * HD + 8 * s + (r - 16);
    const __nv_bfloat16* wp = w + row * in;
#pragma unroll
    for (unsigned int c = 0; c < CH; ++c) {
      const unsigned int k = lane + 32 * c;
      wr[i][c] = k < n8 ? load16_stream(wp + 8 * k) : make_uint4(0, 0, 0, 0);
    }
    br[i] = has_bias ? __bfloat162float(bias[row]) : 0.0f;
  }
#pragma unroll
  for (unsigned int c = 0; c < CH; ++c) {
    const unsigned int k = lane + 32 * c;
    nr[c] = has_norm && k < n8 ? load16_stream(norm_w + 8 * k) : make_uint4(0, 0, 0, 0);
  }
#endif
  if (!early) {  // weights never change: loaded above either way
    wait_prior_grids();
    p = positions[0];
    base_t = cache_base[0];
  }
  if (tid < 4) {
    const RopeAngle a = rope_angle_or(rope_table(freqs, rotary_dim), p, 4 * s + tid, rotary_dim, theta, scaling_kind, factor,
                                      low, high, orig);
    ang[tid] = make_float2(a.s, a.c);
  }
  // The split: attention_cluster's (attention_split.cu) for a chunk of one head.
  const unsigned int pi = lane >> 3, d0 = (lane & 7) * 8;
  const unsigned int split_len = live_split_len(p, S, planned_len, min_split_len);
  const unsigned int n_active = p < 0 ? 0u : min((unsigned int)p / split_len + 1u, S);
  long long base = base_t, lo = (long long)s * split_len, hi = min(lo + (long long)split_len, (long long)p + 1);
  if (base < 0) {
    base = 0;
    hi = lo;  // no readable row: an empty split
  } else {
    hi = min(hi, (long long)kv_rows - base);
  }
  const bool active = s < n_active;
  const long long per_warp = U * 4, stride = NW * per_warp;
  const __nv_bfloat16* kp = k_cache + (size_t)base * kvd + g * HD + d0;
  const __nv_bfloat16* vp = v_cache + (size_t)base * kvd + g * HD + d0;
  long long j0 = lo + warp * per_warp;
  uint4 kr[U], vr[U];
  // K and V rows of the U steps from `first` (zeros past the split's end and at row p, which
  // this launch computes).
  auto load_steps = [&](long long first, uint4(&kk)[U], uint4(&vv)[U]) {
#pragma unroll
    for (unsigned int u = 0; u < U; ++u) {
      const long long j = first + u * 4 + pi;
      if (active && j < hi && j != p) {
        kk[u] = load16_stream_act(kp + (size_t)j * kvd);
        vv[u] = load16_stream_act(vp + (size_t)j * kvd);
      } else {
        kk[u] = make_uint4(0, 0, 0, 0);
        vv[u] = make_uint4(0, 0, 0, 0);
      }
    }
  };
  load_steps(j0, kr, vr);
  KILN_QKV_ATTN_BEFORE_WAIT();
  if (early) wait_prior_grids();
  allow_dependents();

  // ---- after the wait: x, the block's rows, RoPE ---------------------------------------------
  uint4 xr[CH];
#pragma unroll
  for (unsigned int c = 0; c < CH; ++c) {
#if KILN_QKV_ATTN_MMA
    const unsigned int k = 4 * (warp + 8 * c) + tq;
#else
    const unsigned int k = lane + 32 * c;
#endif
    xr[c] = k < n8 ? load16_act(x + 8 * k) : make_uint4(0, 0, 0, 0);
  }
  // Trace builds: when thread 0's own loads arrived (its last weight chunk, its K/V rows, its x).
  KILN_TRACE_PHASE_AFTER(0, wr[RPW - 1][CH - 1].w);
  KILN_TRACE_PHASE_AFTER(1, kr[0].x ^ vr[U - 1].w);
  KILN_TRACE_PHASE_AFTER(2, xr[CH - 1].w ^ xr[0].x);
#if KILN_QKV_ATTN_MMA
  __shared__ float part[NW][KILN_QKV_ATTN_ROWS], ssw[NW];  // each warp's partial dot products and sum of squares
  {
    float ss = 0.0f, d0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, d1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (unsigned int c = 0; c < CH; ++c) {
      float xf[8], nf[8];
      unpack_bf16x8(xr[c], xf);
      unpack_bf16x8(nr[c], nf);
      unsigned int b[4];  // x * norm_w rounded to bf16 (h), as pairs: inputs (0, 1), (2, 3), (4, 5), (6, 7)
#pragma unroll
      for (int e = 0; e < 8; e += 2) {
        ss = __fmaf_rn(xf[e], xf[e], ss);
        ss = __fmaf_rn(xf[e + 1], xf[e + 1], ss);
        const __nv_bfloat162 hp = has_norm ? __floats2bfloat162_rn(xf[e] * nf[e], xf[e + 1] * nf[e + 1])
                                           : __floats2bfloat162_rn(xf[e], xf[e + 1]);
        b[e / 2] = *reinterpret_cast<const unsigned int*>(&hp);
      }
      // MMA k positions (2t, 2t + 1) / (2t + 8, 2t + 9) hold inputs (0, 1) / (2, 3) of the lane's 8, then (4, 5) / (6, 7).
      const uint4 w0 = wr[0][c], w1 = wr[1][c], w2 = wr[2][c];
      mma_m16n8k16<__nv_bfloat16>(d0, w0.x, w1.x, w0.y, w1.y, b[0], b[1]);
      mma_m16n8k16<__nv_bfloat16>(d0, w0.z, w1.z, w0.w, w1.w, b[2], b[3]);
      mma_m16n8k16<__nv_bfloat16>(d1, w2.x, 0u, w2.y, 0u, b[0], b[1]);
      mma_m16n8k16<__nv_bfloat16>(d1, w2.z, 0u, w2.w, 0u, b[2], b[3]);
    }
    ss += __shfl_xor_sync(0xffffffffu, ss, 1);  // the warp's inputs: the 4 lanes of a row group cover them
    ss += __shfl_xor_sync(0xffffffffu, ss, 2);
    if (tq == 0) {  // column 0 (every column holds the same sums)
      part[warp][gq] = d0[0];
      part[warp][gq + 8] = d0[2];
      part[warp][16 + gq] = d1[0];
    }
    if (lane == 0) ssw[warp] = ss;
  }
  if (bias_async && tid < 5) {
    cp_async_wait<0>();
  } else if (has_bias && !bias_async && tid < KILN_QKV_ATTN_ROWS) {
    bsh[tid] = bias[row_of(tid)];  // a bias not 16-byte aligned (the planner aligns every buffer to 256 bytes)
  }
  __syncthreads();
  KILN_TRACE_PHASE(9);  // every warp's partial sums in shared memory (thread 0's barrier return)
  if (tid < KILN_QKV_ATTN_ROWS) {  // warp 0: the warps' sums in warp order, the norm, the bias
    float d = 0.0f, ss = 0.0f;
#pragma unroll
    for (unsigned int wv = 0; wv < NW; ++wv) {
      d += part[wv][tid];
      ss += ssw[wv];
    }
    const float inv = has_norm ? 1.0f / sqrtf(ss / (float)in + eps) : 1.0f;
    vals[tid] = round_to<__nv_bfloat16>(__fmul_rn(d, inv) + (has_bias ? __bfloat162float(bsh[tid]) : 0.0f));
  }
  __syncwarp();  // RoPE below reads `vals` in warp 0 only
#else
  float ss = 0.0f, dot[RPW];
#pragma unroll
  for (unsigned int i = 0; i < RPW; ++i) dot[i] = 0.0f;
#pragma unroll
  for (unsigned int c = 0; c < CH; ++c) {
    float xf[8], nf[8], hf[8];
    unpack_bf16x8(xr[c], xf);
    unpack_bf16x8(nr[c], nf);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      ss = __fmaf_rn(xf[e], xf[e], ss);
      hf[e] = has_norm ? round_to<__nv_bfloat16>(xf[e] * nf[e]) : xf[e];
    }
#pragma unroll
    for (unsigned int i = 0; i < RPW; ++i) {
      float wf[8];
      unpack_bf16x8(wr[i][c], wf);
#pragma unroll
      for (int e = 0; e < 8; ++e) dot[i] = __fmaf_rn(hf[e], wf[e], dot[i]);
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    ss += __shfl_xor_sync(0xffffffffu, ss, o);
#pragma unroll
    for (unsigned int i = 0; i < RPW; ++i) dot[i] += __shfl_xor_sync(0xffffffffu, dot[i], o);
  }
  const float inv = has_norm ? 1.0f / sqrtf(ss / (float)in + eps) : 1.0f;
  if (lane == 0) {
#pragma unroll
    for (unsigned int i = 0; i < RPW; ++i) vals[RPW * warp + i] = round_to<__nv_bfloat16>(__fmul_rn(dot[i], inv) + br[i]);
  }
  __syncthreads();
#endif
  KILN_TRACE_PHASE(3);  // x read, the block's rows' dot products and norm (trace builds only)
  if (tid < 4 || (tid >= 8 && tid < 12)) {  // q pairs (tid), k pairs (tid - 8)
    const unsigned int j = tid & 3, o = tid & 8;
    const RopeAngle a{ang[j].x, ang[j].y};
    const float2 r = rope_rotate(vals[o + j], vals[o + j + 4], a);
    mine[o + j] = round_to<__nv_bfloat16>(r.x);
    mine[o + j + 4] = round_to<__nv_bfloat16>(r.y);
  } else if (tid >= 16 && tid < 24) {
    mine[tid] = vals[tid];
  }
#if KILN_QKV_ATTN_PUSH
#if KILN_QKV_ATTN_PUSH_WARP0
  __syncwarp();  // warp 0 wrote `mine` and pushes it
  cluster_wait();
  if (warp == 0) {
#pragma unroll
    for (unsigned int i = lane; i < S * (KILN_QKV_ATTN_ROWS / 4); i += 32) {  // rank i / 6 gets chunk i % 6 in gath[s]
      const unsigned int to = i / (KILN_QKV_ATTN_ROWS / 4), c = i % (KILN_QKV_ATTN_ROWS / 4);
      push16(remote_addr(smem_addr(&gath[s][4 * c]), to), *reinterpret_cast<const float4*>(&mine[4 * c]), remote_addr(bar_x, to));
    }
  }
#else
  __syncthreads();
  cluster_wait();
  if (tid < S * (KILN_QKV_ATTN_ROWS / 4)) {  // rank tid / 6 gets chunk tid % 6 of `mine` in gath[s]
    const unsigned int to = tid / (KILN_QKV_ATTN_ROWS / 4), c = tid % (KILN_QKV_ATTN_ROWS / 4);
    push16(remote_addr(smem_addr(&gath[s][4 * c]), to), *reinterpret_cast<const float4*>(&mine[4 * c]), remote_addr(bar_x, to));
  }
#endif
  if (tid < 3 * HD) {  // q, k_p, v_p of the head from the blocks that computed them
    const unsigned int which = tid / HD, d = tid % HD;
    const unsigned int rank = which < 2 ? (d % 32) / 4 : d / 8;
    const unsigned int idx = which < 2 ? 8 * which + d % 4 + (d >= 32 ? 4 : 0) : 16 + d % 8;
    mbar_wait0(bar_x);
    full[tid] = __float2bfloat16_rn(gath[rank][idx]);
  }
  KILN_TRACE_PHASE(4);  // the cluster's q, k_p, v_p arrived (thread 0's share)
#else
  cluster_sync();
  if (tid < 3 * HD) {  // q, k_p, v_p of the head from the blocks that computed them
    const unsigned int which = tid / HD, d = tid % HD;
    const unsigned int rank = which < 2 ? (d % 32) / 4 : d / 8;
    const unsigned int idx = which < 2 ? 8 * which + d % 4 + (d >= 32 ? 4 : 0) : 16 + d % 8;
    full[tid] = __float2bfloat16_rn(*cluster_map(&mine[idx], rank));
  }
#endif
  // K and V row p for later steps: the clusters of each group's first head, each rank its dims.
  if (h % group == 0 && tid < 16 && p >= 0 && base_t >= 0 && base_t + p < (long long)kv_rows) {
    const size_t row = (size_t)(base_t + p) * kvd + g * HD;
    if (tid < 8) {
      k_cache[row + qk_dim(s, tid)] = __float2bfloat16_rn(mine[8 + tid]);
    } else {
      v_cache[row + 8 * s + (tid - 8)] = __float2bfloat16_rn(mine[16 + tid - 8]);
    }
  }
  __syncthreads();

  // ---- attention_split.cu's split block (one head), row p from `full` -------------------------
  if (active) {
    float qv[8], acc[8], m = -inf(), l = 0.0f;
    unpack_bf16x8(*reinterpret_cast<const uint4*>(&full[d0]), qv);
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[e] = 0.0f;
    const uint4 kfresh = *reinterpret_cast<const uint4*>(&full[HD + d0]);
    const uint4 vfresh = *reinterpret_cast<const uint4*>(&full[2 * HD + d0]);
#pragma unroll
    for (unsigned int u = 0; u < U; ++u) {
      if (j0 + u * 4 + pi == p && p < hi) {
        kr[u] = kfresh;
        vr[u] = vfresh;
      }
    }
    // Trace builds: when every lane of warp 0 holds its first K and V rows (loaded before the wait).
    KILN_TRACE_PHASE_AFTER(8, __reduce_or_sync(0xffffffffu, kr[0].x ^ kr[U - 1].y ^ vr[0].z ^ vr[U - 1].w));
    for (; j0 < hi; j0 += stride) {
      uint4 kn[U], vn[U];
      const long long nxt = j0 + stride < hi ? j0 + stride : hi;
      load_steps(nxt, kn, vn);
#pragma unroll
      for (unsigned int u = 0; u < U; ++u) {
        if (nxt + u * 4 + pi == p && p < hi) {
          kn[u] = kfresh;
          vn[u] = vfresh;
        }
      }
      float sc[U];
#pragma unroll
      for (unsigned int u = 0; u < U; ++u) {
        float kf[8];
        unpack_bf16x8(kr[u], kf);
        float d = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) d = __fmaf_rn(qv[e], kf[e], d);
        sc[u] = d;
      }
      // Sum over the 8 lanes of each key.
#pragma unroll
      for (int o = 4; o > 0; o >>= 1)
#pragma unroll
        for (unsigned int u = 0; u < U; ++u) sc[u] += __shfl_xor_sync(0xffffffffu, sc[u], o);
#pragma unroll
      for (unsigned int u = 0; u < U; ++u) sc[u] = j0 + u * 4 + pi < hi ? scale * sc[u] : -inf();
      float mx = m;
#pragma unroll
      for (unsigned int u = 0; u < U; ++u) mx = fmaxf(mx, sc[u]);
      const bool any = mx != -inf();
      const float corr = any ? weight_of(m, mx) : 1.0f;
      l *= corr;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[e] *= corr;
#pragma unroll
      for (unsigned int u = 0; u < U; ++u) {
        sc[u] = any ? weight_of(sc[u], mx) : 0.0f;
        l += sc[u];
      }
      m = any ? mx : m;
#pragma unroll
      for (unsigned int u = 0; u < U; ++u) {
        float vf[8];
        unpack_bf16x8(vr[u], vf);
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[e] = __fmaf_rn(sc[u], vf[e], acc[e]);
      }
#pragma unroll
      for (unsigned int u = 0; u < U; ++u) {
        kr[u] = kn[u];
        vr[u] = vn[u];
      }
    }
    KILN_TRACE_PHASE(7);  // thread 0's keys done (the online softmax), before the merges
    // The warp's position groups (lanes l, l ^ 8, l ^ 16, l ^ 24), then across warps.
    for (unsigned int o = 8; o < 32; o <<= 1) {
      const float mo = __shfl_xor_sync(0xffffffffu, m, o);
      const float lo2 = __shfl_xor_sync(0xffffffffu, l, o);
      const float mx = fmaxf(m, mo);
      const float a = weight_of(m, mx), b = weight_of(mo, mx);
      l = a * l + b * lo2;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float ao = __shfl_xor_sync(0xffffffffu, acc[e], o);
        acc[e] = a * acc[e] + b * ao;
      }
      m = mx;
    }
    const bool writer = pi == 0;
    if (lane == 0) {
      sh_m[warp] = m;
      sh_l[warp] = l;
    }
#if KILN_QKV_ATTN_MERGE1
    if (writer) {
      *reinterpret_cast<float4*>(&sh_acc[warp][d0]) = make_float4(acc[0], acc[1], acc[2], acc[3]);
      *reinterpret_cast<float4*>(&sh_acc[warp][d0 + 4]) = make_float4(acc[4], acc[5], acc[6], acc[7]);
    }
#endif
    __syncthreads();
    KILN_TRACE_PHASE(10);  // every warp's (m, l) (and, MERGE1, its acc) in shared memory
    float big_m = -inf(), big_l = 0.0f;
#if KILN_QKV_ATTN_MERGE64
    float merged = 0.0f;  // dim tid's sum (tid < 64)
    if (tid < HD) {  // the tree's sums for dim tid, in its order
#pragma unroll
      for (unsigned int wv = 0; wv < NW; ++wv) big_m = fmaxf(big_m, sh_m[wv]);
      float t[NW];
#pragma unroll
      for (unsigned int wv = 0; wv < NW; ++wv) {
        const float own = weight_of(sh_m[wv], big_m);
        big_l += own * sh_l[wv];
        t[wv] = __fmul_rn(sh_acc[wv][tid], own);  // rounded, as the tree
      }
#pragma unroll
      for (unsigned int half = NW / 2; half > 0; half >>= 1)
#pragma unroll
        for (unsigned int wv = 0; wv < half; ++wv) t[wv] += t[wv + half];
      merged = t[0];
    }
#elif KILN_QKV_ATTN_MERGE1
    if (warp == 0 && writer) {  // the tree's sums below, in its order, by warp 0's writer lanes alone
#pragma unroll
      for (unsigned int wv = 0; wv < NW; ++wv) big_m = fmaxf(big_m, sh_m[wv]);
      float own[NW];
#pragma unroll
      for (unsigned int wv = 0; wv < NW; ++wv) {
        own[wv] = weight_of(sh_m[wv], big_m);
        big_l += own[wv] * sh_l[wv];
      }
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        float t[NW];
#pragma unroll
        for (unsigned int wv = 0; wv < NW; ++wv) t[wv] = __fmul_rn(sh_acc[wv][d0 + e], own[wv]);  // rounded, as the tree
#pragma unroll
        for (unsigned int half = NW / 2; half > 0; half >>= 1)
#pragma unroll
          for (unsigned int wv = 0; wv < half; ++wv) t[wv] += t[wv + half];
        acc[e] = t[0];
      }
    }
#else
#pragma unroll
    for (unsigned int wv = 0; wv < NW; ++wv) big_m = fmaxf(big_m, sh_m[wv]);
#pragma unroll
    for (unsigned int wv = 0; wv < NW; ++wv) big_l += weight_of(sh_m[wv], big_m) * sh_l[wv];
    const float own = weight_of(m, big_m);
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[e] *= own;
#pragma unroll
    for (unsigned int half = NW / 2; half > 0; half >>= 1) {
      if (writer && warp >= half && warp < 2 * half) {
#pragma unroll
        for (int e = 0; e < 8; ++e) sh_acc[warp - half][d0 + e] = acc[e];
      }
      __syncthreads();
      if (writer && warp < half) {
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[e] += sh_acc[warp][d0 + e];
      }
      __syncthreads();
    }
#endif
    KILN_TRACE_PHASE(5);  // the split's attention and its warps' merge
#if KILN_QKV_ATTN_MERGE64
    if (tid < HD) {
      const unsigned int bar = remote_addr(bar_m, 0);
      push4(remote_addr(smem_addr(&mslot[s][tid]), 0), merged, bar);
      if (tid == 0) push16(remote_addr(smem_addr(&mslot[s][HD]), 0), make_float4(big_m, big_l, 0.0f, 0.0f), bar);
    }
#else
    if (warp == 0 && writer) {
#if KILN_QKV_ATTN_PUSH
      const unsigned int to = remote_addr(smem_addr(&mslot[s][d0]), 0), bar = remote_addr(bar_m, 0);
      push16(to, make_float4(acc[0], acc[1], acc[2], acc[3]), bar);
      push16(to + 16, make_float4(acc[4], acc[5], acc[6], acc[7]), bar);
      if (lane == 0) push16(remote_addr(smem_addr(&mslot[s][HD]), 0), make_float4(big_m, big_l, 0.0f, 0.0f), bar);
#else
#pragma unroll
      for (int e = 0; e < 8; ++e) slot[d0 + e] = acc[e];
      if (lane == 0) {
        slot[HD] = big_m;
        slot[HD + 1] = big_l;
      }
#endif
    }
#endif
  }
#if KILN_QKV_ATTN_PUSH
  else if (warp == 0 && (lane >> 3) == 0) {  // an empty split: its bytes still complete rank 0's count (unread)
    const unsigned int to = remote_addr(smem_addr(&mslot[s][d0]), 0), bar = remote_addr(bar_m, 0);
    push16(to, make_float4(0.0f, 0.0f, 0.0f, 0.0f), bar);
    push16(to + 16, make_float4(0.0f, 0.0f, 0.0f, 0.0f), bar);
    if (lane == 0) push16(remote_addr(smem_addr(&mslot[s][HD]), 0), make_float4(-inf(), 0.0f, 0.0f, 0.0f), bar);
  }
#else
  cluster_sync();
#endif
  if ((s == 0 || KILN_QKV_ATTN_EVERY_RANK_MERGES) && tid < HD) {  // attention_cluster's merge, in split order
    float ms[S], as[S], ls[S], big_m = -inf(), num = 0.0f, den = 0.0f;
#if KILN_QKV_ATTN_PUSH
    mbar_wait0(bar_m);
#endif
    KILN_TRACE_PHASE(6);  // rank 0: every split's (acc, m, l) arrived
#pragma unroll
    for (unsigned int r = 0; r < S; ++r) {
      if (r < n_active) {
#if KILN_QKV_ATTN_PUSH
        const float* st = mslot[r];
#else
        const float* st = cluster_map(slot, r);
#endif
        ms[r] = st[HD];
        as[r] = st[tid];
        ls[r] = st[HD + 1];
      } else {
        ms[r] = -inf();
        as[r] = 0.0f;
        ls[r] = 0.0f;
      }
    }
#pragma unroll
    for (unsigned int r = 0; r < S; ++r) big_m = fmaxf(big_m, ms[r]);
    KILN_TRACE_PHASE_AFTER(11, __float_as_uint(big_m));  // rank 0: the splits' (m) read and their max, before the sums
    if (big_m != -inf()) {
#pragma unroll
      for (unsigned int r = 0; r < S; ++r) {
        if (r < n_active) {
          const float wt = weight_of(ms[r], big_m);
          num += wt * as[r];
          den += wt * ls[r];
        }
      }
    }
#if KILN_QKV_ATTN_EVERY_RANK_MERGES
    const __nv_bfloat16 a = __float2bfloat16_rn(den > 0.0f ? num / den : 0.0f);
    if (s == 0) out[(size_t)h * HD + tid] = a;
    KILN_QKV_ATTN_ATT[tid] = __bfloat162float(a);
#else
    out[(size_t)h * HD + tid] = __float2bfloat16_rn(den > 0.0f ? num / den : 0.0f);
#endif
  }
#if KILN_QKV_ATTN_PUSH
#if KILN_QKV_ATTN_LAST_BARRIER
  cluster_arrive_relaxed();  // no block leaves while a push may still target the cluster; no fence
  cluster_wait();
#endif
#else
  cluster_sync();
#endif
  KILN_QKV_ATTN_AFTER_MERGE();
#else
  __trap();  // needs thread-block clusters (sm_90+); such a plan refuses to load before sm_90
#endif
}

}  // namespace qkv_attn
}  // namespace kiln

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define KILN_QKV_ATTN_CLUSTER_ATTR __cluster_dims__(1, KILN_QKV_ATTN_SPLITS, 1)
#else
#define KILN_QKV_ATTN_CLUSTER_ATTR
#endif
extern "C" __global__ void __launch_bounds__(KILN_QKV_ATTN_THREADS, KILN_QKV_ATTN_MIN_BLOCKS) KILN_QKV_ATTN_CLUSTER_ATTR kiln_qkv_attention_bf16(
    const __nv_bfloat16* x, const __nv_bfloat16* norm_w, const __nv_bfloat16* weight, const __nv_bfloat16* bias,
    const int* positions, const int* cache_base, __nv_bfloat16* k_cache, __nv_bfloat16* v_cache, __nv_bfloat16* out,
    unsigned int in_features, unsigned int heads, unsigned int kv_heads, unsigned int head_dim, unsigned int kv_rows,
    unsigned int has_norm, float eps, unsigned int has_bias, unsigned int early, float scale, unsigned int split_len,
    unsigned int min_split_len, unsigned int rotary_dim, unsigned int interleaved, float theta, unsigned int scaling_kind,
    float factor, float low_freq_factor, float high_freq_factor, unsigned int original_max_position,
    const __grid_constant__ kiln::RopeFreqs freqs) {
  KILN_TRACE_BLOCK_END();
  (void)interleaved;  // half-split pairs only (the planner's rule)
  kiln::qkv_attn::qkv_attention(x, norm_w, weight, bias, positions, cache_base, k_cache, v_cache, out, in_features, heads,
                                kv_heads, head_dim, kv_rows, has_norm != 0, eps, has_bias != 0, early != 0, scale, split_len,
                                min_split_len, rotary_dim, theta, scaling_kind, factor, low_freq_factor, high_freq_factor,
                                original_max_position, freqs);
}
