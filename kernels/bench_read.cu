// bench_read.cu: the GPU read-bandwidth probe of `kiln bench` (src/bench.rs). Not part of any
// plan: the bench allocates its own buffer (plain cuMemAlloc), fills it and times the reads.
//
//   kiln_bench_fill(buf, n16, seed)  buf[i] = 16 pseudo-random bytes of (seed, i), i < n16
//   kiln_bench_read(buf, n16, out)   *out ^= XOR of every 32-bit word of buf[0 .. n16)
//
// The read is the roofline's denominator: (bytes the GPU can read per second) / (bytes a decode
// token must read). It reads each byte exactly once with 16-byte loads through the read-only
// path, grid-stride, KILN_BENCH_UNROLL independent loads in flight per thread, and folds them
// into one word per warp (one atomicXor per warp, so the loads cannot be optimised away and the
// result is checkable). Random data, not zeros: zeros can read faster than real weights.
//
// CPU reference (for a check with small n16):
//   fill: for i: a = splitmix64(seed ^ 2i), b = splitmix64(seed ^ (2i + 1));
//         buf[i] = {lo32(a), hi32(a), lo32(b), hi32(b)}
//   read: out = XOR over i of (buf[i].x ^ buf[i].y ^ buf[i].z ^ buf[i].w)
//
// Geometry: block KILN_BENCH_THREADS; any grid (the bench picks SMs x blocks-per-SM).
#include "common.cuh"

#define KILN_BENCH_THREADS 256
#define KILN_BENCH_UNROLL 8

namespace kiln {

__device__ __forceinline__ unsigned long long bench_splitmix64(unsigned long long z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

__device__ __forceinline__ unsigned int fold16(const uint4& v) { return v.x ^ v.y ^ v.z ^ v.w; }

}  // namespace kiln

extern "C" __global__ void __launch_bounds__(KILN_BENCH_THREADS)
    kiln_bench_fill(uint4* buf, unsigned long long n16, unsigned long long seed) {
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += stride) {
    const unsigned long long a = kiln::bench_splitmix64(seed ^ (2 * i));
    const unsigned long long b = kiln::bench_splitmix64(seed ^ (2 * i + 1));
    buf[i] = make_uint4((unsigned int)a, (unsigned int)(a >> 32), (unsigned int)b, (unsigned int)(b >> 32));
  }
}

extern "C" __global__ void __launch_bounds__(KILN_BENCH_THREADS)
    kiln_bench_read(const uint4* __restrict__ buf, unsigned long long n16, unsigned int* out) {
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  unsigned int acc = 0;
  // Main loop: KILN_BENCH_UNROLL loads issued before any is used.
  for (; i + (KILN_BENCH_UNROLL - 1) * stride < n16; i += KILN_BENCH_UNROLL * stride) {
    uint4 v[KILN_BENCH_UNROLL];
#pragma unroll
    for (int u = 0; u < KILN_BENCH_UNROLL; ++u) v[u] = __ldg(buf + i + u * stride);
#pragma unroll
    for (int u = 0; u < KILN_BENCH_UNROLL; ++u) acc ^= kiln::fold16(v[u]);
  }
  for (; i < n16; i += stride) acc ^= kiln::fold16(__ldg(buf + i));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc ^= __shfl_xor_sync(0xffffffffu, acc, o);
  if ((threadIdx.x & 31) == 0) atomicXor(out, acc);
}
