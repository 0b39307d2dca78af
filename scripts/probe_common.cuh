// probe_common.cuh: device helpers shared by the design probes (scripts/probe_*.cu, compiled by
// scripts/probe_*.py through scripts/nvrtc_util.py; not one of kiln's kernels).
#pragma once
#include <cuda_bf16.h>

// 16 bytes of data an earlier grid (or block) wrote: through the L2, around the L1.
__device__ __forceinline__ uint4 ld_cg16(const void* p) {
  uint4 v;
  asm volatile("ld.global.cg.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
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
__device__ __forceinline__ uint4 ld_w16(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
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
