// Probe (GPU, nvcc): the cost of a kernel boundary in a chain of dependent GEMV-like kernels
// under programmatic dependent launch, by how the consumer learns that its input is ready.
//
//   nvcc -O3 -std=c++17 -arch=sm_90a -o /tmp/probe_pdl_flags scripts/probe_pdl_flags.cu && /tmp/probe_pdl_flags
//
// A chain of 64 kernels y_{i+1} = W_i y_i (bf16 weights, each its own matrix so that every read
// comes from HBM; 16 rows per 256-thread block, 2 per warp, 16-byte loads; the first 8 loads of
// each thread issued before any synchronisation, as kiln's GEMVs do), captured into one CUDA graph.
// Modes, each every kernel of the chain:
// - wait:  griddepcontrol.launch_dependents, then griddepcontrol.wait (kiln's wait_prior_grids);
// - flags: launch_dependents, then per-tile ready flags: each producer block stores its tile's flag
//          (st.release.gpu, the step's epoch, after a fence) and each consumer block polls every
//          flag of its input (ld.acquire.gpu) before reading it: no grid-completion wait;
// - none:  launch_dependents and no synchronisation at all (a wrong result: the lower bound of a
//          boundary with the consumer running as early as PDL lets it);
// - nopdl: wait, but launched without the programmatic attribute (full graph edges).
// Chains: square (896, 2048, 4096: the o projections of Qwen2.5-0.5B, Llama-3.2-1B, Llama-3.1-8B)
// and up/down alternating (896x4864, 2048x8192, 4096x14336: their MLPs). Printed per chain and
// mode: us per kernel (median of 20 graph replays / 64), the GB/s that makes, and whether the
// chain's last output equals the wait mode's bytes ("same"; each replay has a new chain input, so a
// kernel that read its input before it was written shows as "DIFF", as none may).
// Result (2026-12-01, bench/results/2026-12-01-h200-probe-pdl-flags.txt): the flags lose to the
// grid-completion wait on every chain; see bench/NOTES-decode.md, session 20.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include "probe_common.cuh"
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>

__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_release(unsigned* p, unsigned v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// K % 1024 == 0 (4 groups of 256 elements); 16 rows per block, 2 per warp.
template <int MODE>
__global__ void __launch_bounds__(256) gemv(const __nv_bfloat16* __restrict__ W, const __nv_bfloat16* x,
                                            __nv_bfloat16* y, int M, int K, const unsigned* flags_in, int n_in,
                                            unsigned* flags_out, unsigned epoch) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int r0 = blockIdx.x * 16 + warp * 2;
  const __nv_bfloat16* w0 = W + (size_t)r0 * K + lane * 8;
  const __nv_bfloat16* w1 = w0 + K;
  uint4 a[4], b[4];
#pragma unroll
  for (int u = 0; u < 4; ++u) { a[u] = ld_stream16(w0 + u * 256); b[u] = ld_stream16(w1 + u * 256); }
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  if (MODE == 0) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
  } else if (MODE == 1) {
    for (int t = threadIdx.x; t < n_in; t += 256)
      while (ld_acquire(flags_in + t) != epoch) { }
    __syncthreads();
  }
  float s0 = 0.f, s1 = 0.f;
  for (int k = 0; k < K; k += 1024) {
    uint4 xv[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) xv[u] = ld_cg16(x + k + u * 256 + lane * 8);
    uint4 na[4], nb[4];
    const bool more = k + 1024 < K;
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      if (more) { na[u] = ld_stream16(w0 + k + 1024 + u * 256); nb[u] = ld_stream16(w1 + k + 1024 + u * 256); }
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) { s0 += dot8(a[u], xv[u], 0.f); s1 += dot8(b[u], xv[u], 0.f); }
    if (more) {
#pragma unroll
      for (int u = 0; u < 4; ++u) { a[u] = na[u]; b[u] = nb[u]; }
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) { s0 += __shfl_xor_sync(~0u, s0, o); s1 += __shfl_xor_sync(~0u, s1, o); }
  if (lane == 0) {
    // scaled so that values stay bounded along the chain
    y[r0] = __float2bfloat16(s0 * 0.03125f);
    y[r0 + 1] = __float2bfloat16(s1 * 0.03125f);
  }
  if (MODE == 1) {
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) st_release(flags_out + blockIdx.x, epoch);
  }
}

__global__ void bump(unsigned* e) { asm volatile("griddepcontrol.launch_dependents;"); *e += 1; }

struct Chain {
  std::vector<int> dims;
  std::vector<__nv_bfloat16*> W, X;
  std::vector<unsigned*> F;
  double bytes = 0;
};

template <int MODE>
void launch(cudaStream_t s, Chain& c, unsigned epoch, bool pdl) {
  for (size_t i = 0; i + 1 < c.dims.size(); ++i) {
    int K = c.dims[i], M = c.dims[i + 1];
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(M / 16);
    cfg.blockDim = dim3(256);
    cfg.stream = s;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    CK(cudaLaunchKernelEx(&cfg, gemv<MODE>, (const __nv_bfloat16*)c.W[i], (const __nv_bfloat16*)c.X[i], c.X[i + 1], M, K,
                          (const unsigned*)c.F[i], K / 16, c.F[i + 1], epoch));
  }
}

