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
      if (threadIdx.x == 0) {
        const unsigned int target = s * gridDim.x;
        while (ld_acquire(bar) < target) {
        }
      }
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
