// sample.cu: kiln_sample_f32(logits, temperature, top_k, top_p, seed, counter, out, rows, vocab), and
// kiln_sample_advance_f32 (the sampler and advance.cu's step in one launch: see it, at the end)
//
// Check on a GPU: python3 scripts/kernel_check.py --only sample   (NVRTC build, no GPU:
// cargo test --test kernels_compile)
//
// Semantics (Op::Sample): one token per row of logits (f32 [rows, vocab]), exactly the steps
// of `sampling::sample_row` (src/runtime/sampling.rs), with the same generator:
// 1. temperature <= 0 or not finite: argmax, lowest index on ties, NaN never wins.
// 2. w_i = exp((l_i - max) / temperature) in f32.
// 3. candidates sorted by (w descending, index ascending); keep the first top_k (all when
//    top_k <= 0 or >= vocab).
// 4. if 0 < top_p < 1: keep the shortest prefix whose weight reaches top_p of the kept total.
// 5. u = uniform(seed, counter) (splitmix64, top 24 bits / 2^24); walk the kept prefix
//    accumulating weights until the sum exceeds u * total; that candidate is the token (the
//    last one if rounding runs out).
//
// CPU reference: `sampling::sample_row(logits[r], temperature[r], top_k[r], top_p[r], seed[r],
// counter[r])` for each row r.
//
// Algorithm (a cluster of 8 blocks of 1024 threads per row: all 8 share step 1's argmax, then
// block 0 goes on alone; never materializes the whole sorted vocab):
// - Every candidate has a distinct 64-bit key `w_bits << IB | (vocab - 1 - i)`: keys order
//   exactly as step 3 does (w >= 0, so its bits order as the float; the low part breaks ties
//   by index). The key is recomputed from the logits in each pass (logits stay in L2).
// - The top_k set is the keys >= a threshold found by radix select (8-bit digits, most
//   significant first, counts per digit in shared memory; stops as soon as a whole digit bin
//   is taken).
// - Exact path: when the kept set has at most KILN_SAMPLE_CAP candidates (any top_k up to
//   4096, or vocab <= 4096), they are collected in shared memory, bitonic-sorted, and one
//   thread runs steps 4-5 sequentially in f32, operation for operation as the CPU does: the
//   same token for the same seed (up to exp's last-bit rounding).
// - Large path (top_k off or > 4096 on a large vocab): the sums of steps 4-5 over up to
//   `vocab` candidates are done in 40-bit fixed point (w * 2^40, integer adds: deterministic
//   in any order), and "the prefix where the running sum reaches X" is found by the same radix
//   select, weighted by mass instead of count. If the top_p prefix then has at most
//   KILN_SAMPLE_CAP candidates, the draw (step 5) takes the exact path. Otherwise the result
//   is that of exact sums (to ~1e-7 of the mass), and differs from the CPU's sequential f32
//   sums where u lands within their rounding error of a boundary. That error is not small
//   over a whole vocabulary (~1e-5..1e-4 of the mass for 152k candidates), so with top_k off
//   at T=1 a neighbouring candidate is drawn in a good fraction of rows; kernel_check.py checks
//   such draws against exact sums.
//
// Histograms aggregate per warp before their shared atomics (a flat distribution puts most
// candidates in one bin). Cost: every pass after step 1 re-reads the row and recomputes exp, on
// one SM per row: on an H200, 8 rows of a 151936 vocab took ~40 us greedy with one block per row
// and scalar loads, 5.4 us with the cluster and 16-byte loads (kernel_check --bench, 2026-12-01),
// ~360 us with top_k 40 (323 us with the cluster), ~1.4 ms top_p 0.95 alone, ~3.3 ms on a flat
// distribution (many passes). Faster non-greedy sampling (the cluster's blocks in every pass, or
// keys cached in a scratch buffer)
// needs the passes' histograms shared over the cluster or a scratch region in the plan.
//
// Geometry: grid (rows * 8) in clusters of 8 (src/plan/geometry.rs SAMPLE_BLOCKS_PER_ROW), block
// 1024, no dynamic shared memory (about 36 KB static).
#include "common.cuh"
#include "advance.cuh"  // advance_row, advance_finish: kiln_sample_advance_f32's step, as kiln_advance's

