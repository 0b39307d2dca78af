// probe_persistent.cu: a feasibility probe for the persistent decode kernel (bench/NOTES-decode.md,
// "Sketch: a persistent per-layer decode kernel"). NOT part of kiln's kernels (kernels/ is; this
// file is compiled only by scripts/probe_persistent.py): it measures whether one resident grid
// that walks a chain of batch-1 GEMVs, with a grid barrier between dependent GEMVs and each
// block's weights streamed into a shared-memory ring that runs ahead across those barriers, beats
// the same chain as separate kernel launches (kiln's GEMV kernels, CUDA graph with PDL).
//
//   probe_chain_ns{12,6,2}[_red][_bB](stages, n_stages, bar): NS = 12, 6, 2; _red: the barrier's
//   arrival is one red.release (see `arrive`); _bB: batches of at most B chunks (default NS - 1)
//     stages[s] = {w, x, y, K, N}: y[n] = bf16(sum_k f32(w[n, k]) * f32(x[k])) for n < N, w bf16
//     [N][K] row-major, x and y bf16. Stage s reads what stage s - 1 wrote (its x is an earlier
//     stage's y), so stage s starts only when every block has finished stage s - 1.
//     bar: one u32, zero at launch (the graph's memset node); block arrivals count up on it.
//
// Geometry: grid = the SM count (one 512-thread block per SM: ~210 KB of shared memory each, so
// every block is resident and the spinning barrier cannot deadlock), block 512.
// Work split: stage s's rows are cut into gridDim.x contiguous tiles (ceil(N / grid) rows each);
// a tile is a contiguous byte range of w, copied in chunks of whole rows of at most CHUNK bytes
// through a ring of NS chunk slots with cp.async (16 bytes per thread per copy). The copies run
// NS - 1 chunks ahead of the compute, across stage boundaries: while a block waits at the
// barrier of stage s, its copies of stage s (and beyond) are already in flight.
// Compute per batch (the stage's next chunks, up to BATCH <= NS - 1; one barrier-free pass):
// items (row, 1024-element segment); warp w takes items 4w .. 4w + 3, then 4w + 64, ... (four
// at once); each item's dot is summed over the lanes by shuffles into shared memory, then one
// thread per row adds the row's segments in order (deterministic).
// K must be a multiple of 8, at most CHUNK / 2 elements; x of a stage at most XMAX elements.
#include "probe_common.cuh"

#define PROBE_THREADS 512
#define PROBE_WARPS 16
#define PROBE_CHUNK 16384
#define PROBE_XMAX 8192
#define PROBE_SEG 1024
#define PROBE_MAX_ITEMS 512
#define PROBE_MAX_STAGES 128

