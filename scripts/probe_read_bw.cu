// Probe (GPU, nvcc): is `kiln bench`'s read bandwidth (kernels/bench_read.cu: 16-byte ld.global.nc
// loads, grid-stride, 8 in flight per thread, the fastest of 2 / 4 / 8 / 16 blocks of 256 per SM)
// the most this GPU reads? The roofline divides by it, so a faster way to read would make every
// fraction of `kiln bench` too high.
//
//   nvcc -O3 -std=c++17 -arch=sm_90a -o /tmp/probe_read_bw scripts/probe_read_bw.cu && /tmp/probe_read_bw
//
// Reads the same 4 GiB of random words (the bench's size) with:
// - `ldg`:    bench_read.cu's loop (ld.global.nc), unroll 4 / 8 / 16, 256 or 1024 threads,
//             2-32 blocks of 256 per SM;
// - `stream`: the GEMVs' weight load (ld.global.nc.L1::no_allocate.L2::256B), unroll 8;
// - `cg`:     ld.global.cg (L2 only), unroll 8;
// - `bulk`:   cp.async.bulk (the TMA engine) into shared memory, 4 stages of 16 / 32 KiB per block,
//             one or two blocks per SM, every word folded from shared memory;
// - `d2d`:    cudaMemcpyAsync of 2 GiB device to device (reads 2 GiB and writes 2 GiB; printed as
//             the bytes read per second).
// Each line: the median of 20 timed runs (CUDA events) after 2 warm-ups, GB/s read, and whether
// the XOR of the words matches the host's (the loads cannot have been dropped).
// Result (2026-12-01, bench/results/2026-12-01-h200-probe-read-bw.txt): nothing reads faster than the
// bench's kernel (all `ldg` / `cg` variants within 0.3% of it; bulk copies and the copy engine slower);
// the GEMVs' `stream` load reads this pattern 5.5% slower than `ldg`.
#include <cuda_runtime.h>
#include "probe_common.cuh"
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

__device__ __forceinline__ unsigned long long mix(unsigned long long z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
__global__ void fill(uint4* buf, unsigned long long n16) {
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n16; i += (unsigned long long)gridDim.x * blockDim.x) {
    unsigned long long a = mix(2 * i), b = mix(2 * i + 1);
    buf[i] = make_uint4((unsigned)a, (unsigned)(a >> 32), (unsigned)b, (unsigned)(b >> 32));
  }
}
__device__ __forceinline__ unsigned fold(const uint4& v) { return v.x ^ v.y ^ v.z ^ v.w; }

// 0: bench_read.cu's __ldg; 1: the GEMVs' weight load; 2: ld.global.cg (probe_common.cuh).
template <int KIND> __device__ __forceinline__ uint4 ld(const uint4* p) {
  return KIND == 0 ? __ldg(p) : KIND == 1 ? ld_stream16(p) : ld_cg16(p);
}

template <int KIND, int U>
__global__ void read(const uint4* __restrict__ buf, unsigned long long n16, unsigned* out) {
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
  unsigned acc = 0;
  for (; i + (U - 1) * stride < n16; i += U * stride) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) v[u] = ld<KIND>(buf + i + u * stride);
#pragma unroll
    for (int u = 0; u < U; ++u) acc ^= fold(v[u]);
  }
  for (; i < n16; i += stride) acc ^= fold(ld<KIND>(buf + i));
  for (int o = 16; o > 0; o >>= 1) acc ^= __shfl_xor_sync(~0u, acc, o);
  if ((threadIdx.x & 31) == 0) atomicXor(out, acc);
}