#define KILN_SAMPLE_THREADS 1024
#define KILN_SAMPLE_CAP 4096
#define KILN_SAMPLE_FIXED_SHIFT 40
// Blocks per row (src/plan/geometry.rs SAMPLE_BLOCKS_PER_ROW): one thread-block cluster on sm_90+,
// whose blocks share step 1 (the argmax over the row: ~15 us per step on one SM of an H200 for a
// 152k vocabulary, bench/NOTES-decode.md session 15); before sm_90 block 0 of each row does it alone.
#define KILN_SAMPLE_CLUSTER 8
// Minimum resident blocks per SM in the launch bounds. 1 (one 1024-thread block per SM, which is
// all a cluster launch of rows x 8 blocks needs) leaves ptxas 64 registers a thread; without it
// (or with 2) ptxas caps the cluster kernel at 32 and spills (bench/NOTES-decode.md session 16).
// `KILN_NVRTC_DEFINES=-DKILN_SAMPLE_MIN_BLOCKS=2` restores the old bound for an A/B.
#ifndef KILN_SAMPLE_MIN_BLOCKS
#define KILN_SAMPLE_MIN_BLOCKS 1
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define KILN_SAMPLE_PARTS KILN_SAMPLE_CLUSTER
#define KILN_SAMPLE_CLUSTER_ATTR __cluster_dims__(KILN_SAMPLE_CLUSTER, 1, 1)
#else
#define KILN_SAMPLE_PARTS 1
#define KILN_SAMPLE_CLUSTER_ATTR
#endif

