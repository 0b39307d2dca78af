// probe_mlp_fold.cu: a decoder layer's MLP (RMSNorm, gate/up, SwiGLU, down, residual) in ONE
// launch at batch 1, split over the intermediate dimension (session 29; driven by
// scripts/probe_mlp_fold.py, which times it against kiln's gated_linear -> fused_linear launches).
//
// kiln's MLP is two launches because down needs every intermediate value. Split over the
// intermediate rows instead, block b owns rows [lo, hi): it computes g, u and h = silu(g) * u for
// them and at once their share of down, partial[j] = sum_r down[j, r] h[r] for every output j.
// The partials meet in a planned accumulator, and the next launch, which waits for this one
// anyway, reads the sum: the gate/up -> down boundary is gone, and with it down's own ramp and
// tail. The sum is made deterministic by adding FIXED-POINT integers (f32 partial * 2^32 rounded
// to an int64): integer addition is associative, so the red.global.add.u64 of the blocks give the
// same bits in any order (eager == graph == device loop). Range |sum| < 2^31, resolution 2^-32.
//
// Block: a producer warp (the last) streams the block's bytes with TMA bulk copies into a ring of
// NS 16 KB slots, before griddepcontrol.wait (weights only); the stream is the block's gate rows,
// its up rows, then its rows of down^T (down transposed: [I, H], so a block's rows are contiguous),
// each chunk whole rows. 8 consumer warps: warp w < NS takes the gate / up chunks of slot w (a warp sum
// per row against the normed x in shared memory), a barrier, h, then every warp takes every down
// chunk for its own H / 8 columns (registers, rows in order).
//   MODE 0: the int64 fixed-point reduction (the design);  MODE 1: red.global.add.f32 (timing
//   only, not deterministic);  MODE 2: each block stores its partials (timing only: no sum, the
//   check fails);  MODE 3: the stream alone, consumers only free the slots (timing only);  MODE 4:
//   clusters of CL blocks sum their partials through distributed shared memory first, then
//   int64 reductions as MODE 0 (CL times fewer).
// NS <= 8 (the gate / up warps are the slots). Launch: grid = SM count (any), block 288, dynamic
// shared NS * CB + 2 H + 3 * 1024 + 32 + 16 NS + 8 (CB = 16384 but in the `_v2` variants).
// Inputs of layer l: resid_in (bf16 H, x_l before the last MLP's sum), acc_in (layer l - 1's sum,
// null for the first layer); x_l = bf16(bf16(acc_in) + resid_in), written to resid_out by block 0
// (the residual of layer l + 1); acc_zero (the accumulator layer l - 1 read) zeroed by block 1.
#include "common.cuh"  // kiln::warp_sum, kiln::cluster_sync, kiln::cluster_map
#include "probe_common.cuh"

#define MF_W 8
#define MF_CONS (32 * MF_W)
#define MF_CHUNK 16384
#define MF_MAXN 256
#define MF_FIX_SCALE 4294967296.0f
#define MF_FIX_INV 2.3283064365386963e-10f

__device__ __forceinline__ float mf_bf(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }
__device__ __forceinline__ void mf_unpack(const uint4& v, float (&f)[8]) {
  const unsigned int w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 p = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w[i]));
    f[2 * i] = p.x;
    f[2 * i + 1] = p.y;
  }
}
__device__ __forceinline__ uint4 mf_pack(const float (&f)[8]) {
  unsigned int w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __nv_bfloat162 p = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
    w[i] = *reinterpret_cast<const unsigned int*>(&p);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}
// mbar_wait with a bound: a protocol bug traps (a launch error) instead of hanging the probe.
__device__ __forceinline__ void mf_wait(unsigned long long* b, unsigned int parity) {
  unsigned int done = 0;
  for (unsigned long long tries = 0; !done; ++tries) {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_u32(b)), "r"(parity)
        : "memory");
    if (tries > (1ull << 24)) __trap();
  }
}
__device__ __forceinline__ void mf_consumers_sync() { asm volatile("bar.sync 1, %0;\n" ::"n"(MF_CONS) : "memory"); }