struct ProbeStage {
  const __nv_bfloat16* w;
  const __nv_bfloat16* x;
  __nv_bfloat16* y;
  unsigned int K, N;
};

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned int s = (unsigned int)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ unsigned int ld_acquire(const unsigned int* p) {
  unsigned int v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
// Thread 0 of the block polls the grid barrier's counter until it reaches `target` (every block's
// arrival for the stages so far); the caller's block barrier then holds the other threads.
__device__ __forceinline__ void spin_until(const unsigned int* bar, unsigned int target) {
  if (threadIdx.x == 0) {
    while (ld_acquire(bar) < target) {
    }
  }
}
// The block's tile of stage s: rows [r0, r1).
__device__ __forceinline__ void tile_of(const ProbeStage& st, unsigned int& r0, unsigned int& r1) {
  const unsigned int per = (st.N + gridDim.x - 1) / gridDim.x;
  r0 = min(st.N, blockIdx.x * per);
  r1 = min(st.N, r0 + per);
}
__device__ __forceinline__ unsigned int rows_per_chunk(unsigned int K) { return max(1u, PROBE_CHUNK / (2u * K)); }

// Producer cursor: the next chunk to copy (stage ps, first row pr).
struct Cursor {
  unsigned int s, r;
};

// Advances c to a stage with rows left for this block; false when the chain is exhausted.
__device__ __forceinline__ bool settle(const ProbeStage* stages, unsigned int n_stages, Cursor& c) {
  while (c.s < n_stages) {
    unsigned int r0, r1;
    tile_of(stages[c.s], r0, r1);
    if (c.r < r0) c.r = r0;
    if (c.r < r1) return true;
    ++c.s;
    c.r = 0;
  }
  return false;
}

template <int NS>
__device__ __forceinline__ void issue(const ProbeStage* stages, unsigned int n_stages, Cursor& c, uint4* slot) {
  if (settle(stages, n_stages, c)) {
    const ProbeStage st = stages[c.s];
    unsigned int r0, r1;
    tile_of(st, r0, r1);
    const unsigned int nr = min(rows_per_chunk(st.K), r1 - c.r);
    const unsigned int n16 = nr * st.K / 8;
    const uint4* src = reinterpret_cast<const uint4*>(st.w + (size_t)c.r * st.K);
    for (unsigned int i = threadIdx.x; i < n16; i += PROBE_THREADS) cp_async16(slot + i, src + i);
    c.r += nr;
  }
  cp_async_commit();  // an empty group past the end keeps the group count in step
}

// Waits until at most `pending` (0 .. NS - 2) of this thread's cp.async groups are in flight.
template <int NS> __device__ __forceinline__ void cp_async_wait_dyn(unsigned int pending) {
  if constexpr (NS > 2) {
    if (pending >= NS - 2) {
      cp_async_wait<NS - 2>();
      return;
    }
    cp_async_wait_dyn<NS - 1>(pending);
  } else {
    cp_async_wait<0>();
  }
}

// The dot of a 16-byte-aligned run [c0, c1) of 16-byte words of a smem weight row with xs, summed
// over the warp: ILP items at once (independent accumulators, one shuffle tree for all).
template <int ILP>
__device__ __forceinline__ void warp_dots(const uint4* const (&rows)[ILP], const unsigned int (&c0)[ILP],
                                          const unsigned int (&c1)[ILP], const uint4* xs, unsigned int lane,
                                          float (&acc)[ILP]) {
#pragma unroll
  for (int i = 0; i < ILP; ++i) acc[i] = 0.0f;
#pragma unroll
  for (int t = 0; t < PROBE_SEG / 256; ++t) {
#pragma unroll
    for (int i = 0; i < ILP; ++i) {
      const unsigned int c = c0[i] + lane + 32 * t;
      if (c < c1[i]) acc[i] = dot8(rows[i][c], xs[c], acc[i]);
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
#pragma unroll
    for (int i = 0; i < ILP; ++i) acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], o);
}

// Arrival at the grid barrier, after the block's last write of the stage (all threads call it).
// RED = 0: thread 0 fences (membar.gl) and increments with a returning atomicAdd (the pattern of
// cooperative groups' grid sync); RED = 1: one release reduction (red.release.gpu, no return,
// no separate fence: the CTA barrier before it makes it cumulative over the block's writes).
template <int RED> __device__ __forceinline__ void arrive(unsigned int* bar) {
  __syncthreads();
  if (threadIdx.x == 0) {
    if constexpr (RED) {
      asm volatile("red.release.gpu.global.add.u32 [%0], 1;\n" ::"l"(bar) : "memory");
    } else {
      __threadfence();
      atomicAdd(bar, 1u);
    }
  }
}

template <int NS, int RED, int BATCH>
__device__ void probe_chain(const ProbeStage* stages_g, unsigned int n_stages, unsigned int* bar) {
  static_assert(BATCH >= 1 && BATCH <= NS - 1, "a batch is at most the chunks issued ahead");
  extern __shared__ uint4 smem[];
  uint4* ring = smem;                                          // NS * CHUNK bytes
  uint4* xs = smem + NS * (PROBE_CHUNK / 16);                  // XMAX bf16
  float* part = reinterpret_cast<float*>(xs + PROBE_XMAX / 8);  // MAX_ITEMS f32
  ProbeStage* stages = reinterpret_cast<ProbeStage*>(part + PROBE_MAX_ITEMS);  // MAX_STAGES
  const unsigned int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  constexpr int ILP = 4;
  // The stage table in shared memory: no global round trip on the way to a barrier.
  if (n_stages > PROBE_MAX_STAGES) return;
  for (unsigned int i = threadIdx.x; i < 2 * n_stages; i += PROBE_THREADS)
    reinterpret_cast<uint4*>(stages)[i] = reinterpret_cast<const uint4*>(stages_g)[i];
  __syncthreads();

  // Chunks are copied NS - 1 ahead of the next one consumed: before a batch whose first chunk is
  // i, chunks [0, i + NS - 1) have been issued (one cp.async group each, empty past the end).
  Cursor prod{0, 0};
#pragma unroll 1
  for (int j = 0; j < NS - 1; ++j) issue<NS>(stages, n_stages, prod, ring + j * (PROBE_CHUNK / 16));
  unsigned int chunk = 0;  // the next chunk to consume

#pragma unroll 1
  for (unsigned int s = 0; s < n_stages; ++s) {
    const ProbeStage st = stages[s];
    unsigned int r0, r1;
    tile_of(st, r0, r1);
    if (s > 0) {
      spin_until(bar, s * gridDim.x);
      __syncthreads();
    }
    if (r0 < r1) {
      const unsigned int k16 = st.K / 8;
      for (unsigned int i = threadIdx.x; i < k16; i += PROBE_THREADS) xs[i] = ld_cg16(st.x + 8 * i);
      const unsigned int per_chunk = rows_per_chunk(st.K);
      const unsigned int segs = (k16 + PROBE_SEG / 8 - 1) / (PROBE_SEG / 8);
      const unsigned int chunks = (r1 - r0 + per_chunk - 1) / per_chunk;
#pragma unroll 1
      for (unsigned int b0 = 0; b0 < chunks; b0 += BATCH) {
        // A batch: the stage's next chunks, at most BATCH (<= NS - 1, the chunks issued ahead).
        const unsigned int nb = min(chunks - b0, (unsigned int)BATCH);
        cp_async_wait_dyn<NS>((unsigned int)(NS - 1) - nb);
        __syncthreads();  // the batch's bytes (every thread's copies) and xs are visible
        const unsigned int row0 = r0 + b0 * per_chunk;
        const unsigned int nr = min(nb * per_chunk, r1 - row0);
        const unsigned int items = nr * segs;
#pragma unroll 1
        for (unsigned int it = warp * ILP; it < items; it += PROBE_WARPS * ILP) {
          const uint4* rows[ILP];
          unsigned int c0[ILP], c1[ILP];
#pragma unroll
          for (int i = 0; i < ILP; ++i) {
            const unsigned int item = min(it + i, items - 1);
            const unsigned int row = item / segs, seg = item % segs;
            const unsigned int ch = chunk + row / per_chunk;
            rows[i] = ring + (ch % NS) * (PROBE_CHUNK / 16) + (row % per_chunk) * k16;
            c0[i] = seg * (PROBE_SEG / 8);
            c1[i] = it + i < items ? min(k16, c0[i] + PROBE_SEG / 8) : 0u;
          }
          float acc[ILP];
          warp_dots<ILP>(rows, c0, c1, xs, lane, acc);
          if (lane == 0) {
#pragma unroll
            for (int i = 0; i < ILP; ++i)
              if (it + i < items) part[it + i] = acc[i];
          }
        }
        __syncthreads();  // the batch's slots are free, its partial sums written
        if (threadIdx.x < nr) {
          float acc = 0.0f;
          for (unsigned int g = 0; g < segs; ++g) acc += part[threadIdx.x * segs + g];
          st.y[row0 + threadIdx.x] = __float2bfloat16_rn(acc);
        }
#pragma unroll 1
        for (unsigned int c = 0; c < nb; ++c)
          issue<NS>(stages, n_stages, prod, ring + ((chunk + c + NS - 1) % NS) * (PROBE_CHUNK / 16));
        chunk += nb;
      }
    }
    // Arrive: every write of this block is ordered before the counter's increment.
    arrive<RED>(bar);
  }
  cp_async_wait<0>();
}

#define PROBE_KERNEL(NAME, NS, RED, BATCH)                                                               \
  extern "C" __global__ void __launch_bounds__(PROBE_THREADS, 1)                                     \
      NAME(const ProbeStage* stages, unsigned int n_stages, unsigned int* bar) {                      \
    probe_chain<NS, RED, BATCH>(stages, n_stages, bar);                                               \
  }
PROBE_KERNEL(probe_chain_ns12, 12, 0, 11)
PROBE_KERNEL(probe_chain_ns6, 6, 0, 5)
PROBE_KERNEL(probe_chain_ns2, 2, 0, 1)
PROBE_KERNEL(probe_chain_ns12_red, 12, 1, 11)
PROBE_KERNEL(probe_chain_ns12_red_b6, 12, 1, 6)
PROBE_KERNEL(probe_chain_ns12_red_b3, 12, 1, 3)

// ---- Warp-specialized variant (session 26): a producer warp streams the block's weight chunks
// with TMA bulk copies (cp.async.bulk, one instruction per chunk, completion counted on a
// per-slot mbarrier) into a ring of NS slots of CB bytes, running ahead across stage barriers on
// its own (it never waits for activations, only for free slots); consumer warps wait on the
// slot's barrier, compute, and free the slot. The grid barrier is the release reduction above.
// Launch: grid = SM count, block = 32 * (TMA_CONSUMER_WARPS + 1), dynamic shared memory
// NS * CB + XMAX * 2 + 2 * MAX_ITEMS * 4 + MAX_STAGES * 32 + 16 * NS. A weight row must fit a
// slot (2 K <= CB).
#define TMA_CONSUMER_WARPS 16
#define TMA_CONSUMERS (32 * TMA_CONSUMER_WARPS)

__device__ __forceinline__ unsigned int smem_u32(const void* p) {
  return (unsigned int)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void mbar_init(unsigned long long* b, unsigned int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(b)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(unsigned long long* b, unsigned int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned long long* b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(b)) : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned long long* b, unsigned int parity) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra WAIT_%=;\n"
      "}\n" ::"r"(smem_u32(b)),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void tma_load(void* dst, const void* src, unsigned int bytes, unsigned long long* b) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   smem_u32(dst)),
               "l"(src), "r"(bytes), "r"(smem_u32(b))
               : "memory");
}
__device__ __forceinline__ void consumers_sync() { asm volatile("bar.sync 1, %0;\n" ::"n"(TMA_CONSUMERS) : "memory"); }