namespace kiln {
namespace sample_impl {

typedef unsigned long long u64;

struct SampleShared {
  u64 cand[KILN_SAMPLE_CAP];
  unsigned int count_hist[256];
  u64 mass_hist[256];
  float red_v[32];
  int red_i[32];
  float part_v[32];  // step 1 per block of the cluster (block 0's copy)
  int part_i[32];
  u64 red_u[32];
  u64 bcast_prefix;
  u64 bcast_need;
  int bcast_done;
  unsigned int n_cand;
};

__device__ __forceinline__ u64 splitmix64(u64 z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Top 24 bits of splitmix64(seed << 32 | counter): u = bits / 2^24.
__device__ __forceinline__ unsigned int uniform_bits(unsigned int seed, unsigned int counter) {
  return (unsigned int)(splitmix64(((u64)seed << 32) | (u64)counter) >> 40);
}

// True when (va, ia) beats (vb, ib) for argmax: a non-NaN value beats NaN, a larger value wins,
// ties go to the lower index. Matches `sampling::argmax`'s sequential scan.
__device__ __forceinline__ bool argmax_better(float va, int ia, float vb, int ib) {
  const bool na = isnan(va), nb = isnan(vb);
  if (na != nb) return nb;
  if (!na && va != vb) return va > vb;
  return ia < ib;
}

struct Row {
  const float* logits;
  unsigned int vocab;
  float max;
  float temperature;
  int index_bits;  // IB: bits of the index part of a key
};

__device__ __forceinline__ float weight_of(const Row& row, unsigned int i) {
  return expf(__fdiv_rn(__fsub_rn(row.logits[i], row.max), row.temperature));
}

__device__ __forceinline__ u64 key_of(const Row& row, float w, unsigned int i) {
  return ((u64)__float_as_uint(w) << row.index_bits) | (u64)(row.vocab - 1 - i);
}

__device__ __forceinline__ unsigned int index_of(const Row& row, u64 key) {
  const u64 low = key & ((1ull << row.index_bits) - 1);
  return row.vocab - 1 - (unsigned int)low;
}

__device__ __forceinline__ float weight_of_key(const Row& row, u64 key) {
  return __uint_as_float((unsigned int)(key >> row.index_bits));
}

// w in fixed point: w <= 1 for every finite logit, so a sum over fewer than 2^23 candidates
// fits in 64 bits. Non-finite or out-of-range weights count as 0.
__device__ __forceinline__ u64 fixed_of(float w) {
  return (w > 0.0f && w <= 1.0f) ? __float2ull_rz(w * (float)(1ull << KILN_SAMPLE_FIXED_SHIFT)) : 0ull;
}

__device__ u64 block_sum_u64(u64 v, SampleShared& s) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if (lane == 0) s.red_u[warp] = v;
  __syncthreads();
  v = lane < (int)(blockDim.x >> 5) ? s.red_u[lane] : 0ull;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ u64 block_min_u64(u64 v, SampleShared& s) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = min(v, (u64)__shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();
  if (lane == 0) s.red_u[warp] = v;
  __syncthreads();
  v = lane < (int)(blockDim.x >> 5) ? s.red_u[lane] : ~0ull;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = min(v, (u64)__shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum of fixed-point weights of the candidates with key >= lo.
__device__ u64 mass_at_least(const Row& row, u64 lo, SampleShared& s) {
  u64 m = 0;
  for (unsigned int i = threadIdx.x; i < row.vocab; i += blockDim.x) {
    const float w = weight_of(row, i);
    if (key_of(row, w, i) >= lo) m += fixed_of(w);
  }
  return block_sum_u64(m, s);
}

__device__ unsigned int count_at_least(const Row& row, u64 lo, SampleShared& s) {
  u64 c = 0;
  for (unsigned int i = threadIdx.x; i < row.vocab; i += blockDim.x) {
    if (key_of(row, weight_of(row, i), i) >= lo) ++c;
  }
  return (unsigned int)block_sum_u64(c, s);
}

// Radix select over the candidates with key >= lo, largest key first. Returns a threshold
// `th` such that the candidates with key >= max(th, lo) are exactly the shortest prefix (in
// key order, descending) whose count (by_mass false) or fixed-point mass (by_mass true)
// reaches `need` (need >= 1 and at most the total of the universe). The prefix ends at the
// unique candidate with the smallest key >= th.
__device__ u64 radix_select(const Row& row, u64 lo, bool by_mass, u64 need, int key_bits, SampleShared& s) {
  u64 prefix = 0;
  for (int shift = key_bits - 8; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += blockDim.x) {
      s.count_hist[b] = 0;
      s.mass_hist[b] = 0;
    }
    __syncthreads();
    const u64 hi_mask = shift + 8 >= 64 ? 0ull : ~0ull << (shift + 8);
    // Warp-uniform trip count, so that the warp can aggregate: candidates of a warp that fall in
    // the same bin are added by one lane (a flat distribution puts nearly all of them in one or
    // two bins, and same-address shared atomics serialize).
    const unsigned int lane = threadIdx.x & 31;
    for (unsigned int base = threadIdx.x - lane; base < row.vocab; base += blockDim.x) {
      const unsigned int i = base + lane;
      bool valid = i < row.vocab;
      unsigned int digit = 0;
      u64 m = 0;
      if (valid) {
        const float w = weight_of(row, i);
        const u64 key = key_of(row, w, i);
        valid = key >= lo && (key & hi_mask) == prefix;
        digit = (unsigned int)(key >> shift) & 255u;
        m = by_mass ? fixed_of(w) : 0ull;
      }
      if (!by_mass) {
        // Lanes with the same bin form one group (an invalid lane forms its own); its lowest
        // lane adds the group's size.
        const unsigned int peers = __match_any_sync(0xffffffffu, valid ? digit : 256u + lane);
        if (valid && (int)lane == __ffs(peers) - 1) atomicAdd(&s.count_hist[digit], (unsigned int)__popc(peers));
        continue;
      }
      // By mass: one round per distinct bin in the warp (one or two on a flat distribution).
      unsigned int pending = __ballot_sync(0xffffffffu, valid);
      while (pending) {
        const int leader = __ffs(pending) - 1;
        const unsigned int bin = __shfl_sync(0xffffffffu, digit, leader);
        const bool mine = valid && digit == bin;
        const unsigned int group = __ballot_sync(0xffffffffu, mine);
        u64 sum = mine ? m : 0ull;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        if ((int)lane == leader && sum) atomicAdd(&s.mass_hist[bin], sum);
        if ((int)lane == leader) atomicAdd(&s.count_hist[bin], (unsigned int)__popc(group));
        pending &= ~group;
      }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      u64 before = 0;
      int chosen = -1, lowest_nonempty = -1;
      for (int d = 255; d >= 0; --d) {
        const u64 c = by_mass ? s.mass_hist[d] : (u64)s.count_hist[d];
        if (c == 0) continue;
        lowest_nonempty = d;
        if (before + c >= need) {
          chosen = d;
          break;
        }
        before += c;
      }
      u64 left;
      if (chosen < 0) {
        // need exceeds the total (cannot happen for the callers' arguments): take everything.
        chosen = lowest_nonempty < 0 ? 0 : lowest_nonempty;
        left = 1;
        before = 0;
      } else {
        left = need - before;
      }
      const u64 bin = by_mass ? s.mass_hist[chosen] : (u64)s.count_hist[chosen];
      s.bcast_prefix = prefix | ((u64)chosen << shift);
      s.bcast_need = left;
      // By count, a bin needed whole ends the search; by mass, a bin of one candidate does.
      s.bcast_done = by_mass ? (s.count_hist[chosen] <= 1) : (bin == left);
    }
    __syncthreads();
    prefix = s.bcast_prefix;
    need = s.bcast_need;
    const bool done = s.bcast_done != 0;
    __syncthreads();
    if (done) break;
  }
  return prefix;
}

// Collects the candidates with key >= lo (n of them, n <= KILN_SAMPLE_CAP) into s.cand[0..n)
// and sorts them by key, descending (bitonic sort over the next power of two, padded with 0).
__device__ void collect_sorted(const Row& row, u64 lo, unsigned int n, SampleShared& s) {
  if (threadIdx.x == 0) s.n_cand = 0;
  __syncthreads();
  for (unsigned int i = threadIdx.x; i < row.vocab; i += blockDim.x) {
    const u64 key = key_of(row, weight_of(row, i), i);
    if (key >= lo) {
      const unsigned int at = atomicAdd(&s.n_cand, 1u);
      if (at < KILN_SAMPLE_CAP) s.cand[at] = key;
    }
  }
  unsigned int padded = 1;
  while (padded < n) padded <<= 1;
  __syncthreads();
  const unsigned int got = min(s.n_cand, (unsigned int)KILN_SAMPLE_CAP);
  for (unsigned int i = got + threadIdx.x; i < padded; i += blockDim.x) s.cand[i] = 0ull;  // sorts last
  __syncthreads();
  for (unsigned int k = 2; k <= padded; k <<= 1) {
    for (unsigned int j = k >> 1; j > 0; j >>= 1) {
      for (unsigned int i = threadIdx.x; i < padded; i += blockDim.x) {
        const unsigned int ixj = i ^ j;
        if (ixj > i) {
          const u64 a = s.cand[i], b = s.cand[ixj];
          const bool descending = (i & k) == 0;
          if (descending ? a < b : a > b) {
            s.cand[i] = b;
            s.cand[ixj] = a;
          }
        }
      }
      __syncthreads();
    }
  }
}

// Steps 4 (when apply_top_p) and 5 over s.cand[0..n), sequentially in f32 exactly as
// `sample_row` does. Run by one thread.
__device__ unsigned int draw_sorted(const Row& row, unsigned int n, bool apply_top_p, float top_p, float u,
                                    const SampleShared& s) {
  if (n == 0) return 0;
  if (apply_top_p) {
    float total = 0.0f;
    for (unsigned int j = 0; j < n; ++j) total = __fadd_rn(total, weight_of_key(row, s.cand[j]));
    const float goal = __fmul_rn(top_p, total);
    float acc = 0.0f;
    for (unsigned int j = 0; j < n; ++j) {
      acc = __fadd_rn(acc, weight_of_key(row, s.cand[j]));
      if (acc >= goal) {
        n = j + 1;
        break;
      }
    }
  }
  float total = 0.0f;
  for (unsigned int j = 0; j < n; ++j) total = __fadd_rn(total, weight_of_key(row, s.cand[j]));
  const float target = __fmul_rn(u, total);
  float acc = 0.0f;
  for (unsigned int j = 0; j < n; ++j) {
    acc = __fadd_rn(acc, weight_of_key(row, s.cand[j]));
    if (acc > target) return index_of(row, s.cand[j]);
  }
  return index_of(row, s.cand[n - 1]);
}

// Step 1 over elements [lo, hi) of row l (lo, hi multiples of 4 when `vec`): this thread's best
// (value, index) under argmax_better.
__device__ __forceinline__ void argmax_range(const float* l, unsigned int lo, unsigned int hi, bool vec, float& best_v,
                                             int& best_i) {
  best_v = kiln::quiet_nan();
  best_i = 0x7fffffff;
  if (vec) {
    // 16-byte loads, 4 in flight per thread (a scalar load per iteration left one SM waiting on
    // ~125 dependent round trips, ~55 us per step on a 128k vocabulary in the H200 profile).
    const float4* l4 = reinterpret_cast<const float4*>(l);
    const unsigned int n4 = hi / 4, step = blockDim.x;
    unsigned int j = lo / 4 + threadIdx.x;
    for (; j + 3 * step < n4; j += 4 * step) {
      float4 v[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) v[u] = l4[j + u * step];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int i0 = (int)(4 * (j + u * step));
        const float e[4] = {v[u].x, v[u].y, v[u].z, v[u].w};
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          if (argmax_better(e[c], i0 + c, best_v, best_i)) {
            best_v = e[c];
            best_i = i0 + c;
          }
        }
      }
    }
    for (; j < n4; j += step) {
      const float4 v = l4[j];
      const float e[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        if (argmax_better(e[c], (int)(4 * j) + c, best_v, best_i)) {
          best_v = e[c];
          best_i = (int)(4 * j) + c;
        }
      }
    }
    return;
  }
  for (unsigned int i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    const float v = l[i];
    if (argmax_better(v, (int)i, best_v, best_i)) {
      best_v = v;
      best_i = (int)i;
    }
  }
}

// Reduces (best_v, best_i) over the warp (every lane gets the result).
__device__ __forceinline__ void warp_argmax(float& best_v, int& best_i) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, best_v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, best_i, o);
    if (argmax_better(ov, oi, best_v, best_i)) {
      best_v = ov;
      best_i = oi;
    }
  }
}