// ST: block b's thread 0 (and the producer's lane 0) record clock64() at 16 points in mf_stamps[16 b ..]
// (the last launch's, each replay overwriting): 0 start, 1 after the wait, 2 x normed, 3 gate / up
// consumed, 4 h, 5 down consumed, 6 end; 7 the producer's last copy issued; 8 thread 0's own h done
// (before the barrier), 9 thread 0's own gate / up chunks done (before the barrier). And a trace per
// chunk i < 256 in mf_trace[512 b ..]: [i] when thread 0's wait for chunk i returned (its own gate / up
// chunks and every down chunk), [256 + i] when the producer issued chunk i's copy.
__device__ unsigned long long mf_stamps[16 * 1024];
__device__ unsigned long long mf_trace[512 * 264];
#define MF_STAMP(k)                                                                    \
  do {                                                                                 \
    if (ST && threadIdx.x == 0 && blockIdx.x < 1024) mf_stamps[16 * blockIdx.x + (k)] = clock64(); \
  } while (0)
#define MF_TRACE(i, side)                                                                                   \
  do {                                                                                                      \
    if (ST && (threadIdx.x & 31) == 0 && blockIdx.x < 264 && (i) < 256) mf_trace[512 * blockIdx.x + 256 * (side) + (i)] = clock64(); \
  } while (0)