__device__ __forceinline__ void l2_prefetch_bulk(const void* src, unsigned int bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(src), "r"(bytes) : "memory");
}

// The chunk cursor of the producer: stage s, first row r of the next chunk (CB bytes of whole rows
// of the block's tile); false when the chain is exhausted.
template <int CB> struct TmaCursor {
  unsigned int s = 0, r = 0;
  bool started = false;
  __device__ __forceinline__ bool next(const ProbeStage* stages, unsigned int n_stages, const __nv_bfloat16*& src,
                                       unsigned int& bytes) {
    while (s < n_stages) {
      const ProbeStage& st = stages[s];
      unsigned int r0, r1;
      tile_of(st, r0, r1);
      if (!started) {
        r = r0;
        started = true;
      }
      if (r < r1) {
        const unsigned int per = max(1u, (unsigned int)CB / (2u * st.K));
        const unsigned int nr = min(per, r1 - r);
        src = st.w + (size_t)r * st.K;
        bytes = nr * st.K * 2;
        r += nr;
        return true;
      }
      ++s;
      started = false;
    }
    return false;
  }
};

// One ring chunk of the TMA variants: items (row, PROBE_SEG-element segment) of its rows, warp w0
// taking items w0, w0 + warps, ...; each item's dot summed over the lanes into pp[item].
__device__ __forceinline__ void chunk_dots(const uint4* chunk, const uint4* xs, unsigned int k16, unsigned int segs,
                                           unsigned int items, unsigned int w0, unsigned int warps, unsigned int lane,
                                           float* pp) {
  for (unsigned int it = w0; it < items; it += warps) {
    const unsigned int row = it / segs, seg = it % segs;
    const uint4* w = chunk + row * k16;
    const unsigned int c0 = seg * (PROBE_SEG / 8), c1 = min(k16, c0 + PROBE_SEG / 8);
    float acc = 0.0f;
#pragma unroll 4
    for (unsigned int c = c0 + lane; c < c1; c += 32) acc = dot8(w[c], xs[c], acc);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) pp[it] = acc;
  }
}
// Thread t < nr: y[t] = the sum of row t's segments, in order.
__device__ __forceinline__ void chunk_rows_out(const float* pp, unsigned int t, unsigned int nr, unsigned int segs,
                                               __nv_bfloat16* y) {
  if (t < nr) {
    float acc = 0.0f;
    for (unsigned int g = 0; g < segs; ++g) acc += pp[t * segs + g];
    y[t] = __float2bfloat16_rn(acc);
  }
}