int main() {
  int layers = 32;
  std::vector<std::pair<const char*, std::vector<int>>> cfgs = {
      {"sq896", {896}}, {"sq2048", {2048}}, {"sq4096", {4096}},
      {"mlp896x4864", {896, 4864}}, {"mlp2048x8192", {2048, 8192}}, {"mlp4096x14336", {4096, 14336}},
  };
  cudaStream_t s;
  cudaEvent_t e0, e1;
  probe_stream_events(s, e0, e1);
  printf("%-16s %5s %10s %10s %8s %s\n", "chain", "mode", "us/kernel", "GB/s", "kernels", "check");
  for (auto& cf : cfgs) {
    Chain c;
    // dims: the pattern repeated, K0 -> K1 -> K0 ..., for 2 * layers kernels
    int nk = 2 * layers;
    for (int i = 0; i <= nk; ++i) c.dims.push_back(cf.second[i % cf.second.size()]);
    for (int i = 0; i + 1 < (int)c.dims.size(); ++i) {
      __nv_bfloat16* w;
      size_t n = (size_t)c.dims[i] * c.dims[i + 1];
      CK(cudaMalloc(&w, n * 2));
      probe_fill_bf16<<<1024, 256>>>(w, n, 1234u + i);
      c.W.push_back(w);
      c.bytes += n * 2;
    }
    for (int i = 0; i < (int)c.dims.size(); ++i) {
      __nv_bfloat16* x;
      CK(cudaMalloc(&x, c.dims[i] * 2));
      probe_fill_bf16<<<4, 256>>>(x, c.dims[i], 99u + i);
      c.X.push_back(x);
      unsigned* f;
      CK(cudaMalloc(&f, (c.dims[i] / 16) * 4));
      CK(cudaMemset(f, 0, (c.dims[i] / 16) * 4));
      c.F.push_back(f);
    }
    CK(cudaDeviceSynchronize());
    std::vector<unsigned short> ref;
    for (int mode = 0; mode < 4; ++mode) {
      // mode 3: MODE 0 without the programmatic attribute
      const int reps = 20;
      // The epoch is a kernel parameter, so one graph per replay (each with a fresh epoch); the
      // first kernel's input flags are set to the replay's epoch before it is launched.
      std::vector<cudaGraphExec_t> ex;
      static unsigned epoch = 1;
      const unsigned first_epoch = epoch + 1;
      for (int r = 0; r < reps + 3; ++r) {
        ++epoch;
        cudaGraph_t g;
        CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
        if (mode == 0) launch<0>(s, c, epoch, true);
        if (mode == 1) launch<1>(s, c, epoch, true);
        if (mode == 2) launch<2>(s, c, epoch, true);
        if (mode == 3) launch<0>(s, c, epoch, false);
        CK(cudaStreamEndCapture(s, &g));
        cudaGraphExec_t ge;
        CK(cudaGraphInstantiate(&ge, g, 0));
        CK(cudaGraphDestroy(g));
        ex.push_back(ge);
      }
      std::vector<float> ts;
      unsigned ep = first_epoch - 1;
      for (int r = 0; r < reps + 3; ++r) {
        ++ep;
        std::vector<unsigned> ones(c.dims[0] / 16, ep);
        CK(cudaMemcpyAsync(c.F[0], ones.data(), ones.size() * 4, cudaMemcpyHostToDevice, s));
        // a new chain input per replay, so that a consumer reading a stale input shows in the check
        probe_fill_bf16<<<4, 256, 0, s>>>(c.X[0], c.dims[0], 7u * r + 1u);
        CK(cudaStreamSynchronize(s));
        const float ms = probe_time_graph(ex[r], s, e0, e1);
        if (r >= 3) ts.push_back(ms);
      }
      std::sort(ts.begin(), ts.end());
      float med = ts[ts.size() / 2];
      int nk2 = (int)c.dims.size() - 1;
      std::vector<unsigned short> out(c.dims.back());
      CK(cudaMemcpy(out.data(), c.X.back(), out.size() * 2, cudaMemcpyDeviceToHost));
      const char* chk = "ref";
      if (mode == 0) ref = out; else chk = (out == ref) ? "same" : "DIFF";
      const char* names[4] = {"wait", "flags", "none", "nopdl"};
      printf("%-16s %5s %10.2f %10.1f %8d %s\n", cf.first, names[mode], med * 1000.0 / nk2, c.bytes / (med * 1e-3) / 1e9, nk2, chk);
      for (auto& g : ex) CK(cudaGraphExecDestroy(g));
    }
    for (auto p : c.W) CK(cudaFree(p));
    for (auto p : c.X) CK(cudaFree(p));
    for (auto p : c.F) CK(cudaFree(p));
  }
  return 0;
}