// Reduces (best_v, best_i) over the block; the result is valid in warp 0.
__device__ __forceinline__ void block_argmax(float& best_v, int& best_i, SampleShared& s) {
  warp_argmax(best_v, best_i);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    s.red_v[warp] = best_v;
    s.red_i[warp] = best_i;
  }
  __syncthreads();
  if (warp == 0) {
    best_v = lane < (int)(blockDim.x >> 5) ? s.red_v[lane] : kiln::quiet_nan();
    best_i = lane < (int)(blockDim.x >> 5) ? s.red_i[lane] : 0x7fffffff;
    warp_argmax(best_v, best_i);
  }
}

// The sampler of row r (vocab > 0), called by every thread of every block of the row's cluster
// (`part`: the block's place in it). KILN_SAMPLE_CLUSTER blocks per row (one thread-block
// cluster): each takes step 1 over a contiguous part of the row and stores its (value, index) in
// block 0's shared memory; after the cluster barrier the other blocks return and block 0 goes on
// alone. argmax_better is a total order, so the result is the same for any split of the row.
// Returns true in the one thread that holds the row's token (thread 0 of block 0), in `token`.
__device__ __forceinline__ bool sample_row_token(const float* logits, const float* temperature, const int* top_k,
                                                 const float* top_p, const unsigned int* seed,
                                                 const unsigned int* counter, unsigned int r, unsigned int part,
                                                 unsigned int vocab, SampleShared& s, int& token) {
  const float* l = logits + (size_t)r * vocab;
  const bool vec = vocab % 4 == 0 && kiln::aligned16(l);
  const unsigned int per = vec ? (vocab / 4 + KILN_SAMPLE_PARTS - 1) / KILN_SAMPLE_PARTS * 4
                               : (vocab + KILN_SAMPLE_PARTS - 1) / KILN_SAMPLE_PARTS;
  float best_v;
  int best_i;
  if (part < KILN_SAMPLE_PARTS) {
    argmax_range(l, min(part * per, vocab), min((part + 1) * per, vocab), vec, best_v, best_i);
  } else {  // a block past the parts (no clusters: only block 0 of the row works)
    best_v = kiln::quiet_nan();
    best_i = 0x7fffffff;
  }
  block_argmax(best_v, best_i, s);
#if KILN_SAMPLE_PARTS > 1
  if (threadIdx.x == 0) {
    // Into block 0's shared memory (distributed shared memory of the cluster).
    unsigned int local_v = (unsigned int)__cvta_generic_to_shared(&s.part_v[part]);
    unsigned int local_i = (unsigned int)__cvta_generic_to_shared(&s.part_i[part]);
    unsigned int remote_v, remote_i;
    asm volatile("mapa.shared::cluster.u32 %0, %1, 0;" : "=r"(remote_v) : "r"(local_v));
    asm volatile("mapa.shared::cluster.u32 %0, %1, 0;" : "=r"(remote_i) : "r"(local_i));
    asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(remote_v), "f"(best_v) : "memory");
    asm volatile("st.shared::cluster.s32 [%0], %1;" ::"r"(remote_i), "r"(best_i) : "memory");
  }
  kiln::cluster_sync();
  if (part != 0) return false;
  if (threadIdx.x < 32) {
    best_v = threadIdx.x < KILN_SAMPLE_PARTS ? s.part_v[threadIdx.x] : kiln::quiet_nan();
    best_i = threadIdx.x < KILN_SAMPLE_PARTS ? s.part_i[threadIdx.x] : 0x7fffffff;
    warp_argmax(best_v, best_i);
  }