template <int NS, int CB, int PF = 0, bool NOBAR = false, int G = 1, bool STREAM_ONLY = false>
__device__ void probe_chain_tma(const ProbeStage* stages_g, unsigned int n_stages, unsigned int* bar) {
  extern __shared__ __align__(128) uint4 smem[];
  uint4* ring = smem;                                          // NS * CB bytes
  uint4* xs = smem + NS * (CB / 16);                           // XMAX bf16
  float* part = reinterpret_cast<float*>(xs + PROBE_XMAX / 8);  // 2 x MAX_ITEMS f32
  ProbeStage* stages = reinterpret_cast<ProbeStage*>(part + 2 * PROBE_MAX_ITEMS);  // MAX_STAGES
  unsigned long long* full = reinterpret_cast<unsigned long long*>(stages + PROBE_MAX_STAGES);
  unsigned long long* empty = full + NS;
  const unsigned int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (n_stages > PROBE_MAX_STAGES) return;
  for (unsigned int i = threadIdx.x; i < 2 * n_stages; i += blockDim.x)
    reinterpret_cast<uint4*>(stages)[i] = reinterpret_cast<const uint4*>(stages_g)[i];
  if (threadIdx.x < NS) {
    mbar_init(full + threadIdx.x, 1);
    mbar_init(empty + threadIdx.x, 1);
  }
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  __syncthreads();

  if (warp == TMA_CONSUMER_WARPS) {  // the producer
    if (lane != 0) return;
    // PF > 0: an L2 prefetch cursor runs up to NS + PF chunks ahead of the chunk being loaded into
    // the ring, so that the chunks past the ring are already in the L2 when their slots free up
    // (the DRAM stream does not stop while the ring is full and the consumers wait at a barrier).
    TmaCursor<CB> load, pre;
    const __nv_bfloat16* src;
    unsigned int bytes, ahead = 0;
    for (unsigned int i = 0; load.next(stages, n_stages, src, bytes); ++i) {
      if (PF > 0) {
        const __nv_bfloat16* psrc;
        unsigned int pbytes;
        while (ahead < i + NS + PF && pre.next(stages, n_stages, psrc, pbytes)) {
          if (ahead >= NS) l2_prefetch_bulk(psrc, pbytes);  // the first NS go straight to the ring
          ++ahead;
        }
      }
      const unsigned int slot = i % NS;
      if (i >= NS) mbar_wait(empty + slot, ((i / NS) - 1) & 1);
      mbar_expect_tx(full + slot, bytes);
      tma_load(ring + slot * (CB / 16), src, bytes, full + slot);
    }
    return;
  }

  if (STREAM_ONLY) {  // timing only: the producer's stream alone (thread 0 frees each slot as it lands)
    if (threadIdx.x == 0) {
      TmaCursor<CB> c;
      const __nv_bfloat16* src;
      unsigned int bytes;
      for (unsigned int i = 0; c.next(stages, n_stages, src, bytes); ++i) {
        mbar_wait(full + i % NS, (i / NS) & 1);
        mbar_arrive(empty + i % NS);
      }
    }
    return;
  }
  unsigned int i = 0;  // the next chunk to consume
  unsigned int pb = 0;  // part buffer
  // G groups of consumer warps take the chunks in turn (chunk i: group i % G), each with its own
  // named barrier, so that one group's sums and barrier overlap the next group's chunk.
  constexpr unsigned int WG = TMA_CONSUMER_WARPS / G, GT = 32 * WG;
  const unsigned int gi = warp / WG, gw = warp % WG, gt = threadIdx.x % GT;
  for (unsigned int s = 0; s < n_stages; ++s) {
    const ProbeStage st = stages[s];
    unsigned int r0, r1;
    tile_of(st, r0, r1);
    if (s > 0 && !NOBAR) {
      spin_until(bar, s * gridDim.x);
      consumers_sync();
    }
    if (r0 < r1) {
      const unsigned int k16 = st.K / 8;
      for (unsigned int t = threadIdx.x; t < k16; t += TMA_CONSUMERS) xs[t] = ld_cg16(st.x + 8 * t);
      consumers_sync();
      const unsigned int per = max(1u, (unsigned int)CB / (2u * st.K));
      const unsigned int segs = (k16 + PROBE_SEG / 8 - 1) / (PROBE_SEG / 8);
      for (unsigned int r = r0; r < r1; r += per, ++i) {
        if (i % G != gi) continue;
        const unsigned int nr = min(per, r1 - r);
        const unsigned int slot = i % NS;
        mbar_wait(full + slot, (i / NS) & 1);
        const uint4* chunk = ring + slot * (CB / 16);
        const unsigned int items = nr * segs;
        float* pp = part + (G == 1 ? pb * PROBE_MAX_ITEMS : (gi * 2 + pb) * (2 * PROBE_MAX_ITEMS / (2 * G)));
        chunk_dots(chunk, xs, k16, segs, items, gw, WG, lane, pp);
        // The chunk's partial sums are in; its slot is no longer read.
        if (G == 1) {
          consumers_sync();
        } else {
          asm volatile("bar.sync %0, %1;\n" ::"r"(2 + gi), "r"(GT) : "memory");
        }
        if (gt == 0) mbar_arrive(empty + slot);
        chunk_rows_out(pp, gt, nr, segs, st.y + r);
        pb ^= 1u;
      }
    }
    consumers_sync();  // every y write of this block precedes the arrival
    if (threadIdx.x == 0) asm volatile("red.release.gpu.global.add.u32 [%0], 1;\n" ::"l"(bar) : "memory");
  }
}