// Bulk copies: block b takes chunks b, b + grid, ... of CHUNK bytes, 4 stages in dynamic shared memory.
// (mbar_init, mbar_expect_tx, mbar_wait, tma_load: probe_common.cuh)
template <int CHUNK>
__global__ void __launch_bounds__(256) read_bulk(const uint4* __restrict__ buf, unsigned long long n16, unsigned* out) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ unsigned long long bars[4];
  const unsigned long long chunks = n16 * 16 / CHUNK;  // n16 * 16 is a multiple of CHUNK here
  if (threadIdx.x == 0) {
    for (int s = 0; s < 4; ++s) mbar_init(&bars[s], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  unsigned acc = 0;
  unsigned long long c = blockIdx.x;
  // issue the first 4
  if (threadIdx.x == 0) {
    for (int s = 0; s < 4; ++s) {
      unsigned long long cc = c + (unsigned long long)s * gridDim.x;
      if (cc < chunks) {
        mbar_expect_tx(&bars[s], CHUNK);
        tma_load(smem + s * CHUNK, (const unsigned char*)buf + cc * CHUNK, CHUNK, &bars[s]);
      }
    }
  }
  unsigned phase[4] = {0, 0, 0, 0};
  for (int k = 0; c < chunks; c += gridDim.x, ++k) {
    const int s = k & 3;
    mbar_wait(&bars[s], phase[s]);
    phase[s] ^= 1;
    const uint4* st = (const uint4*)(smem + s * CHUNK);
    for (int j = threadIdx.x; j < CHUNK / 16; j += blockDim.x) acc ^= fold(st[j]);
    __syncthreads();
    const unsigned long long nc = c + 4ull * gridDim.x;
    if (threadIdx.x == 0 && nc < chunks) {
      mbar_expect_tx(&bars[s], CHUNK);
      tma_load(smem + s * CHUNK, (const unsigned char*)buf + nc * CHUNK, CHUNK, &bars[s]);
    }
  }
  for (int o = 16; o > 0; o >>= 1) acc ^= __shfl_xor_sync(~0u, acc, o);
  if ((threadIdx.x & 31) == 0) atomicXor(out, acc);
}

int main() {
  const unsigned long long bytes = 4ull << 30, n16 = bytes / 16;
  uint4* buf;
  unsigned* out;
  CK(cudaMalloc(&buf, bytes));
  CK(cudaMalloc(&out, 4));
  fill<<<132 * 8, 256>>>(buf, n16);
  CK(cudaDeviceSynchronize());
  // host XOR of the same words
  unsigned expect = 0;
  {
    std::vector<uint4> h(1 << 20);
    for (unsigned long long off = 0; off < n16; off += h.size()) {
      CK(cudaMemcpy(h.data(), buf + off, h.size() * 16, cudaMemcpyDeviceToHost));
      for (auto& v : h) expect ^= v.x ^ v.y ^ v.z ^ v.w;
    }
  }
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  auto timeit = [&](const char* name, auto&& launch, double read_bytes) {
    std::vector<float> ts;
    bool ok = true;
    for (int r = 0; r < 22; ++r) {
      CK(cudaMemset(out, 0, 4));
      CK(cudaEventRecord(e0));
      launch();
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      CK(cudaGetLastError());
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      unsigned got;
      CK(cudaMemcpy(&got, out, 4, cudaMemcpyDeviceToHost));
      if (read_bytes == (double)bytes && got != expect) ok = false;
      if (r >= 2) ts.push_back(ms);
    }
    std::sort(ts.begin(), ts.end());
    const double med = ts[ts.size() / 2];
    printf("%-36s %8.1f GB/s  (min %.1f max %.1f)  %s\n", name, read_bytes / (med * 1e-3) / 1e9,
           read_bytes / (ts.back() * 1e-3) / 1e9, read_bytes / (ts.front() * 1e-3) / 1e9, ok ? "xor ok" : "XOR WRONG");
  };
  char name[96];
  for (int per_sm : {2, 4, 8, 16, 32}) {
    snprintf(name, sizeof name, "ldg u8 256t x%d/SM (bench_read)", per_sm);
    timeit(name, [&] { read<0, 8><<<sms * per_sm, 256>>>(buf, n16, out); }, (double)bytes);
  }
  for (int per_sm : {4, 8, 16}) {
    snprintf(name, sizeof name, "ldg u4 256t x%d/SM", per_sm);
    timeit(name, [&] { read<0, 4><<<sms * per_sm, 256>>>(buf, n16, out); }, (double)bytes);
    snprintf(name, sizeof name, "ldg u16 256t x%d/SM", per_sm);
    timeit(name, [&] { read<0, 16><<<sms * per_sm, 256>>>(buf, n16, out); }, (double)bytes);
    snprintf(name, sizeof name, "stream u8 256t x%d/SM", per_sm);
    timeit(name, [&] { read<1, 8><<<sms * per_sm, 256>>>(buf, n16, out); }, (double)bytes);
    snprintf(name, sizeof name, "cg u8 256t x%d/SM", per_sm);
    timeit(name, [&] { read<2, 8><<<sms * per_sm, 256>>>(buf, n16, out); }, (double)bytes);
  }
  for (int per_sm : {1, 2, 4}) {
    snprintf(name, sizeof name, "ldg u8 1024t x%d/SM", per_sm);
    timeit(name, [&] { read<0, 8><<<sms * per_sm, 1024>>>(buf, n16, out); }, (double)bytes);
  }
  CK(cudaFuncSetAttribute(read_bulk<16384>, cudaFuncAttributeMaxDynamicSharedMemorySize, 4 * 16384));
  CK(cudaFuncSetAttribute(read_bulk<32768>, cudaFuncAttributeMaxDynamicSharedMemorySize, 4 * 32768));
  for (int per_sm : {1, 2, 3}) {
    snprintf(name, sizeof name, "bulk 4x16KiB x%d/SM", per_sm);
    timeit(name, [&] { read_bulk<16384><<<sms * per_sm, 256, 4 * 16384>>>(buf, n16, out); }, (double)bytes);
  }
  for (int per_sm : {1}) {
    snprintf(name, sizeof name, "bulk 4x32KiB x%d/SM", per_sm);
    timeit(name, [&] { read_bulk<32768><<<sms * per_sm, 256, 4 * 32768>>>(buf, n16, out); }, (double)bytes);
  }
  timeit("d2d cudaMemcpyAsync 2 GiB (read bytes)", [&] { CK(cudaMemcpyAsync((char*)buf + (bytes / 2), buf, bytes / 2, cudaMemcpyDeviceToDevice)); },
         (double)(bytes / 2));
  return 0;
}
