// Probe (GPU, nvcc): would a GEMV whose weight tiles are stored in the order its lanes read them
// stream faster than kiln's row-major weights? Same arithmetic, so the same bits.
//
//   nvcc -O3 -std=c++17 -arch=sm_90a -o /tmp/probe_gemv_layout scripts/probe_gemv_layout.cu && /tmp/probe_gemv_layout
//
// The kernel is kiln's decode GEMV main loop in miniature (kernels/linear.cu gemv_mma_loop, bf16,
// one row of x): a 256-thread block per 16-row tile, k split over the 8 warps in 32-wide chunks
// (warp w takes chunks w, w + 8, ...), a ring of 4 register slots per warp, lane (g, t) loading 16
// bytes of rows g and g + 8 at k + 8t and two mma.m16n8k16 per slot, the warps' tiles summed in warp
// order through shared memory. Layouts of the [N, K] weight:
// - `rowmajor`: HF's, as kiln stores it: a warp's load instruction reads 64 bytes of each of 8 rows;
// - `packed`:   each tile's chunks in consumption order (chunk c of tile T: the 32 lanes' 16 bytes of
//               rows 0-7, then of rows 8-15), so a load instruction reads 256 contiguous bytes.
// - `smem3` / `smem4`: row-major, staged through shared memory (gemv_smem below: cp.async copies of
//               512 contiguous bytes of a row per warp instruction, 3 or 4 stages of 16 x 512 elements).
// Loads: `stream` (kiln's ld.global.nc.L1::no_allocate.L2::256B) or `ldg` (ld.global.nc). Timed: a
// CUDA graph of 32 launches over 8 different matrices (each read from HBM), median of 15 replays;
// GB/s of weight read. `same` when the outputs equal rowmajor-stream's bit for bit.
// Result (2026-12-01, bench/results/2026-12-01-h200-probe-gemv-layout.txt and -gemv-layout-smem.txt):
// packed + ldg is 6-13% faster than rowmajor + stream on every shape; the staged ring is slower than
// both (bench/NOTES-decode.md, session 20).
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include "probe_common.cuh"
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

template <int LOAD> __device__ __forceinline__ uint4 ldw(const void* p) { return LOAD == 0 ? ld_stream16(p) : ld_nc16(p); }

// The block's sum of its warps' 16 x 8 tiles in warp order, column 0 (the one row of x) stored.
__device__ __forceinline__ void tile_sum_store(const float (&c)[4], float (&red)[8][32][4], float* out, size_t tile) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int i = 0; i < 4; ++i) red[warp][lane][i] = c[i];
  __syncthreads();
  if (warp == 0 && t == 0) {
    float s0 = 0.f, s2 = 0.f;
    for (int w = 0; w < 8; ++w) {
      s0 += red[w][lane][0];
      s2 += red[w][lane][2];
    }
    out[tile * 16 + g] = s0;
    out[tile * 16 + g + 8] = s2;
  }
}

// K % 1024 == 0 and (K / 256) % 4 == 0: every warp has a multiple of 4 chunks.
template <int LAYOUT, int LOAD>
__global__ void __launch_bounds__(256, 3) gemv(const __nv_bfloat16* __restrict__ W, const __nv_bfloat16* x, float* out, int K) {
  __shared__ float red[8][32][4];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const size_t tile = blockIdx.x;
  const int nj = K / 256;
  auto pa = [&](int j) -> const __nv_bfloat16* {
    const int c = warp + 8 * j;
    if (LAYOUT == 0) return W + (tile * 16 + g) * (size_t)K + c * 32 + 8 * t;
    return W + tile * 16 * (size_t)K + (size_t)c * 512 + lane * 8;
  };
  const size_t boff = LAYOUT == 0 ? (size_t)8 * K : 256;
  uint4 wa[4], wb[4], xr[4];
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    wa[s] = ldw<LOAD>(pa(s));
    wb[s] = ldw<LOAD>(pa(s) + boff);
  }
#pragma unroll
  for (int s = 0; s < 4; ++s) xr[s] = ld_cg16(x + (warp + 8 * s) * 32 + 8 * t);
  float c[4] = {0.f, 0.f, 0.f, 0.f};
  for (int j = 0; j < nj; j += 4) {
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      mma_bf16(c, wa[s].x, wb[s].x, wa[s].y, wb[s].y, xr[s].x, xr[s].y);
      mma_bf16(c, wa[s].z, wb[s].z, wa[s].w, wb[s].w, xr[s].z, xr[s].w);
      const int jn = j + s + 4;
      if (jn < nj) {
        wa[s] = ldw<LOAD>(pa(jn));
        wb[s] = ldw<LOAD>(pa(jn) + boff);
        xr[s] = ld_cg16(x + (warp + 8 * jn) * 32 + 8 * t);
      }
    }
  }
  tile_sum_store(c, red, out, tile);
}