// NAME: probe_chain_tma<NS, CB, PF, NOBAR, G, STREAM_ONLY> (see the template's parameters).
#define PROBE_TMA_KERNEL(NAME, NS, CB, PF, NOBAR, G, STREAM)                                          \
  extern "C" __global__ void __launch_bounds__(32 * (TMA_CONSUMER_WARPS + 1), 1)                     \
      NAME(const ProbeStage* stages, unsigned int n_stages, unsigned int* bar) {                      \
    probe_chain_tma<NS, CB, PF, NOBAR, G, STREAM>(stages, n_stages, bar);                             \
  }
PROBE_TMA_KERNEL(probe_chain_tma12x16k, 12, 16384, 0, false, 1, false)
PROBE_TMA_KERNEL(probe_chain_tma6x32k, 6, 32768, 0, false, 1, false)
PROBE_TMA_KERNEL(probe_chain_tma4x48k, 4, 49152, 0, false, 1, false)
PROBE_TMA_KERNEL(probe_chain_tma3x64k, 3, 65536, 0, false, 1, false)
// With chunks prefetched into the L2 PF past the ring (PF x 32 KB x 132 SMs: 8 -> 34.6 MB).
PROBE_TMA_KERNEL(probe_chain_tma6x32k_pf4, 6, 32768, 4, false, 1, false)
PROBE_TMA_KERNEL(probe_chain_tma6x32k_pf8, 6, 32768, 8, false, 1, false)
PROBE_TMA_KERNEL(probe_chain_tma12x16k_pf16, 12, 16384, 16, false, 1, false)
// Two consumer groups taking the chunks in turn (G = 2), with and without barriers.
PROBE_TMA_KERNEL(probe_chain_tma6x32k_g2, 6, 32768, 0, false, 2, false)
PROBE_TMA_KERNEL(probe_chain_tma12x16k_g2, 12, 16384, 0, false, 2, false)
PROBE_TMA_KERNEL(probe_chain_tma6x32k_g2_nobar, 6, 32768, 0, true, 2, false)
// Timing only: the TMA stream of the chain's weights with no compute and no barriers (y unwritten).
PROBE_TMA_KERNEL(probe_chain_tma6x32k_stream, 6, 32768, 0, true, 1, true)
PROBE_TMA_KERNEL(probe_chain_tma12x16k_stream, 12, 16384, 0, true, 1, true)
// Timing only (its stages read inputs that are not ready: the check fails by design): no wait at
// the grid barriers, i.e. the streaming and compute of the design with free dependencies.
PROBE_TMA_KERNEL(probe_chain_tma6x32k_nobar, 6, 32768, 0, true, 1, false)