#else
  if (part != 0) return false;
#endif
  if (threadIdx.x == 0) s.red_i[0] = best_i >= (int)vocab ? 0 : best_i;
  __syncthreads();
  const int argmax = s.red_i[0];

  const float t = temperature[r];
  if (!(t > 0.0f) || !isfinite(t)) {
    token = argmax;
    return threadIdx.x == 0;
  }

  Row row;
  row.logits = l;
  row.vocab = vocab;
  row.max = l[argmax];
  row.temperature = t;
  int needed_index_bits = 1;
  while (needed_index_bits < 32 && ((vocab - 1) >> needed_index_bits) != 0) ++needed_index_bits;
  // Keys take 32 + index bits, rounded up to whole 8-bit digits; the index part takes the slack,
  // so that the first digit holds the weight's sign and high exponent bits.
  const int key_bits = (32 + needed_index_bits + 7) / 8 * 8;
  row.index_bits = key_bits - 32;

  const unsigned int ubits = uniform_bits(seed[r], counter[r]);
  const float u = (float)ubits / 16777216.0f;
  const int k = top_k[r];
  const float p = top_p[r];
  const bool apply_top_p = p > 0.0f && p < 1.0f;

  // Step 3: the top_k set is {key >= lo_k}.
  u64 lo_k = 0;
  unsigned int n_kept = vocab;
  if (k > 0 && (unsigned int)k < vocab) {
    lo_k = radix_select(row, 0, false, (u64)k, key_bits, s);
    n_kept = (unsigned int)k;
  }
  if (n_kept <= KILN_SAMPLE_CAP) {
    collect_sorted(row, lo_k, n_kept, s);
    if (threadIdx.x != 0) return false;
    token = (int)draw_sorted(row, n_kept, apply_top_p, p, u, s);
    return true;
  }

  // Large path. Step 4 in fixed point: the shortest prefix whose mass reaches top_p * total.
  u64 lo = lo_k;
  u64 total = mass_at_least(row, lo, s);
  if (apply_top_p) {
    double goal = ceil((double)p * (double)total);
    u64 need = goal < 1.0 ? 1ull : (u64)goal;
    if (need > total) need = total;
    const u64 th = radix_select(row, lo, true, need, key_bits, s);
    lo = th > lo ? th : lo;
    const unsigned int n_top_p = count_at_least(row, lo, s);
    if (n_top_p <= KILN_SAMPLE_CAP) {
      collect_sorted(row, lo, n_top_p, s);
      if (threadIdx.x != 0) return false;
      token = (int)draw_sorted(row, n_top_p, false, p, u, s);
      return true;
    }
    total = mass_at_least(row, lo, s);
  }
  // Step 5 in fixed point: the first candidate where the running mass exceeds u * total,
  // i.e. reaches floor(u * total) + 1 (u * total exactly: u is ubits / 2^24).
  const u64 target = (__umul64hi((u64)ubits, total) << 40) | (((u64)ubits * total) >> 24);
  u64 need = target + 1;
  if (need > total) need = total;
  if (need == 0) need = 1;
  const u64 th = radix_select(row, lo, true, need, key_bits, s);
  u64 lo_draw = th > lo ? th : lo;
  // The drawn candidate is the smallest key >= lo_draw.
  u64 mine = ~0ull;
  for (unsigned int i = threadIdx.x; i < vocab; i += blockDim.x) {
    const u64 key = key_of(row, weight_of(row, i), i);
    if (key >= lo_draw && key < mine) mine = key;
  }
  const u64 chosen = block_min_u64(mine, s);
  token = chosen == ~0ull ? argmax : (int)index_of(row, chosen);
  return threadIdx.x == 0;
}

}  // namespace sample_impl
}  // namespace kiln