// CB: bytes per ring slot (whole rows of weights). PRE: chunks the producer copies before the
// consumers have x (the rest of the ring waits for them: the copies queued before the wait delay the
// prologue's reads of x). FAST: the gate / up dots of 4 rows at a time (4 independent FMA chains and
// warp sums), not one row after another.
template <int NS, int MODE, int CL, bool ST, int CB = MF_CHUNK, int PRE = NS, bool FAST = false>
__device__ void mlp_fold(const __nv_bfloat16* resid_in, const void* acc_in, const __nv_bfloat16* nw,
                         const __nv_bfloat16* gate, const __nv_bfloat16* up, const __nv_bfloat16* down_t,
                         __nv_bfloat16* resid_out, void* acc_out, void* acc_zero, float* part_out, unsigned int H,
                         unsigned int I, float eps) {
  extern __shared__ __align__(128) uint4 smem[];
  uint4* ring = smem;
  uint4* xn = smem + NS * (CB / 16);  // H bf16: bf16(x * nw)
  float* gs = reinterpret_cast<float*>(xn + H / 8);
  float* us = gs + MF_MAXN;
  float* hs = us + MF_MAXN;
  float* wsum = hs + MF_MAXN;  // 8 floats
  unsigned long long* full = reinterpret_cast<unsigned long long*>(wsum + 8);
  unsigned long long* empty = full + NS;
  unsigned long long* xready = empty + NS;  // one arrival: the consumers have x (PRE < NS)
  const unsigned int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, b = blockIdx.x, G = gridDim.x;
  const unsigned int lo = (unsigned int)((unsigned long long)I * b / G);
  const unsigned int hi = (unsigned int)((unsigned long long)I * (b + 1) / G);
  const unsigned int n = hi - lo, h8 = H / 8;
  const unsigned int R = max(1u, CB / (2u * H)), nA = (n + R - 1) / R;
  MF_STAMP(0);
  if (threadIdx.x < NS) {
    mbar_init(full + threadIdx.x, 1);
    mbar_init(empty + threadIdx.x, MF_W);
  }
  if (threadIdx.x == 0) mbar_init(xready, 1);
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  __syncthreads();
  if (warp == MF_W) {  // the producer: weights only, nothing a prior grid writes
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    for (unsigned int i = 0; lane == 0 && i < 3 * nA; ++i) {
      const unsigned int seg = i / nA, r = lo + (i % nA) * R, nr = min(R, hi - r), slot = i % NS;
      const __nv_bfloat16* src = (seg == 0 ? gate : seg == 1 ? up : down_t) + (size_t)r * H;
      if (PRE < NS && i == PRE) mf_wait(xready, 0);
      if (i >= NS) mf_wait(empty + slot, ((i / NS) - 1) & 1);
      mbar_expect_tx(full + slot, nr * H * 2);
      tma_load(ring + slot * (CB / 16), src, nr * H * 2, full + slot);
      MF_TRACE(i, 1);
    }
    if (ST && lane == 0 && b < 1024) mf_stamps[16 * b + 7] = clock64();
    __syncwarp();
    if constexpr (MODE == 4) {  // the cluster's two barriers of the consumers' MODE 4 sum
      kiln::cluster_sync();
      kiln::cluster_sync();
    }
    return;
  }
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  MF_STAMP(1);
  // x = bf16(bf16(sum) + resid); xn = bf16(x * nw); the sum of squares of x.
  float ss = 0.0f;
  for (unsigned int v = threadIdx.x; v < h8; v += MF_CONS) {
    float x[8], w[8];
    mf_unpack(ld_cg16(resid_in + 8 * v), x);
    mf_unpack(*reinterpret_cast<const uint4*>(nw + 8 * v), w);
    if (acc_in != nullptr) {
#pragma unroll
      for (int e = 0; e < 8; e += 2) {
        float a0, a1;
        if constexpr (MODE == 1) {
          const float* af = reinterpret_cast<const float*>(acc_in) + 8 * v + e;
          a0 = ld_cgf(af);
          a1 = ld_cgf(af + 1);
        } else {
          long long p0, p1;
          asm volatile("ld.global.cg.v2.s64 {%0, %1}, [%2];\n"
                       : "=l"(p0), "=l"(p1)
                       : "l"(reinterpret_cast<const long long*>(acc_in) + 8 * v + e));
          a0 = __ll2float_rn(p0) * MF_FIX_INV;
          a1 = __ll2float_rn(p1) * MF_FIX_INV;
        }
        x[e] = mf_bf(mf_bf(a0) + x[e]);
        x[e + 1] = mf_bf(mf_bf(a1) + x[e + 1]);
      }
    }
    if (b == 0) *reinterpret_cast<uint4*>(resid_out + 8 * v) = mf_pack(x);
    float h[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      ss = __fmaf_rn(x[e], x[e], ss);
      h[e] = x[e] * w[e];
    }
    xn[v] = mf_pack(h);
  }
  if (b == 1 % G && acc_zero != nullptr) {
    for (unsigned int j = threadIdx.x; j < H; j += MF_CONS) reinterpret_cast<unsigned long long*>(acc_zero)[j] = 0ull;
  }
  ss = kiln::warp_sum(ss);
  if (lane == 0) wsum[warp] = ss;
  mf_consumers_sync();
  float tot = 0.0f;
#pragma unroll
  for (int i = 0; i < MF_W; ++i) tot += wsum[i];
  const float inv = rsqrtf(tot / (float)H + eps);
  if (PRE < NS && threadIdx.x == 0) mbar_arrive(xready);
  MF_STAMP(2);
  // gate / up: warp w < NS takes the chunks of slot w (a warp per chunk, a warp sum per row). A
  // warp that took chunks of several slots could wait for a use of a slot two phases ahead of the
  // slot's barrier, which a parity wait takes for the phase before (and returns at once): the
  // first version of this probe hung that way (call A).
  for (unsigned int i = warp; warp < NS && i < 2 * nA; i += NS) {
    const unsigned int slot = i % NS, r0 = (i % nA) * R, nr = min(R, n - r0);
    mf_wait(full + slot, (i / NS) & 1);
    if (warp == 0) MF_TRACE(i, 0);
    if constexpr (MODE != 3 && FAST) {
      const uint4* ch = ring + slot * (CB / 16);
      float* dst = (i < nA ? gs : us) + r0;
      for (unsigned int rr = 0; rr < nr; rr += 4) {
        float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        const unsigned int m = min(4u, nr - rr);
        for (unsigned int v = lane; v < h8; v += 32) {
          const uint4 xv = xn[v];
#pragma unroll
          for (int k = 0; k < 4; ++k)
            if ((unsigned int)k < m) s[k] = dot8(ch[(rr + k) * h8 + v], xv, s[k]);
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
#pragma unroll
          for (int k = 0; k < 4; ++k) s[k] += __shfl_xor_sync(0xffffffffu, s[k], o);
        if (lane < m) dst[rr + lane] = (lane == 0 ? s[0] : lane == 1 ? s[1] : lane == 2 ? s[2] : s[3]) * inv;
      }
    } else if constexpr (MODE != 3) {
      const uint4* ch = ring + slot * (CB / 16);
      float* dst = (i < nA ? gs : us) + r0;
      for (unsigned int rr = 0; rr < nr; ++rr) {
        float s = 0.0f;
        for (unsigned int v = lane; v < h8; v += 32) s = dot8(ch[rr * h8 + v], xn[v], s);
        s = kiln::warp_sum(s);
        if (lane == 0) dst[rr] = s * inv;
      }
    }
    __syncwarp();
    if (lane == 0) mbar_arrive_n(empty + slot, MF_W);
  }
  MF_STAMP(9);
  mf_consumers_sync();
  MF_STAMP(3);
  for (unsigned int r = threadIdx.x; r < n; r += MF_CONS) {
    const float g = mf_bf(gs[r]), u = mf_bf(us[r]);
    hs[r] = mf_bf(__fmul_rn(g / (1.0f + expf(-g)), u));
  }
  MF_STAMP(8);
  mf_consumers_sync();
  MF_STAMP(4);
  // down: every warp every chunk, its H / 8 columns: vectors warp * cw + lane + 32 k.
  const unsigned int cw = h8 / MF_W;  // H % 64 == 0
  constexpr int V = 2;                // cw <= 64: H <= 4096
  float acc[V][8];
#pragma unroll
  for (int k = 0; k < V; ++k)
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[k][e] = 0.0f;
  for (unsigned int i = 2 * nA; i < 3 * nA; ++i) {
    const unsigned int slot = i % NS, r0 = (i - 2 * nA) * R, nr = min(R, n - r0);
    mf_wait(full + slot, (i / NS) & 1);
    if (warp == 0) MF_TRACE(i, 0);
    if constexpr (MODE != 3) {
      const uint4* ch = ring + slot * (CB / 16) + warp * cw;
      for (unsigned int rr = 0; rr < nr; ++rr) {
        const float hv = hs[r0 + rr];
#pragma unroll
        for (int k = 0; k < V; ++k) {
          if (lane + 32 * k < cw) {
            float w[8];
            mf_unpack(ch[rr * h8 + lane + 32 * k], w);
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[k][e] = __fmaf_rn(hv, w[e], acc[k][e]);
          }
        }
      }
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(empty + slot);
  }
  MF_STAMP(5);
  if constexpr (MODE == 4) {
    // The cluster's CL partials summed in rank order through distributed shared memory (the ring,
    // free now, holds each block's H floats), block rank q reducing columns [q H / CL, (q+1) H / CL):
    // CL times fewer int64 reductions.
    float* ps = reinterpret_cast<float*>(ring);
    mf_consumers_sync();  // every warp is done with the ring's last chunks
#pragma unroll
    for (int k = 0; k < V; ++k) {
      if (lane + 32 * k >= cw) continue;
      const unsigned int j0 = 8 * (warp * cw + lane + 32 * k);
#pragma unroll
      for (int e = 0; e < 8; ++e) ps[j0 + e] = acc[k][e];
    }
    kiln::cluster_sync();
    unsigned int q;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(q));
    const unsigned int c0 = q * H / CL, c1 = (q + 1) * H / CL;
    for (unsigned int j = c0 + threadIdx.x; j < c1; j += MF_CONS) {
      float t = 0.0f;
#pragma unroll
      for (int r = 0; r < CL; ++r) t += *kiln::cluster_map(ps + j, (unsigned int)r);
      atomicAdd(reinterpret_cast<unsigned long long*>(acc_out) + j, (unsigned long long)__float2ll_rn(t * MF_FIX_SCALE));
    }
    kiln::cluster_sync();
  }
#pragma unroll
  for (int k = 0; k < (MODE == 3 || MODE == 4 ? 0 : V); ++k) {
    if (lane + 32 * k >= cw) continue;
    const unsigned int j0 = 8 * (warp * cw + lane + 32 * k);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      if constexpr (MODE == 0) {
        atomicAdd(reinterpret_cast<unsigned long long*>(acc_out) + j0 + e,
                  (unsigned long long)__float2ll_rn(acc[k][e] * MF_FIX_SCALE));
      } else if constexpr (MODE == 1) {
        atomicAdd(reinterpret_cast<float*>(acc_out) + j0 + e, acc[k][e]);
      } else {
        part_out[(size_t)b * H + j0 + e] = acc[k][e];
      }
    }
  }
  MF_STAMP(6);
}