// ---- One GEMV per launch, weights staged by TMA before the PDL wait (session 26) --------------
//   probe_gemv_tma{NS}(w, x, y, K, N): y[n] = bf16(sum_k f32(w[n, k]) * f32(x[k])), one stage of the
//   chain as its own launch (programmatic edges between launches, as kiln's decode graphs). A
//   producer warp copies the block's tile (rows [r0, r1) of w, ceil(N / grid) rows per block) in
//   chunks of whole rows of at most 16 KB with TMA into a ring of NS slots, starting before the
//   block waits for the prior grid (weights depend on nothing) and refilling as slots free; 8
//   consumer warps wait for the prior grid, read x through the L2, consume the chunks as the ring
//   variants do. The ring (NS x 16 KB) is what a kernel can read ahead of its wait; small enough
//   that two blocks fit an SM (the next launch's blocks must be resident beside this one's).
// Launch: grid = the SM count, block 288, dynamic shared NS * 16384 + 2 * K + 1024 + 16 * NS.
#define GT_WARPS 8
#define GT_CONSUMERS (32 * GT_WARPS)
#define GT_CHUNK 16384
#define GT_MAX_ITEMS 128

template <int NS>
__device__ void probe_gemv_tma(const __nv_bfloat16* w, const __nv_bfloat16* x, __nv_bfloat16* y, unsigned int K,
                               unsigned int N) {
  extern __shared__ __align__(128) uint4 smem[];
  uint4* ring = smem;
  float* part = reinterpret_cast<float*>(smem + NS * (GT_CHUNK / 16));  // 2 x GT_MAX_ITEMS
  unsigned long long* full = reinterpret_cast<unsigned long long*>(part + 2 * GT_MAX_ITEMS);
  unsigned long long* empty = full + NS;
  uint4* xs = reinterpret_cast<uint4*>(empty + NS);  // K bf16
  const unsigned int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const ProbeStage st{w, x, y, K, N};
  unsigned int r0, r1;
  tile_of(st, r0, r1);
  const unsigned int per = max(1u, GT_CHUNK / (2u * K));
  if (threadIdx.x < NS) {
    mbar_init(full + threadIdx.x, 1);
    mbar_init(empty + threadIdx.x, 1);
  }
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  __syncthreads();
  if (warp == GT_WARPS) {  // the producer: no wait, nothing read that a prior grid writes
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    if (lane != 0) return;
    unsigned int i = 0;
    for (unsigned int r = r0; r < r1; r += per, ++i) {
      const unsigned int nr = min(per, r1 - r), slot = i % NS;
      if (i >= NS) mbar_wait(empty + slot, ((i / NS) - 1) & 1);
      mbar_expect_tx(full + slot, nr * K * 2);
      tma_load(ring + slot * (GT_CHUNK / 16), w + (size_t)r * K, nr * K * 2, full + slot);
    }
    return;
  }
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  if (r0 >= r1) return;
  const unsigned int k16 = K / 8;
  for (unsigned int t = threadIdx.x; t < k16; t += GT_CONSUMERS) xs[t] = ld_cg16(x + 8 * t);
  asm volatile("bar.sync 1, %0;\n" ::"n"(GT_CONSUMERS) : "memory");
  const unsigned int segs = (k16 + PROBE_SEG / 8 - 1) / (PROBE_SEG / 8);
  unsigned int pb = 0, i = 0;
  for (unsigned int r = r0; r < r1; r += per, ++i) {
    const unsigned int nr = min(per, r1 - r), slot = i % NS;
    mbar_wait(full + slot, (i / NS) & 1);
    const uint4* chunk = ring + slot * (GT_CHUNK / 16);
    const unsigned int items = nr * segs;
    float* pp = part + pb * GT_MAX_ITEMS;
    chunk_dots(chunk, xs, k16, segs, items, warp, GT_WARPS, lane, pp);
    asm volatile("bar.sync 1, %0;\n" ::"n"(GT_CONSUMERS) : "memory");
    if (threadIdx.x == 0) mbar_arrive(empty + slot);
    chunk_rows_out(pp, threadIdx.x, nr, segs, y + r);
    pb ^= 1u;
  }
}

#define PROBE_GEMV_TMA(NS)                                                                              \
  extern "C" __global__ void __launch_bounds__(32 * (GT_WARPS + 1), 2)                                 \
      probe_gemv_tma##NS(const __nv_bfloat16* w, const __nv_bfloat16* x, __nv_bfloat16* y, unsigned int K, \
                         unsigned int N) {                                                              \
    probe_gemv_tma<NS>(w, x, y, K, N);                                                                 \
  }
PROBE_GEMV_TMA(4)
PROBE_GEMV_TMA(6)