// `smem`: the row-major weight staged through shared memory. Each stage is 16 rows x SE elements,
// copied with cp.async (16 bytes per thread; a warp's instruction covers 512 contiguous bytes of one
// row), NS stages in flight, one block barrier per stage; each warp then reads its chunks of the stage
// (chunks w and w + 8 of the stage's 16: kiln's assignment) as lane (g, t): 16 bytes of rows g and g + 8
// at k + 8t, from rows padded to SE * 2 + 64 bytes (a stride of 16 words mod 32: a quarter warp's 16-byte
// reads fall in 8 different bank groups). The same MMAs in the same order as `rowmajor`.
__device__ __forceinline__ uint4 lds(const void* p) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"((unsigned)__cvta_generic_to_shared(p)));
  return v;
}
template <int NS, int SE>
__global__ void __launch_bounds__(256, 2) gemv_smem(const __nv_bfloat16* __restrict__ W, const __nv_bfloat16* x, float* out, int K) {
  extern __shared__ __align__(16) unsigned char sm[];
  __shared__ float red[8][32][4];
  constexpr int RSB = SE * 2 + 64;          // bytes per staged row
  constexpr int STB = 16 * RSB;             // bytes per stage
  constexpr int PIECES = 16 * SE / 8;       // 16-byte pieces per stage
  static_assert(PIECES % 256 == 0, "whole pieces per thread");
  static_assert(SE == 512, "16 chunks per stage: 2 per warp");
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const size_t tile = blockIdx.x;
  const __nv_bfloat16* wt = W + tile * 16 * (size_t)K;
  const int nst = K / SE;
  auto copy = [&](int st) {
    unsigned char* dst = sm + (st % NS) * STB;
#pragma unroll
    for (int i = 0; i < PIECES / 256; ++i) {
      const int p = i * 256 + threadIdx.x, row = p / (SE / 8), col = p % (SE / 8);
      cp_async16(dst + row * RSB + col * 16, wt + (size_t)row * K + (size_t)st * SE + col * 8);
    }
  };
#pragma unroll
  for (int st = 0; st < NS - 1; ++st) {
    if (st < nst) copy(st);
    asm volatile("cp.async.commit_group;" ::: "memory");
  }
  uint4 xn[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) xn[h] = ld_cg16(x + (warp + 8 * h) * 32 + 8 * t);
  float c[4] = {0.f, 0.f, 0.f, 0.f};
  for (int st = 0; st < nst; ++st) {
    asm volatile("cp.async.wait_group %0;" ::"n"(NS - 2) : "memory");
    __syncthreads();
    if (st + NS - 1 < nst) copy(st + NS - 1);
    asm volatile("cp.async.commit_group;" ::: "memory");
    uint4 xc[2] = {xn[0], xn[1]};
    if (st + 1 < nst) {
#pragma unroll
      for (int h = 0; h < 2; ++h) xn[h] = ld_cg16(x + (size_t)(st + 1) * SE + (warp + 8 * h) * 32 + 8 * t);
    }
    const unsigned char* stg = sm + (st % NS) * STB;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int col = ((warp + 8 * h) * 32 + 8 * t) * 2;
      const uint4 a = lds(stg + g * RSB + col), b = lds(stg + (g + 8) * RSB + col);
      mma_bf16(c, a.x, b.x, a.y, b.y, xc[h].x, xc[h].y);
      mma_bf16(c, a.z, b.z, a.w, b.w, xc[h].z, xc[h].w);
    }
  }
  tile_sum_store(c, red, out, tile);
}

// packed[tile * 16K + c * 512 + half * 256 + lane * 8 + e] = W[tile * 16 + half * 8 + lane / 4][c * 32 + 8 * (lane % 4) + e]
__global__ void pack(const __nv_bfloat16* W, __nv_bfloat16* P, int N, int K) {
  const size_t n = (size_t)N * K;
  for (size_t p = blockIdx.x * (size_t)blockDim.x + threadIdx.x; p < n; p += (size_t)gridDim.x * blockDim.x) {
    const size_t tile = p / (16 * (size_t)K);
    const size_t r = p % (16 * (size_t)K);
    const size_t c = r / 512, q = r % 512, half = q / 256, lane = (q % 256) / 8, e = q % 8;
    const size_t row = tile * 16 + half * 8 + lane / 4, col = c * 32 + 8 * (lane % 4) + e;
    P[p] = W[row * K + col];
  }
}

