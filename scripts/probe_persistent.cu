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

// The full / empty barriers of an NS-slot ring (one arrival each), initialised and fenced for the
// async proxy; the caller's __syncthreads() then publishes them to the block.
__device__ __forceinline__ void ring_barriers_init(unsigned long long* full, unsigned long long* empty,
                                                   unsigned int ns) {
  if (threadIdx.x < ns) {
    mbar_init(full + threadIdx.x, 1);
    mbar_init(empty + threadIdx.x, 1);
  }
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
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
  ring_barriers_init(full, empty, NS);
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
  ring_barriers_init(full, empty, NS);
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

// ---- Dataflow variant (session 27): per-piece readiness instead of grid barriers -------------
// bench/NOTES-decode.md, "Sketch: a planned persistent decode kernel without grid barriers". One
// block per SM: a producer warp streams the block's chunks with TMA into NS slots of DF_CB bytes
// (as probe_chain_tma); W consumer warps take the chunks in turn (chunk i: warp i % W) with no
// block-wide barrier anywhere: each warp computes its chunk with mma.m16n8k16 (weights pre-packed
// in fragment order, so one 16-byte shared load per lane per MMA), stores the tile's partial row
// sums for that chunk, and the warp that completes a tile's last chunk (a shared counter per tile)
// sums the partials in chunk order (deterministic), stores the tile's 16 outputs and publishes
// them: a release add on the counter of the output piece they belong to.
//   Work split: stage s's 16-row tiles are cut into gridDim.x contiguous runs (floor(b T / grid));
//   a tile's chunks are 16 rows x DF_KC columns (the last one narrower), in k order.
//   Readiness: x piece p of a stage (elements [p DF_KC, (p + 1) DF_KC)) is the previous stage's
//   output rows of that range; its counter counts the previous stage's finished tiles in the range.
//   MODE 0: a chunk waits only for its own x piece (per-piece readiness); MODE 1: for every tile
//   of the previous stage (the stage-wide count, i.e. a grid barrier, but per warp); MODE 2: for
//   nothing (timing only: the check fails by design); session 28's MODE 3 (the flag in the data),
//   4 and 5 (timing only) are described at probe_chain_df; the `runs` argument (nullptr or a table)
//   at DfCursor::next.
// Weights: stage s's w packed as [tile][chunk][k step j][lane][8 bf16]: lane (g, t) = (lane / 4,
// lane % 4) holds rows g, g + 8 and columns 2t, 2t + 1, 2t + 8, 2t + 9 of step j, in the order of
// mma.m16n8k16's A fragment (scripts/probe_persistent.py pack_fragments). x is broadcast into all
// eight B columns, so every column of D is the same dot and lanes with t = 0 hold rows g and g + 8.
// Launch: grid = SM count, block 32 * (W + 1), dynamic shared memory df_smem(NS, W, TS, XBYTES, KC) bytes.
#define DF_KC 512
#define DF_CB (16 * DF_KC * 2)
#define DF_TILE_SLOTS 32  // tile slots of partial sums (default): > W + NS, so a slot is reused only after its tile is done
#define DF_MAX_CHUNKS 16  // K <= DF_KC * DF_MAX_CHUNKS

struct DfStage {
  const __nv_bfloat16* w;  // packed (above)
  const __nv_bfloat16* x;
  __nv_bfloat16* y;
  unsigned int K, N;
  unsigned int* ready;       // this stage's output pieces (ceil(N / DF_KC) counters, then the total); MODE 3: its N LL words
  const unsigned int* wait;  // the previous stage's `ready` (nullptr: x is the chain's input)
  unsigned int prev_n;       // the previous stage's N
  unsigned int xoff;         // XBYTES > 0: where this stage's x starts in the block's x ring (elements)
  unsigned long long pad2;   // dfsk: the stage's nparts (u32 per tile); 64 bytes: copied to shared memory as 16-byte words
};
static_assert(sizeof(DfStage) == 64, "the stage table's layout (scripts/probe_persistent.py)");

// The chunk sequence of this block (producer and consumers walk the same one).
// KC: the chunk width (DF_KC, or session 28's `k1` variants' 1024).
template <int KC = DF_KC> struct DfCursor {
  unsigned int s = 0, t = 0, t1 = 0, c = 0, nc = 0, lt = 0;  // stage, tile, run end, chunk, chunks per tile, tile ordinal
  bool in_stage = false;
  // runs: nullptr, or this launch's [stage][block] tile runs {t, t1} (the `_bal` variants: the host
  // balances each block's bytes over the chain, scripts/probe_persistent.py balanced_runs).
  __device__ __forceinline__ bool next(const DfStage* st, unsigned int n, const uint2* runs) {
    if (in_stage) {
      if (++c < nc) return true;
      c = 0;
      ++lt;
      if (++t < t1) return true;
      ++s;
      in_stage = false;
    }
    for (; s < n; ++s) {
      if (runs != nullptr) {
        const uint2 r = runs[(size_t)s * gridDim.x + blockIdx.x];
        t = r.x;
        t1 = r.y;
      } else {
        const unsigned int T = (st[s].N + 15) / 16;
        t = (unsigned int)((unsigned long long)blockIdx.x * T / gridDim.x);
        t1 = (unsigned int)((unsigned long long)(blockIdx.x + 1) * T / gridDim.x);
      }
      nc = (st[s].K + KC - 1) / KC;
      c = 0;
      if (t < t1) {
        in_stage = true;
        return true;
      }
    }
    return false;
  }
  __device__ __forceinline__ unsigned int kc(const DfStage& st) const { return min(KC, st.K - c * KC); }
  __device__ __forceinline__ const __nv_bfloat16* src(const DfStage& st) const {
    return st.w + (size_t)t * 16 * st.K + (size_t)c * 16 * KC;
  }
};

#define DF_XB_MAX 8  // XBYTES > 0: DF_XB_MAX * DF_MAX_CHUNKS piece tags, i.e. x rings up to 64K elements
__host__ __device__ constexpr unsigned int df_smem(int ns, int w, int ts = DF_TILE_SLOTS, int xbytes = 0, int kc = DF_KC) {
  return ns * 32 * kc + ts * (DF_MAX_CHUNKS * DF_KC / kc) * 16 * 4 +
         (xbytes ? xbytes + DF_XB_MAX * DF_MAX_CHUNKS * 4 : w * kc * 2) + (ts + 3) / 4 * 16 +
         PROBE_MAX_STAGES * sizeof(DfStage) + 16 * ns;
}

// Shared memory of the dataflow kernels (df_smem's layout): the ring, the tiles' partial sums, x (one
// piece per warp, or XBYTES of shared x ring and its tags), the tile counters, the stage table, the
// ring's barriers; `init` fills the table, zeroes the counters and tags and sets up the barriers.
template <int NS, int W, int TS, int XBYTES, int KC> struct DfShared {
  static constexpr unsigned int CB = 32 * KC, MAXC = DF_MAX_CHUNKS * DF_KC / KC;  // slot bytes, chunks per tile
  uint4* ring;                                                                       // NS x CB
  float* part;                                                                       // [tile slot][chunk][16]
  uint4* xw;                                                                         // [warp][KC bf16] or the x ring
  unsigned int* xtag;                                                                // XBYTES: [piece position]
  unsigned int* tcount;                                                              // [tile slot]
  DfStage* stages;
  unsigned long long *full, *empty;
  __device__ explicit DfShared(uint4* smem) {
    ring = smem;
    part = reinterpret_cast<float*>(ring + NS * (CB / 16));
    xw = reinterpret_cast<uint4*>(part + TS * MAXC * 16);
    xtag = reinterpret_cast<unsigned int*>(xw + XBYTES / 16);
    tcount = XBYTES ? xtag + DF_XB_MAX * DF_MAX_CHUNKS : reinterpret_cast<unsigned int*>(xw + W * KC / 8);
    stages = reinterpret_cast<DfStage*>(tcount + (TS + 3) / 4 * 4);  // 16-byte aligned
    full = reinterpret_cast<unsigned long long*>(stages + PROBE_MAX_STAGES);
    empty = full + NS;
  }
  __device__ void init(const DfStage* stages_g, unsigned int n_stages) {
    for (unsigned int i = threadIdx.x; i < n_stages * (sizeof(DfStage) / 16); i += blockDim.x)
      reinterpret_cast<uint4*>(stages)[i] = reinterpret_cast<const uint4*>(stages_g)[i];
    for (unsigned int i = threadIdx.x; i < TS; i += blockDim.x) tcount[i] = 0;
    if (XBYTES)
      for (unsigned int i = threadIdx.x; i < DF_XB_MAX * DF_MAX_CHUNKS; i += blockDim.x) xtag[i] = 0;
    ring_barriers_init(full, empty, NS);
    __syncthreads();
  }
};

// The producer lane of a dataflow kernel: the block's chunks in its cursor's order (Cur: `next`,
// `src`, `kc`, `s`), each into ring slot i % NS with one TMA copy once its previous chunk there is
// consumed; PF > 0 also prefetches the PF chunks past the ring into the L2 (a second cursor ahead).
template <int NS, int CB, int PF, class Cur, class Run>
__device__ void df_produce(const DfStage* stages, unsigned int n_stages, const Run* runs, uint4* ring,
                           unsigned long long* full, unsigned long long* empty) {
  Cur cur, pcur;  // pcur: the next chunk to prefetch into the L2 (PF), chunk pi
  unsigned int pi = 0;
  bool pmore = PF > 0 && pcur.next(stages, n_stages, runs);
  for (unsigned int i = 0; cur.next(stages, n_stages, runs); ++i) {
    for (; PF > 0 && pmore && pi < i + NS + PF; ++pi) {
      if (pi >= i + NS) l2_prefetch_bulk(pcur.src(stages[pcur.s]), 32 * pcur.kc(stages[pcur.s]));
      pmore = pcur.next(stages, n_stages, runs);
    }
    const DfStage& st = stages[cur.s];
    const unsigned int slot = i % NS, bytes = 32 * cur.kc(st);
    if (i >= NS) mbar_wait(empty + slot, ((i / NS) - 1) & 1);
    mbar_expect_tx(full + slot, bytes);
    tma_load(ring + slot * (CB / 16), cur.src(st), bytes, full + slot);
  }
}

// One chunk's dot products: 16 weight rows (ring slot a, fragment order, this lane's words) x `steps`
// 16-column steps against x (xs32, bf16 pairs) with CH independent chains of MMAs; r0, r2: rows g and
// g + 8 in the lanes with t == 0, the even chains' sum plus the odd chains' (deterministic).
template <int CH>
__device__ __forceinline__ void df_chunk_dot(const uint4* a, const unsigned int* xs32, unsigned int steps, unsigned int t,
                                             float& r0, float& r2) {
  float acc0[4] = {0.f, 0.f, 0.f, 0.f}, acc1[4] = {0.f, 0.f, 0.f, 0.f};
  if (CH == 2) {
#pragma unroll 2
    for (unsigned int j = 0; j < steps; j += 2) {
      const uint4 av = a[j * 32];
      mma_bf16(acc0, av.x, av.y, av.z, av.w, xs32[j * 8 + t], xs32[j * 8 + 4 + t]);
      if (j + 1 < steps) {
        const uint4 bv = a[(j + 1) * 32];
        mma_bf16(acc1, bv.x, bv.y, bv.z, bv.w, xs32[(j + 1) * 8 + t], xs32[(j + 1) * 8 + 4 + t]);
      }
    }
  } else {  // steps % CH == 0 (the host checks K % (16 CH) == 0 per chunk)
    float acc[CH][4];
#pragma unroll
    for (int u = 0; u < CH; ++u) acc[u][0] = acc[u][1] = acc[u][2] = acc[u][3] = 0.f;
    for (unsigned int j = 0; j < steps; j += CH) {
      uint4 av[CH];
#pragma unroll
      for (int u = 0; u < CH; ++u) av[u] = a[(j + u) * 32];
#pragma unroll
      for (int u = 0; u < CH; ++u)
        mma_bf16(acc[u], av[u].x, av[u].y, av[u].z, av[u].w, xs32[(j + u) * 8 + t], xs32[(j + u) * 8 + 4 + t]);
    }
#pragma unroll
    for (int u = 0; u < CH; ++u) {  // in chain order
      float* d = u % 2 == 0 ? acc0 : acc1;
      d[0] += acc[u][0];
      d[2] += acc[u][2];
    }
  }
  r0 = acc0[0] + acc1[0];
  r2 = acc0[2] + acc1[2];
}

// Stores a chunk's 16 partial row sums (pp) and counts the chunk on its tile slot's counter: true in
// the warp whose chunk is the tile's `need`-th, which then sums the slot's chunks and publishes them.
__device__ __forceinline__ bool df_chunk_done(float* pp, unsigned int* count, float r0, float r2, unsigned int need,
                                              unsigned int lane) {
  if ((lane & 3) == 0) {
    pp[lane >> 2] = r0;
    pp[(lane >> 2) + 8] = r2;
    __threadfence_block();
  }
  __syncwarp();
  unsigned int prev = 0;
  if (lane == 0) prev = atomicAdd(count, 1u);
  prev = __shfl_sync(0xffffffffu, prev, 0);
  if (prev != need - 1) return false;
  __threadfence_block();
  return true;
}

// W divides NS: slot i % NS then only ever holds chunks of warp i % W, which waits on chunk i's
// slot after consuming its chunk i - NS there, so the slot's barrier is in chunk i's phase (a
// parity wait is fooled by a barrier two phases behind, as when more warps than slots wait at the
// start, or when chunk i - NS has not landed: the first version's launch failure).
// LANE0: only lane 0 of a waiting warp polls the counter (then a warp barrier), not all 32 lanes.
// REL (session 28): the completing warp publishes a tile with a warp barrier and lane 0's release
// adds alone (the barrier orders the 16 lanes' stores before lane 0's release, which is cumulative
// over them), not a __threadfence() (fence.sc.gpu) in each of the 16 lanes first.
// MODE 3 (session 28, `_ll`): the flag in the data, as NCCL's LL protocol: the completing warp also
// stores each output as a 32-bit word (DF_LL_TAG << 16 | bf16 bits) into the stage's `ready` words
// (one per output row; the launch's memset node zeroes them), with no fence and no counter; a chunk
// reads its x piece from the previous stage's words (`wait`) with volatile loads, again until every
// word carries the tag (elements past the previous stage's rows, which no tile writes, come from x).
#define DF_LL_TAG 1u
PROBE_LD16(ld_vol16, "ld.volatile.global.v4.u32")
__device__ __forceinline__ uint2 ld_cg8(const void* p) {
  uint2 v;
  asm volatile("ld.global.cg.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}
__device__ __forceinline__ bool ll_tagged(const uint4& w) {
  return (w.x >> 16) == DF_LL_TAG && (w.y >> 16) == DF_LL_TAG && (w.z >> 16) == DF_LL_TAG && (w.w >> 16) == DF_LL_TAG;
}
// TS: tile slots of partial sums (session 28's 12-slot rings need fewer than DF_TILE_SLOTS to fit).
// XBYTES (session 28, `_sx`): 0, each warp loads the x pieces of its chunks into its own buffer
// (reloading when its next chunk needs another piece); else the block shares x in a ring of XBYTES
// (stage s's x at its `xoff`, whole pieces) with a tag per piece position (s + 1 once loaded): the
// first warp to need a piece loads it (polls it, MODE 3), the others read it from shared memory.
// The host places the stages so that no two a block's warps can be working on at once overlap
// (scripts/probe_persistent.py x_ring).
// CH (session 28, `_cN`): independent chains of MMAs per chunk (the A fragments of CH steps loaded
// before their MMAs); 2 before. PF (session 28, `_pfN`): the producer also prefetches into the L2
// the PF chunks past the ring (cp.async.bulk.prefetch.L2), so that the DRAM stream runs on while
// every slot waits for consumers stalled on their x.
// KC (session 28, `k1`): chunks of 16 rows x KC columns (KC x 32 bytes): 1024 makes 32 KB slots.
template <int NS, int W, int MODE, bool LANE0 = false, bool REL = false, int TS = DF_TILE_SLOTS, int XBYTES = 0,
          int CH = 2, int PF = 0, int KC = DF_KC>
__device__ void probe_chain_df(const DfStage* stages_g, unsigned int n_stages, const uint2* runs) {
  using Sh = DfShared<NS, W, TS, XBYTES, KC>;
  constexpr unsigned int CB = Sh::CB, MAXC = Sh::MAXC;
  static_assert(NS % W == 0, "a slot shared by two warps can alias its barrier's phases");
  static_assert(TS > W + NS, "a tile slot is reused only after its tile is done");
  static_assert(KC == DF_KC || (MODE >= 2 && XBYTES == 0), "counters and shared x count DF_KC pieces");
  static_assert(df_smem(NS, W, TS, XBYTES, KC) <= 227 * 1024, "one block per SM must fit the H200's shared memory");
  extern __shared__ __align__(128) uint4 smem[];
  Sh sh(smem);
  uint4 *ring = sh.ring, *xw = sh.xw;
  float* part = sh.part;
  unsigned int *xtag = sh.xtag, *tcount = sh.tcount;
  DfStage* stages = sh.stages;
  unsigned long long *full = sh.full, *empty = sh.empty;
  const unsigned int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (n_stages > PROBE_MAX_STAGES) return;
  sh.init(stages_g, n_stages);

  if (warp == W) {  // the producer
    if (lane == 0) df_produce<NS, CB, PF, DfCursor<KC>>(stages, n_stages, runs, ring, full, empty);
    return;
  }

  const unsigned int t = lane & 3;
  uint4* xs = xw + warp * (KC / 8);
  const unsigned int* xs32 = reinterpret_cast<const unsigned int*>(xs);
  // x piece [k0, k0 + kc) of stage st into dst: from the previous stage's LL words (MODE 3), else x.
  auto load_piece = [&](uint4* dst, const DfStage& st, unsigned int k0, unsigned int kc) {
    if (MODE == 3 && st.wait != nullptr) {  // 4 elements a lane at a time, tags checked
      uint2* d2 = reinterpret_cast<uint2*>(dst);
      for (unsigned int q = lane; q < kc / 4; q += 32) {
        const unsigned int e = k0 + 4 * q;
        if (e >= st.prev_n) {
          d2[q] = ld_cg8(st.x + e);
          continue;
        }
        uint4 v = ld_vol16(st.wait + e);
        while (!ll_tagged(v)) v = ld_vol16(st.wait + e);
        d2[q] = make_uint2((v.x & 0xffffu) | (v.y << 16), (v.z & 0xffffu) | (v.w << 16));
      }
    } else {
      for (unsigned int q = lane; q < kc / 8; q += 32) dst[q] = ld_cg16(st.x + k0 + 8 * q);
    }
  };
  unsigned int known_s = ~0u, known = 0;  // pieces of stage known_s's x seen ready (MODE 0), or all (MODE 1)
  unsigned int xs_s = ~0u, xs_c = ~0u;    // the x piece in xs (4 chunks per tile: warp w always has piece w % 4)
  DfCursor<KC> cur;
  for (unsigned int i = 0; cur.next(stages, n_stages, runs); ++i) {
    if (i % W != warp) continue;
    const DfStage& st = stages[cur.s];
    const unsigned int kc = cur.kc(st), k0 = cur.c * KC;
    if (MODE < 2 && st.wait != nullptr) {
      if (known_s != cur.s) {
        known_s = cur.s;
        known = 0;
      }
      const unsigned int bit = MODE == 0 ? 1u << cur.c : 1u;
      if (!(known & bit)) {
        const unsigned int pieces = (st.prev_n + DF_KC - 1) / DF_KC;
        const unsigned int* ctr = MODE == 0 ? st.wait + cur.c : st.wait + pieces;
        // (a piece past the previous stage's rows has no writer: shape `floor` reads past them)
        const unsigned int target = MODE != 0 ? (st.prev_n + 15) / 16
                                    : k0 < st.prev_n ? (min(st.prev_n, k0 + DF_KC) - k0 + 15) / 16 : 0;
        if (!LANE0 || lane == 0) {
          while (ld_acquire(ctr) < target) {
          }
        }
        if (LANE0) __syncwarp();
        known |= bit;
      }
    }
    // A stage's x never changes once ready: keep the piece. MODE 4 (timing only): as MODE 2, and a
    // warp loads an x piece only at its first chunk of a stage (what reloading the piece costs).
    if (XBYTES) {
      const unsigned int pos = st.xoff + k0;
      volatile unsigned int* tag = xtag + pos / DF_KC;
      xs = xw + pos / 8;
      xs32 = reinterpret_cast<const unsigned int*>(xs);
      unsigned int have = 0;
      if (lane == 0) have = *tag;
      have = __shfl_sync(0xffffffffu, have, 0);
      if (have != cur.s + 1) {  // (two warps may both load it: the same values)
        load_piece(xs, st, k0, kc);
        __syncwarp();
        if (lane == 0) {
          __threadfence_block();
          *tag = cur.s + 1;
        }
      } else {
        __threadfence_block();  // the piece's words after its tag
      }
      __syncwarp();
    } else if (xs_s != cur.s || (MODE != 4 && MODE != 5 && xs_c != cur.c)) {
      xs_s = cur.s;
      xs_c = cur.c;
      load_piece(xs, st, k0, kc);
      __syncwarp();
    }
    const unsigned int slot = i % NS;
    mbar_wait(full + slot, (i / NS) & 1);
    const uint4* a = ring + slot * (CB / 16) + lane;
    // MODE 5 (timing only): as MODE 2 without the MMAs (the stream and the warps' handshakes alone).
    float r0, r2;
    df_chunk_dot<CH>(a, xs32, kc / 16 * (MODE != 5), t, r0, r2);
    __syncwarp();  // every lane's reads of the slot and of xs are done
    if (lane == 0) mbar_arrive(empty + slot);
    const unsigned int ts = cur.lt % TS;
    if (df_chunk_done(part + (ts * MAXC + cur.c) * 16, tcount + ts, r0, r2, cur.nc, lane)) {
      // this warp completed the tile: sum its chunks in order, publish
      const unsigned int row = cur.t * 16 + lane;
      if (lane < 16) {
        const float* tp = part + ts * MAXC * 16 + lane;
        float s = 0.0f;
        for (unsigned int cc = 0; cc < cur.nc; ++cc) s += tp[cc * 16];
        if (row < st.N) {
          const __nv_bfloat16 b = __float2bfloat16_rn(s);
          st.y[row] = b;
          if (MODE == 3) st.ready[row] = DF_LL_TAG << 16 | __bfloat16_as_ushort(b);
        }
        if (!REL && MODE != 3) __threadfence();
      }
      __syncwarp();
      if (lane == 0) {
        tcount[ts] = 0;
        if (MODE < 2) {
          asm volatile("red.release.gpu.global.add.u32 [%0], 1;\n" ::"l"(st.ready + cur.t * 16 / DF_KC) : "memory");
          const unsigned int pieces = (st.N + DF_KC - 1) / DF_KC;
          asm volatile("red.release.gpu.global.add.u32 [%0], 1;\n" ::"l"(st.ready + pieces) : "memory");
        }
      }
    }
  }
}

#define PROBE_DF_KERNEL_K(NAME, NS, W, MODE, LANE0, REL, TS, XBYTES, CH, PF, KC)                  \
  extern "C" __global__ void __launch_bounds__(32 * (W + 1), 1)                                        \
      NAME(const DfStage* stages, unsigned int n_stages, const uint2* runs) {                          \
    probe_chain_df<NS, W, MODE, LANE0, REL, TS, XBYTES, CH, PF, KC>(stages, n_stages, runs);           \
  }
#define PROBE_DF_KERNEL_P(NAME, NS, W, MODE, LANE0, REL, TS, XBYTES, CH, PF) \
  PROBE_DF_KERNEL_K(NAME, NS, W, MODE, LANE0, REL, TS, XBYTES, CH, PF, DF_KC)
#define PROBE_DF_KERNEL_C(NAME, NS, W, MODE, LANE0, REL, TS, XBYTES, CH) \
  PROBE_DF_KERNEL_P(NAME, NS, W, MODE, LANE0, REL, TS, XBYTES, CH, 0)
#define PROBE_DF_KERNEL_X(NAME, NS, W, MODE, LANE0, REL, TS, XBYTES) \
  PROBE_DF_KERNEL_C(NAME, NS, W, MODE, LANE0, REL, TS, XBYTES, 2)
#define PROBE_DF_KERNEL_TS(NAME, NS, W, MODE, LANE0, REL, TS) PROBE_DF_KERNEL_X(NAME, NS, W, MODE, LANE0, REL, TS, 0)
#define PROBE_DF_KERNEL(NAME, NS, W, MODE, LANE0, REL) PROBE_DF_KERNEL_TS(NAME, NS, W, MODE, LANE0, REL, DF_TILE_SLOTS)
PROBE_DF_KERNEL(probe_chain_df10w10, 10, 10, 0, false, false)
PROBE_DF_KERNEL(probe_chain_df8w8, 8, 8, 0, false, false)
PROBE_DF_KERNEL(probe_chain_df10w5, 10, 5, 0, false, false)
PROBE_DF_KERNEL(probe_chain_df8w4, 8, 4, 0, false, false)
PROBE_DF_KERNEL(probe_chain_df10w10_stagewide, 10, 10, 1, false, false)
PROBE_DF_KERNEL(probe_chain_df10w10_nowait, 10, 10, 2, false, false)
PROBE_DF_KERNEL(probe_chain_df8w8_nowait, 8, 8, 2, false, false)
PROBE_DF_KERNEL(probe_chain_df10w10_l0, 10, 10, 0, true, false)
PROBE_DF_KERNEL(probe_chain_df8w8_l0, 8, 8, 0, true, false)
PROBE_DF_KERNEL(probe_chain_df10w5_l0, 10, 5, 0, true, false)
PROBE_DF_KERNEL(probe_chain_df8w8_l0_stagewide, 8, 8, 1, true, false)
PROBE_DF_KERNEL(probe_chain_df8w8_rel, 8, 8, 0, false, true)
PROBE_DF_KERNEL(probe_chain_df8w8_l0_rel, 8, 8, 0, true, true)
PROBE_DF_KERNEL(probe_chain_df8w8_ll, 8, 8, 3, false, false)
PROBE_DF_KERNEL(probe_chain_df10w10_ll, 10, 10, 3, false, false)
PROBE_DF_KERNEL(probe_chain_df10w5_ll, 10, 5, 3, false, false)
// Session 28: 12 slots of 16 KB (192 KB in flight, as session 26's TMA ring) over 4 or 6 warps.
PROBE_DF_KERNEL_TS(probe_chain_df12w4_ll, 12, 4, 3, false, false, 20)
PROBE_DF_KERNEL_TS(probe_chain_df12w4_nowait, 12, 4, 2, false, false, 20)
PROBE_DF_KERNEL_TS(probe_chain_df12w6_ll, 12, 6, 3, false, false, 20)
PROBE_DF_KERNEL_TS(probe_chain_df12w6_nowait, 12, 6, 2, false, false, 20)
PROBE_DF_KERNEL(probe_chain_df8w4_ll, 8, 4, 3, false, false)
PROBE_DF_KERNEL(probe_chain_df8w8_noreload, 8, 8, 4, false, false)
PROBE_DF_KERNEL(probe_chain_df8w8_nowait_rel, 8, 8, 2, false, true)
PROBE_DF_KERNEL(probe_chain_df8w8_nomma, 8, 8, 5, false, true)
PROBE_DF_KERNEL_TS(probe_chain_df12w4_nowait_rel, 12, 4, 2, false, true, 20)
PROBE_DF_KERNEL_TS(probe_chain_df12w4_nomma, 12, 4, 5, false, true, 20)
// Shared x (64 KB of stage buffers): LL, and the timing-only no-wait form without the fence.
PROBE_DF_KERNEL_X(probe_chain_df8w8_ll_sx, 8, 8, 3, false, false, 17, 65536)
PROBE_DF_KERNEL_X(probe_chain_df8w8_nowait_rel_sx, 8, 8, 2, false, true, 17, 65536)
PROBE_DF_KERNEL_X(probe_chain_df8w4_ll_sx, 8, 4, 3, false, false, 17, 65536)
// More independent MMA chains per chunk (`_c4`, `_c8`).
PROBE_DF_KERNEL_C(probe_chain_df8w8_ll_c4, 8, 8, 3, false, false, DF_TILE_SLOTS, 0, 4)
PROBE_DF_KERNEL_C(probe_chain_df8w8_ll_c8, 8, 8, 3, false, false, DF_TILE_SLOTS, 0, 8)
PROBE_DF_KERNEL_C(probe_chain_df8w8_nowait_rel_c8, 8, 8, 2, false, true, DF_TILE_SLOTS, 0, 8)
PROBE_DF_KERNEL_C(probe_chain_df8w4_ll_c8, 8, 4, 3, false, false, DF_TILE_SLOTS, 0, 8)
PROBE_DF_KERNEL_C(probe_chain_df12w4_ll_c8, 12, 4, 3, false, false, 20, 0, 8)
PROBE_DF_KERNEL_C(probe_chain_df12w4_nowait_rel_c8, 12, 4, 2, false, true, 20, 0, 8)
PROBE_DF_KERNEL_C(probe_chain_df12w6_ll_c8, 12, 6, 3, false, false, 20, 0, 8)
// L2 prefetch past the ring (`_pfN`).
PROBE_DF_KERNEL_P(probe_chain_df8w8_ll_c8_pf4, 8, 8, 3, false, false, DF_TILE_SLOTS, 0, 8, 4)
PROBE_DF_KERNEL_P(probe_chain_df8w8_ll_c8_pf8, 8, 8, 3, false, false, DF_TILE_SLOTS, 0, 8, 8)
PROBE_DF_KERNEL_P(probe_chain_df8w8_ll_c8_pf16, 8, 8, 3, false, false, DF_TILE_SLOTS, 0, 8, 16)
PROBE_DF_KERNEL_P(probe_chain_df8w8_ll_c8_pf32, 8, 8, 3, false, false, DF_TILE_SLOTS, 0, 8, 32)
PROBE_DF_KERNEL_P(probe_chain_df8w8_nowait_rel_c8_pf8, 8, 8, 2, false, true, DF_TILE_SLOTS, 0, 8, 8)
PROBE_DF_KERNEL_P(probe_chain_df12w4_ll_c8_pf8, 12, 4, 3, false, false, 20, 0, 8, 8)
// 32 KB chunks (`k1`: 16 rows x 1024): 6 slots, 192 KB in flight, over 6 or 3 warps, 8 chains.
PROBE_DF_KERNEL_K(probe_chain_df6w6k1_ll_c8, 6, 6, 3, false, false, 13, 0, 8, 0, 1024)
PROBE_DF_KERNEL_K(probe_chain_df6w3k1_ll_c8, 6, 3, 3, false, false, 13, 0, 8, 0, 1024)
PROBE_DF_KERNEL_K(probe_chain_df6w6k1_nowait_rel_c8, 6, 6, 2, false, true, 13, 0, 8, 0, 1024)
PROBE_DF_KERNEL_K(probe_chain_df6w3k1_nowait_rel_c8, 6, 3, 2, false, true, 13, 0, 8, 0, 1024)
PROBE_DF_KERNEL_K(probe_chain_df4w4k1_ll_c8, 4, 4, 3, false, false, 13, 0, 8, 0, 1024)
PROBE_DF_KERNEL_TS(probe_chain_df12w4_noreload, 12, 4, 4, false, false, 20)

// ---- Split-K dataflow variant (session 28, `dfsk`): the LL chain above (MODE 3, 8 MMA chains), with
// each stage's work cut into units of one chunk (16 rows x DF_KC columns) instead of whole tiles, so
// that every block gets floor or ceil of the stage's units / grid (the tile variants give 60 of the
// 1B's 132 blocks two QKV tiles and the rest one, and the stage ends one tile after most SMs are done).
// A tile may then be computed by up to DFSK_PMAX blocks: each sums the chunks it did in chunk order
// and publishes that partial as 64-bit LL words {f32 bits, DF_LL_TAG} in its part slot p of the
// stage's words [N][DFSK_PMAX]; the next stage, reading its x piece, sums the nparts[tile] partials
// of each element in part order (deterministic) and rounds to bf16. (Stage outputs y are not
// written: the host rebuilds them from the words for the check, with the same sums.)
//   runs[stage][block] = {u0, u1, p0, 0}: the block's units [u0, u1) (unit = tile * nc + chunk) and
//   its part index in its first tile (0 when the tile starts in this block; later tiles are 0).
//   DfStage: `ready` = the stage's words, `wait` = the previous stage's, `pad2` = nparts (u32 per tile).
#define DFSK_PMAX 4
__device__ __forceinline__ uint2 ld_vol8(const void* p) {
  uint2 v;
  asm volatile("ld.volatile.global.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "l"(p) : "memory");
  return v;
}
template <int NS, int W, int TS, int CH>
__device__ void probe_chain_dfsk(const DfStage* stages_g, unsigned int n_stages, const uint4* runs) {
  static_assert(NS % W == 0, "a slot shared by two warps can alias its barrier's phases");
  static_assert(TS > W + NS, "a tile slot is reused only after its tile is done");
  static_assert(df_smem(NS, W, TS) <= 227 * 1024, "one block per SM must fit the H200's shared memory");
  extern __shared__ __align__(128) uint4 smem[];
  DfShared<NS, W, TS, 0, DF_KC> sh(smem);
  uint4 *ring = sh.ring, *xw = sh.xw;
  float* part = sh.part;
  unsigned int* tcount = sh.tcount;
  DfStage* stages = sh.stages;
  unsigned long long *full = sh.full, *empty = sh.empty;
  const unsigned int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (n_stages > PROBE_MAX_STAGES) return;
  sh.init(stages_g, n_stages);
  // The block's unit sequence: stage s, unit u of [u0, u1), tile t, chunk c, tile ordinal lt.
  struct Cur {
    unsigned int s = 0, u = 0, u0 = 0, u1 = 0, p0 = 0, nc = 0, t = 0, c = 0, lt = ~0u;
    bool in = false;
    __device__ bool next(const DfStage* st, unsigned int n, const uint4* runs) {
      if (in && ++u < u1) {
        t = u / nc;
        c = u % nc;
        lt += c == 0;
        return true;
      }
      if (in) ++s;
      in = false;
      for (; s < n; ++s) {
        const uint4 r = runs[(size_t)s * gridDim.x + blockIdx.x];
        u0 = u = r.x;
        u1 = r.y;
        p0 = r.z;
        nc = (st[s].K + DF_KC - 1) / DF_KC;
        if (u < u1) {
          in = true;
          t = u / nc;
          c = u % nc;
          ++lt;
          return true;
        }
      }
      return false;
    }
    __device__ unsigned int kc(const DfStage& st) const { return min(DF_KC, st.K - c * DF_KC); }
    __device__ const __nv_bfloat16* src(const DfStage& st) const {
      return st.w + (size_t)t * 16 * st.K + (size_t)c * 16 * DF_KC;
    }
    // This block's chunks of tile t: [lo, hi).
    __device__ unsigned int lo() const { return t == u0 / nc ? u0 - t * nc : 0; }
    __device__ unsigned int hi() const { return t == (u1 - 1) / nc ? u1 - t * nc : nc; }
  };

  if (warp == W) {  // the producer
    if (lane == 0) df_produce<NS, DF_CB, 0, Cur>(stages, n_stages, runs, ring, full, empty);
    return;
  }

  const unsigned int t4 = lane & 3;
  uint4* xs = xw + warp * (DF_KC / 8);
  const unsigned int* xs32 = reinterpret_cast<const unsigned int*>(xs);
  unsigned int xs_s = ~0u, xs_c = ~0u;
  Cur cur;
  for (unsigned int i = 0; cur.next(stages, n_stages, runs); ++i) {
    if (i % W != warp) continue;
    const DfStage& st = stages[cur.s];
    const unsigned int kc = cur.kc(st), k0 = cur.c * DF_KC;
    if (xs_s != cur.s || xs_c != cur.c) {
      xs_s = cur.s;
      xs_c = cur.c;
      if (st.wait != nullptr) {  // element by element: the sum of its tile's partials, in part order
        // Parts 0 and 1 of the lane's DF_KC / 32 elements loaded all at once (16 bytes each) and
        // loaded again all at once until every one is tagged (the first
        // form polled each element alone, one L2 round trip after another); parts 2.. one by one.
        const unsigned int* nparts = reinterpret_cast<const unsigned int*>(stages[cur.s - 1].pad2);
        __nv_bfloat16* xb = reinterpret_cast<__nv_bfloat16*>(xs);
        const unsigned char* words = reinterpret_cast<const unsigned char*>(st.wait);
        constexpr int E = DF_KC / 32;
        uint4 v[E];
        unsigned int np[E];        // parts of element j's tile
        unsigned int pending = 0;  // bit j: element j still untagged
#pragma unroll
        for (int j = 0; j < E; ++j) {
          const unsigned int q = lane + 32 * j, e = k0 + q;
          np[j] = 0;
          if (q < kc && e < st.prev_n) {
            np[j] = __ldg(nparts + e / 16);
            pending |= 1u << j;
          }
        }
        for (unsigned int todo = pending; todo != 0;) {
#pragma unroll
          for (int j = 0; j < E; ++j)
            if (todo >> j & 1) v[j] = ld_vol16(words + (size_t)(k0 + lane + 32 * j) * DFSK_PMAX * 8);
#pragma unroll
          for (int j = 0; j < E; ++j)
            if ((todo >> j & 1) && v[j].y == DF_LL_TAG && (np[j] < 2 || v[j].w == DF_LL_TAG)) todo &= ~(1u << j);
        }
#pragma unroll
        for (int j = 0; j < E; ++j) {
          const unsigned int q = lane + 32 * j, e = k0 + q;
          if (q >= kc) continue;
          if (e >= st.prev_n) {
            xb[q] = st.x[e];
            continue;
          }
          const unsigned char* wd = words + (size_t)e * DFSK_PMAX * 8;
          float sum = 0.0f + __uint_as_float(v[j].x);
          if (np[j] > 1) sum += __uint_as_float(v[j].z);
          for (unsigned int p = 2; p < np[j]; ++p) {
            uint2 w = ld_vol8(wd + 8 * p);
            while (w.y != DF_LL_TAG) w = ld_vol8(wd + 8 * p);
            sum += __uint_as_float(w.x);
          }
          xb[q] = __float2bfloat16_rn(sum);
        }
      } else {
        for (unsigned int q = lane; q < kc / 8; q += 32) xs[q] = ld_cg16(st.x + k0 + 8 * q);
      }
      __syncwarp();
    }
    const unsigned int slot = i % NS;
    mbar_wait(full + slot, (i / NS) & 1);
    const uint4* a = ring + slot * (DF_CB / 16) + lane;
    float r0, r2;
    df_chunk_dot<CH>(a, xs32, kc / 16, t4, r0, r2);
    __syncwarp();
    if (lane == 0) mbar_arrive(empty + slot);
    const unsigned int ts = cur.lt % TS, lo = cur.lo(), hi = cur.hi();
    if (df_chunk_done(part + (ts * DF_MAX_CHUNKS + cur.c) * 16, tcount + ts, r0, r2, hi - lo, lane)) {
      // this warp completed the block's share of the tile: publish its partial
      const unsigned int row = cur.t * 16 + lane;
      if (lane < 16 && row < st.N) {
        const float* tp = part + ts * DF_MAX_CHUNKS * 16 + lane;
        float s = 0.0f;
        for (unsigned int cc = lo; cc < hi; ++cc) s += tp[cc * 16];
        const unsigned int p = cur.u0 / cur.nc == cur.t ? cur.p0 : 0;
        unsigned char* wd = reinterpret_cast<unsigned char*>(st.ready) + ((size_t)row * DFSK_PMAX + p) * 8;
        asm volatile("st.global.v2.u32 [%0], {%1, %2};\n" ::"l"(wd), "r"(__float_as_uint(s)), "r"(DF_LL_TAG) : "memory");
      }
      __syncwarp();
      if (lane == 0) tcount[ts] = 0;
    }
  }
}
#define PROBE_DFSK_KERNEL(NAME, NS, W, TS, CH)                                                       \
  extern "C" __global__ void __launch_bounds__(32 * (W + 1), 1)                                        \
      NAME(const DfStage* stages, unsigned int n_stages, const uint4* runs) {                          \
    probe_chain_dfsk<NS, W, TS, CH>(stages, n_stages, runs);                                           \
  }
PROBE_DFSK_KERNEL(probe_chain_dfsk8w8_c8, 8, 8, DF_TILE_SLOTS, 8)
PROBE_DFSK_KERNEL(probe_chain_dfsk8w8_c2, 8, 8, DF_TILE_SLOTS, 2)