// One kernel symbol NAME: mlp_fold<TARGS...> with ATTRS (launch bounds, a cluster shape).
#define MLP_FOLD_SYM(NAME, ATTRS, ...)                                                                         \
  extern "C" __global__ void ATTRS NAME(const __nv_bfloat16* resid_in, const void* acc_in, const __nv_bfloat16* nw, \
                                        const __nv_bfloat16* gate, const __nv_bfloat16* up,                     \
                                        const __nv_bfloat16* down_t, __nv_bfloat16* resid_out, void* acc_out,   \
                                        void* acc_zero, float* part_out, unsigned int H, unsigned int I,        \
                                        float eps) {                                                            \
    mlp_fold<__VA_ARGS__>(resid_in, acc_in, nw, gate, up, down_t, resid_out, acc_out, acc_zero, part_out, H, I, eps); \
  }
#define MLP_FOLD(NS, MODE, CL, ATTRS) MLP_FOLD_SYM(probe_mlp_fold_ns##NS##_m##MODE##_c##CL, ATTRS, NS, MODE, CL, false)
// `_st`: records mf_stamps and mf_trace.
#define MLP_FOLD_ST(NS, MODE, CL, ATTRS) \
  MLP_FOLD_SYM(probe_mlp_fold_ns##NS##_m##MODE##_c##CL##_st, ATTRS, NS, MODE, CL, true)
// `_v2kCBKpPRE_st`: slots of CBK KB, PRE chunks before the consumers have x, FAST gate / up dots, stamps.
#define MLP_FOLD_V2(NS, MODE, CL, ATTRS, CBK, PRE)                                                  \
  MLP_FOLD_SYM(probe_mlp_fold_ns##NS##_m##MODE##_c##CL##_v2k##CBK##p##PRE##_st, ATTRS, NS, MODE, CL, true, \
               CBK * 1024, PRE, true)
#define MF_BOUNDS __launch_bounds__(32 * (MF_W + 1), 2)
MLP_FOLD(6, 0, 1, MF_BOUNDS)
MLP_FOLD(6, 1, 1, MF_BOUNDS)
MLP_FOLD(6, 2, 1, MF_BOUNDS)
MLP_FOLD(6, 3, 1, MF_BOUNDS)
MLP_FOLD(4, 0, 1, MF_BOUNDS)
MLP_FOLD(8, 0, 1, MF_BOUNDS)
MLP_FOLD(8, 2, 1, MF_BOUNDS)
MLP_FOLD(8, 4, 2, MF_BOUNDS __cluster_dims__(2, 1, 1))
MLP_FOLD(8, 4, 4, MF_BOUNDS __cluster_dims__(4, 1, 1))
MLP_FOLD(8, 4, 6, MF_BOUNDS __cluster_dims__(6, 1, 1))
MLP_FOLD(6, 4, 2, MF_BOUNDS __cluster_dims__(2, 1, 1))
MLP_FOLD(6, 4, 4, MF_BOUNDS __cluster_dims__(4, 1, 1))
MLP_FOLD_ST(8, 2, 1, MF_BOUNDS)
MLP_FOLD_ST(8, 3, 1, MF_BOUNDS)
MLP_FOLD_ST(8, 4, 2, MF_BOUNDS __cluster_dims__(2, 1, 1))
MLP_FOLD_V2(8, 4, 2, MF_BOUNDS __cluster_dims__(2, 1, 1), 16, 2)
MLP_FOLD_V2(8, 4, 2, MF_BOUNDS __cluster_dims__(2, 1, 1), 16, 8)
MLP_FOLD_V2(6, 4, 2, MF_BOUNDS __cluster_dims__(2, 1, 1), 32, 1)
MLP_FOLD_V2(6, 4, 2, MF_BOUNDS __cluster_dims__(2, 1, 1), 32, 6)
MLP_FOLD_V2(6, 2, 1, MF_BOUNDS, 32, 1)
MLP_FOLD_V2(6, 3, 1, MF_BOUNDS, 32, 1)
