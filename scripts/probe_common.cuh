// probe_common.cuh: device helpers shared by the design probes (scripts/probe_*.cu, compiled by
// scripts/probe_*.py through scripts/nvrtc_util.py, or by nvcc for the standalone ones, which
// also get CK below; not one of kiln's kernels).
#pragma once
#include <cuda_bf16.h>

// A 16-byte load `NAME(p)` by the PTX instruction INSTR (volatile: issued in program order).
#define PROBE_LD16(NAME, INSTR)                                                                      \
  __device__ __forceinline__ uint4 NAME(const void* p) {                                             \
    uint4 v;                                                                                         \
    asm volatile(INSTR " {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p)); \
    return v;                                                                                        \
  }

// 16 bytes of data an earlier grid (or block) wrote: through the L2, around the L1.
PROBE_LD16(ld_cg16, "ld.global.cg.v4.u32")
__device__ __forceinline__ float ld_cgf(const float* p) {
  float v;
  asm volatile("ld.global.cg.f32 %0, [%1];\n" : "=f"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ int ld_cgi(const int* p) {
  int v;
  asm volatile("ld.global.cg.s32 %0, [%1];\n" : "=r"(v) : "l"(p));
  return v;
}
// 16 bytes of weights, read-only for the kernel's lifetime: non-coherent, not kept in L1.
PROBE_LD16(ld_w16, "ld.global.nc.L1::no_allocate.v4.u32")
// acc + the dot of 8 bf16 pairs (16 bytes each), in f32, in element order.
__device__ __forceinline__ float dot8(const uint4& a, const uint4& b, float acc) {
  const unsigned int aw[4] = {a.x, a.y, a.z, a.w}, bw[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 fa = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&aw[i]));
    const float2 fb = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&bw[i]));
    acc = __fmaf_rn(fa.x, fb.x, acc);
    acc = __fmaf_rn(fa.y, fb.y, acc);
  }
  return acc;
}

// 16 bytes of weights as kiln's decode GEMVs load them (kernels/common.cuh load16_stream with
// KILN_STREAM_LOAD 0): non-coherent, not kept in L1, with a 256-byte L2 prefetch; and the plain
// non-coherent load.
PROBE_LD16(ld_stream16, "ld.global.nc.L1::no_allocate.L2::256B.v4.u32")
PROBE_LD16(ld_nc16, "ld.global.nc.v4.u32")

// d += A * B for one mma.m16n8k16 (bf16 operands, f32 accumulation): kernels/common.cuh's.
__device__ __forceinline__ void mma_bf16(float (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
                                         unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// mbarriers and TMA bulk copies (the warp-specialized probes: probe_persistent.cu, probe_mlp_fold.cu).
__device__ __forceinline__ unsigned int smem_u32(const void* p) {
  return (unsigned int)__cvta_generic_to_shared(p);
}
// 16 bytes global -> shared through the L2 (cp.async.cg), and the wait for all of a thread's copies
// (the fold probes: probe_attn_o_fold.cu, probe_qkv_attn_o.cu).
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_u32(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
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
// One arrival counted `count` times (sm_90).
__device__ __forceinline__ void mbar_arrive_n(unsigned long long* b, unsigned int count) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(b)), "r"(count) : "memory");
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

// p[i] = a hash of (i, seed) as a bf16 in [-0.5, 0.5): test data for the standalone probes.
__global__ void probe_fill_bf16(__nv_bfloat16* p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    unsigned h = (unsigned)i * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    p[i] = __float2bfloat16(((h & 0xffff) / 65536.f - 0.5f));
  }
}

#if !defined(__CUDACC_RTC__)
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
// A CUDA runtime call that must succeed (the standalone nvcc probes).
#define CK(x)                                                                          \
  do {                                                                                 \
    cudaError_t e = (x);                                                               \
    if (e != cudaSuccess) {                                                            \
      printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e));                 \
      exit(1);                                                                         \
    }                                                                                  \
  } while (0)
#endif

#if !defined(__CUDACC_RTC__)
// A non-blocking stream and two timing events (the standalone nvcc probes).
inline void probe_stream_events(cudaStream_t& s, cudaEvent_t& e0, cudaEvent_t& e1) {
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
}
// Milliseconds of one replay of `ge` on `s`, timed by the events, after which the stream is idle.
inline float probe_time_graph(cudaGraphExec_t ge, cudaStream_t s, cudaEvent_t e0, cudaEvent_t e1) {
  CK(cudaEventRecord(e0, s));
  CK(cudaGraphLaunch(ge, s));
  CK(cudaEventRecord(e1, s));
  CK(cudaStreamSynchronize(s));
  float ms;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  return ms;
}
#endif