using namespace kiln::sample_impl;

extern "C" __global__ void __launch_bounds__(KILN_SAMPLE_THREADS, KILN_SAMPLE_MIN_BLOCKS) KILN_SAMPLE_CLUSTER_ATTR
    kiln_sample_f32(const float* logits, const float* temperature, const int* top_k, const float* top_p,
                    const unsigned int* seed, const unsigned int* counter, int* out, unsigned int rows,
                    unsigned int vocab) {
  KILN_TRACE_BLOCK_END();
  KILN_ABLATED(1024);
  kiln::wait_prior_grids();
  __shared__ SampleShared s;
  const unsigned int r = blockIdx.x / KILN_SAMPLE_CLUSTER, part = blockIdx.x % KILN_SAMPLE_CLUSTER;
  if (r >= rows || vocab == 0) return;  // the whole cluster: its blocks share r
  int token = 0;
  if (sample_row_token(logits, temperature, top_k, top_p, seed, counter, r, part, vocab, s, token)) out[r] = token;
}


// kiln_sample_advance_f32(logits, temperature, top_k, top_p, seed, stop_ids, out, token_ids,
//                         positions, counter, control, ring, argmax_key, vocab, burst, n_stop,
//                         cond_handle)
//
// Semantics (Op::SampleAdvance, made by the fusion pass for a device loop's one-row step):
// kiln_sample_f32 over the row (the counter as it was), then kiln_advance (advance.cu) with its
// token, word for word: the same token, ring slot, step fields, finished flag, produced count,
// done flag and loop condition. The thread that draws the token (thread 0 of the cluster's block
// 0) runs the advance; the advance's reads (control, position, finished flag, counter, the first
// KILN_SAMPLE_ADVANCE_EARLY_STOPS stop ids) are issued right after the wait, before the sampler's,
// so that they cost no round trip after the token. One launch boundary fewer per step than
// sample -> advance.
//
// argmax_key (null when the plan has none): the row's key, folded in by the kiln_linear_argmax_*
// launch that wrote the logits (linear.cu). A greedy row (temperature <= 0 or not finite) takes
// its token from it, kiln::argmax_key_token: the argmax the scan would find, without reading the
// logits; only the advancing thread stays (the other blocks return before any cluster barrier, as
// all of them see the same temperature). Every step zeroes the key for the next one.
//
// Geometry: kiln_sample_f32's for one row (a cluster of KILN_SAMPLE_CLUSTER blocks of 1024).
// CPU reference: the `Kernel::SampleAdvance` arm of src/runtime/cpu.rs (sample, then advance).
// Check on a GPU: kiln gate --checks 5 (fused plans' one-row device loops == one-step decode, greedy
// and sampled, budgets, stop tokens, a preset done flag). Measured on the H200 against sample ->
// advance (session 34 call B, bench/results/2026-12-03-h200-decode-ab-s34.md, two rounds, batch 1,
// context 128): 0.5B -0.2%, 1B +0.2%, 8B 0.0%, within noise; the 1B's block trace 11.2 -> 10.3 us
// per step (the rest is the argmax and the WHILE node re-launching its body).
#define KILN_SAMPLE_ADVANCE_EARLY_STOPS 8
extern "C" __global__ void __launch_bounds__(KILN_SAMPLE_THREADS, KILN_SAMPLE_MIN_BLOCKS) KILN_SAMPLE_CLUSTER_ATTR
    kiln_sample_advance_f32(const float* logits, const float* temperature, const int* top_k, const float* top_p,
                            const unsigned int* seed, const int* stop_ids, int* out, int* token_ids, int* positions,
                            unsigned int* counter, unsigned int* control, int* ring,
                            unsigned long long* argmax_key, unsigned int vocab, unsigned int burst,
                            unsigned int n_stop, unsigned long long cond_handle) {
  KILN_TRACE_BLOCK_END();
  kiln::wait_prior_grids();
  __shared__ SampleShared s;
  const unsigned int part = blockIdx.x % KILN_SAMPLE_CLUSTER;
  const bool runs_advance = blockIdx.x == 0 && threadIdx.x == 0;
  // The advance's reads, all at once (coherent: written by earlier grids or the host).
  unsigned int done0 = 0, budget = 0, produced = 0, fin = 0, c = 0;
  long long max_position = 0;
  int p = -1;
  int sid[KILN_SAMPLE_ADVANCE_EARLY_STOPS];
  unsigned long long key = 0ull;
  const float temp0 = argmax_key != nullptr ? __ldcg(temperature) : 0.0f;
  if (runs_advance) {
    if (argmax_key != nullptr) key = __ldcg(argmax_key);
    done0 = __ldcg(control + 2);
    budget = __ldcg(control + 0);
    produced = __ldcg(control + 1);
    max_position = (long long)__ldcg(control + 3);
    fin = __ldcg(control + 4);
    p = __ldcg(positions);
    c = __ldcg(counter);
  }
#pragma unroll
  for (unsigned int i = 0; i < KILN_SAMPLE_ADVANCE_EARLY_STOPS; ++i)
    sid[i] = runs_advance && i < n_stop ? __ldcg(stop_ids + i) : -1;
  if (vocab == 0) {  // never planned (the verifier refuses empty values): end the loop, not spin
    if (runs_advance && cond_handle != 0) cudaGraphSetConditional(cond_handle, 0u);
    return;
  }
  int t = 0;
  if (argmax_key != nullptr && (!(temp0 > 0.0f) || !isfinite(temp0))) {
    if (!runs_advance) return;
    t = kiln::argmax_key_token(key, vocab);
  } else if (!sample_row_token(logits, temperature, top_k, top_p, seed, counter, 0, part, vocab, s, t)) {
    return;
  }
  // Here: thread 0 of block 0 (runs_advance), with the row's token.
  if (argmax_key != nullptr) argmax_key[0] = 0ull;
  out[0] = t;
  if (done0 != 0u) {
    // A loop already done changes nothing: no ring write, no position or counter moved.
    if (cond_handle != 0) cudaGraphSetConditional(cond_handle, 0u);
    return;
  }
  const auto is_stop = [&](int tok) {
    bool stop = false;
#pragma unroll
    for (unsigned int i = 0; i < KILN_SAMPLE_ADVANCE_EARLY_STOPS; ++i) stop |= sid[i] >= 0 && sid[i] == tok;
    for (unsigned int i = KILN_SAMPLE_ADVANCE_EARLY_STOPS; i < n_stop; ++i) {
      const int x = __ldcg(stop_ids + i);
      stop |= x >= 0 && x == tok;
    }
    return stop;
  };
  int unfinished = 0, past_end = 0;
  kiln::advance_row(0, p, t, fin, c, is_stop, token_ids, positions, counter, control, ring, 1, produced, burst,
                    max_position, unfinished, past_end);
  kiln::advance_finish(control, budget, produced, burst, unfinished != 0, past_end != 0, cond_handle);
}