int main() {
  const int shapes[][2] = {{4096, 14336}, {14336, 4096}, {4096, 4096}, {4096, 6144}, {2048, 8192}, {8192, 2048}};
  const int nmat = 8, launches = 32;
  cudaStream_t s;
  cudaEvent_t e0, e1;
  probe_stream_events(s, e0, e1);
  printf("%-14s %-9s %-6s %9s %9s %s\n", "K x N", "layout", "load", "us/launch", "GB/s", "check");
  for (auto& sh : shapes) {
    const int K = sh[0], N = sh[1];
    const size_t n = (size_t)N * K;
    std::vector<__nv_bfloat16*> Wr(nmat), Wp(nmat);
    for (int m = 0; m < nmat; ++m) {
      CK(cudaMalloc(&Wr[m], n * 2));
      CK(cudaMalloc(&Wp[m], n * 2));
      probe_fill_bf16<<<2048, 256>>>(Wr[m], n, 77u + m);
      pack<<<2048, 256>>>(Wr[m], Wp[m], N, K);
    }
    __nv_bfloat16* x;
    float* out;
    CK(cudaMalloc(&x, K * 2));
    CK(cudaMalloc(&out, (size_t)N * 4));
    probe_fill_bf16<<<8, 256>>>(x, K, 5u);
    CK(cudaDeviceSynchronize());
    std::vector<float> ref(N), got(N);
    for (int v = 0; v < 6; ++v) {
      const int layout = v < 4 ? v / 2 : 2, load = v < 4 ? v % 2 : 0;
      // v 4, 5: smem with 3, 4 stages (52 / 70 KiB of shared memory per block)
      const int ns = v == 4 ? 3 : 4;
      auto kern = layout == 0 ? (load == 0 ? gemv<0, 0> : gemv<0, 1>) : (load == 0 ? gemv<1, 0> : gemv<1, 1>);
      auto& Ws = layout == 1 ? Wp : Wr;
      const int smem = ns * 16 * (512 * 2 + 64);
      if (v >= 4) {
        CK(cudaFuncSetAttribute(gemv_smem<3, 512>, cudaFuncAttributeMaxDynamicSharedMemorySize, 3 * 16 * (512 * 2 + 64)));
        CK(cudaFuncSetAttribute(gemv_smem<4, 512>, cudaFuncAttributeMaxDynamicSharedMemorySize, 4 * 16 * (512 * 2 + 64)));
      }
      cudaGraph_t g;
      CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
      for (int i = 0; i < launches; ++i) {
        if (v < 4) kern<<<N / 16, 256, 0, s>>>(Ws[i % nmat], x, out, K);
        else if (ns == 3) gemv_smem<3, 512><<<N / 16, 256, smem, s>>>(Ws[i % nmat], x, out, K);
        else gemv_smem<4, 512><<<N / 16, 256, smem, s>>>(Ws[i % nmat], x, out, K);
      }
      CK(cudaStreamEndCapture(s, &g));
      cudaGraphExec_t ge;
      CK(cudaGraphInstantiate(&ge, g, 0));
      std::vector<float> ts;
      for (int r = 0; r < 17; ++r) {
        const float ms = probe_time_graph(ge, s, e0, e1);
        if (r >= 2) ts.push_back(ms);
      }
      std::sort(ts.begin(), ts.end());
      const double us = ts[ts.size() / 2] * 1000.0 / launches;
      CK(cudaMemcpy(got.data(), out, (size_t)N * 4, cudaMemcpyDeviceToHost));  // the last launch: matrix (launches - 1) % nmat
      const char* chk = "ref";
      if (v == 0) ref = got; else chk = (got == ref) ? "same" : "DIFF";
      char shape[32];
      snprintf(shape, sizeof shape, "%dx%d", K, N);
      const char* lname = layout == 0 ? "rowmajor" : layout == 1 ? "packed" : (ns == 3 ? "smem3" : "smem4");
      printf("%-14s %-9s %-6s %9.2f %9.1f %s\n", shape, lname, layout == 2 ? "cpasync" : load ? "ldg" : "stream", us, n * 2 / (us * 1e-6) / 1e9, chk);
      CK(cudaGraphExecDestroy(ge));
      CK(cudaGraphDestroy(g));
    }
    for (int m = 0; m < nmat; ++m) { CK(cudaFree(Wr[m])); CK(cudaFree(Wp[m])); }
    CK(cudaFree(x));
    CK(cudaFree(out));
  }
  return 0;
}
