// common.cuh: storage types, load/store helpers and reductions shared by every kiln kernel.
//
// Storage is f32, f16 (`__half`) or bf16 (`__nv_bfloat16`); all arithmetic is f32. Kernels are
// templates over the storage type `T` and are instantiated once per dtype as
// `extern "C" __global__` symbols named `kiln_{kernel}_{dt}` (see src/runtime/cuda/abi.rs,
// which also fixes the parameter order: device pointers in `Launch::bufs` order, then the
// scalars of `abi::scalars`).
//
// The sources are compiled at load time by NVRTC (src/runtime/cuda/nvrtc.rs) as one translation
// unit; they may include only this header and the CUDA fp16/bf16 headers.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace kiln {

// ---- storage <-> f32 -----------------------------------------------------------------------

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }

// Round-to-nearest-even conversion to storage (the CPU executor rounds the same way).
template <typename T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// x rounded to storage precision and back: what the CPU reference sees after a store.
template <typename T> __device__ __forceinline__ float round_to(float x) { return to_f32(from_f32<T>(x)); }

template <typename T> __device__ __forceinline__ T zero() { return from_f32<T>(0.0f); }

// NVRTC has no <cmath>, hence no INFINITY / NAN macros.
__device__ __forceinline__ float inf() { return __int_as_float(0x7f800000); }
__device__ __forceinline__ float quiet_nan() { return __int_as_float(0x7fc00000); }

// The 64-bit argmax key of logit v at index i (Op::LinearArgmax; `sampling::argmax_key` on the
// host, bit for bit): v's bits made order-preserving as an unsigned integer in the high word (-0
// as +0), ~i in the low word, 0 for NaN. A row's largest key is its argmax (largest value, lowest
// index among equal ones, NaN never while any value is not NaN), whatever order keys are folded in.
__device__ __forceinline__ unsigned long long argmax_key(float v, unsigned int i) {
  if (v != v) return 0ull;
  unsigned int b = v == 0.0f ? 0u : __float_as_uint(v);
  b = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  return ((unsigned long long)b << 32) | (unsigned long long)(~i);
}

// The token of a row whose largest argmax key is `key` (`sampling::argmax_key_token`): index 0 for
// no key (0) or an index outside the vocabulary.
__device__ __forceinline__ int argmax_key_token(unsigned long long key, unsigned int vocab) {
  const unsigned int i = ~(unsigned int)key;
  return key == 0ull || i >= vocab ? 0 : (int)i;
}

// ---- 16-byte vector loads -------------------------------------------------------------------

// Elements of T in one 16-byte vector.
template <typename T> struct Vec16 {
  static constexpr int N = 16 / sizeof(T);
};

__device__ __forceinline__ void unpack16(const uint4& v, float (&out)[4]) {
  out[0] = __uint_as_float(v.x);
  out[1] = __uint_as_float(v.y);
  out[2] = __uint_as_float(v.z);
  out[3] = __uint_as_float(v.w);
}

__device__ __forceinline__ float2 unpack_pair(unsigned int bits, __half) {
  __half2 h = *reinterpret_cast<const __half2*>(&bits);
  return __half22float2(h);
}
__device__ __forceinline__ float2 unpack_pair(unsigned int bits, __nv_bfloat16) {
  __nv_bfloat162 h = *reinterpret_cast<const __nv_bfloat162*>(&bits);
  return __bfloat1622float2(h);
}

template <typename H> __device__ __forceinline__ void unpack16(const uint4& v, float (&out)[8]) {
  const unsigned int words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float2 f = unpack_pair(words[i], H());
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

// Coherence rule (programmatic dependent launch, see the end of this file): a kernel may be
// resident while the grids it depends on still write its inputs, so anything an earlier kernel
// writes (activations, the KV cache, step inputs, workspaces) is read with coherent loads only:
// never `ld.global.nc` / `__ldg`, and no `const T* __restrict__` on such pointers (which lets the
// compiler use the non-coherent path). PTX allows `.nc` only for data read-only for the kernel's
// whole lifetime; weights (`load16_stream`) are. `load16_act` reads through L2 (`.cg`), the point
// of coherence, and skips L1, whose lines may be stale from a co-resident earlier grid.
__device__ __forceinline__ uint4 load16_act(const void* p) {
  uint4 v;
  asm volatile("ld.global.cg.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// Loads Vec16<T>::N consecutive activation elements at `p` (16-byte aligned) as f32 (load16_act).
template <typename T> __device__ __forceinline__ void load16(const T* p, float (&out)[Vec16<T>::N]);
template <> __device__ __forceinline__ void load16<float>(const float* p, float (&out)[4]) {
  unpack16(load16_act(p), out);
}
template <> __device__ __forceinline__ void load16<__half>(const __half* p, float (&out)[8]) {
  unpack16<__half>(load16_act(p), out);
}
template <> __device__ __forceinline__ void load16<__nv_bfloat16>(const __nv_bfloat16* p, float (&out)[8]) {
  unpack16<__nv_bfloat16>(load16_act(p), out);
}

__device__ __forceinline__ bool aligned16(const void* p) {
  return (reinterpret_cast<unsigned long long>(p) & 15ull) == 0;
}

// Stores Vec16<T>::N values at `p` (16-byte aligned), each rounded once to T.
template <typename T> __device__ __forceinline__ void store16(T* p, const float (&v)[Vec16<T>::N]) {
  union {
    uint4 u;
    T t[Vec16<T>::N];
  } w;
#pragma unroll
  for (int i = 0; i < Vec16<T>::N; ++i) w.t[i] = from_f32<T>(v[i]);
  *reinterpret_cast<uint4*>(p) = w.u;
}

// Elements per thread of the elementwise kernels (swiglu.cu, add.cu; src/plan/geometry.rs
// ELEMENTWISE_VEC): one 16-byte load of a 16-bit dtype, two of f32.
#define KILN_ELEMENTWISE_VEC 8

// KILN_ELEMENTWISE_VEC consecutive activation elements at `p` (16-byte aligned) as f32: one
// 16-byte load of a 16-bit dtype, two of f32.
template <typename T> __device__ __forceinline__ void load_vec(const T* p, float (&out)[KILN_ELEMENTWISE_VEC]) {
  constexpr int N = Vec16<T>::N;
  static_assert(KILN_ELEMENTWISE_VEC % N == 0, "whole 16-byte vectors");
#pragma unroll
  for (int v = 0; v < KILN_ELEMENTWISE_VEC / N; ++v) {
    float part[N];
    load16<T>(p + v * N, part);
#pragma unroll
    for (int i = 0; i < N; ++i) out[v * N + i] = part[i];
  }
}

// Stores KILN_ELEMENTWISE_VEC values at `p` (16-byte aligned), each rounded once to T.
template <typename T> __device__ __forceinline__ void store_vec(T* p, const float (&v)[KILN_ELEMENTWISE_VEC]) {
  constexpr int N = Vec16<T>::N;
#pragma unroll
  for (int u = 0; u < KILN_ELEMENTWISE_VEC / N; ++u) {
    float part[N];
#pragma unroll
    for (int i = 0; i < N; ++i) part[i] = v[u * N + i];
    store16<T>(p + u * N, part);
  }
}

// The elementwise kernels' body (swiglu.cu, add.cu): out[i] = T(f(a[i], b[i])) in f32 for this
// thread's KILN_ELEMENTWISE_VEC consecutive elements, with 16-byte loads and stores when all three
// buffers are aligned and the run is whole; grid (ceil(n / (blockDim * VEC))).
template <typename T, typename F>
__device__ __forceinline__ void elementwise2(const T* a, const T* b, T* out, unsigned int n, F f) {
  constexpr unsigned int V = KILN_ELEMENTWISE_VEC;
  const size_t i0 = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * V;
  if (i0 >= n) return;
  if (i0 + V <= n && aligned16(a + i0) && aligned16(b + i0) && aligned16(out + i0)) {
    float x[V], y[V], o[V];
    load_vec<T>(a + i0, x);
    load_vec<T>(b + i0, y);
#pragma unroll
    for (unsigned int j = 0; j < V; ++j) o[j] = f(x[j], y[j]);
    store_vec<T>(out + i0, o);
    return;
  }
  for (size_t i = i0; i < n && i < i0 + V; ++i) out[i] = from_f32<T>(f(to_f32(a[i]), to_f32(b[i])));
}

// ---- reductions -----------------------------------------------------------------------------

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block; every thread gets the result. blockDim.x must be a multiple of 32 and at
// most 1024. `scratch` holds 32 floats of shared memory; the call begins and ends with a barrier
// so that it can be called back to back with the same scratch.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : 0.0f;
  return warp_sum(v);
}

}  // namespace kiln

// Instantiates `KERNEL_MACRO(dt, T)` for each storage dtype: the `dt` suffix of the symbol and
// the C++ storage type.
#define KILN_FOR_EACH_DTYPE(KERNEL_MACRO) \
  KERNEL_MACRO(f32, float)                \
  KERNEL_MACRO(f16, __half)               \
  KERNEL_MACRO(bf16, __nv_bfloat16)

// ---- streaming loads and tensor-core helpers (decode GEMV, split attention) ------------------

namespace kiln {

// KILN_GEMV_TILES (the runtime sets it from the plan: 1 when its weights have Layout::GemvTiles,
// src/lower/tiles.rs; 0 by default): 1 when the plan's 16-bit GEMV weights are stored tile-packed: a
// [N, in] matrix (N % 16 == 0, in % 32 == 0) as its 16-row tiles in order, each tile as its 32-column
// chunks in order, each chunk as the 16 bytes lane (g, t) of the tensor-core GEMV reads of row g
// (lanes in order), then of row g + 8: element (r, k) at weight_row(r) + weight_col(k) below. A warp's load
// instruction then reads 256 contiguous bytes instead of 64 bytes of each of 8 rows; the same
// elements reach the same registers, so every sum is the same bits. Every kernel that reads a
// GEMV weight (linear.cu, linear_fused.cu: tensor-core, SIMT and tiled paths) indexes it through
// them; the token embedding's gather reads its own row-major table.
#ifndef KILN_GEMV_TILES
#define KILN_GEMV_TILES 0
#endif

// Element (r, k) of a [N, in] GEMV weight of storage type T is at weight_row(r, in) + weight_col(k):
// r * in + k row-major; tile-packed, the tile's, half's and row's offset plus the chunk's, lane
// quad's and element's. Kept as two terms so that the row-major code is what it was before.
template <typename T> __device__ __forceinline__ size_t weight_row(unsigned int r, unsigned int in) {
#if KILN_GEMV_TILES
  if constexpr (sizeof(T) == 2) return (size_t)(r >> 4) * 16 * in + ((r >> 3) & 1) * 256 + (r & 7) * 32;
#endif
  return (size_t)r * in;
}
// weight_row in 32 bits, for offsets that fit (the walk's).
template <typename T> __device__ __forceinline__ unsigned int weight_row32(unsigned int r, unsigned int in) {
#if KILN_GEMV_TILES
  if constexpr (sizeof(T) == 2) return (r >> 4) * 16 * in + ((r >> 3) & 1) * 256 + (r & 7) * 32;
#endif
  return r * in;
}
template <typename T> __device__ __forceinline__ unsigned int weight_col(unsigned int k) {
#if KILN_GEMV_TILES
  if constexpr (sizeof(T) == 2) return (k >> 5) * 512 + ((k >> 3) & 3) * 8 + (k & 7);
#endif
  return k;
}

// Elements between one row's weights k and k + 32 * j, per 32 * j: 1 row-major, 16 tile-packed.
template <typename T> __device__ __forceinline__ constexpr unsigned int weight_step() { return KILN_GEMV_TILES && sizeof(T) == 2 ? 16u : 1u; }

// The kernels' weight offsets: without KILN_GEMV_TILES the very expressions they had before it (the
// compiler's output is sensitive to how an offset is associated), with it weight_row / weight_col
// and chunk offsets (multiples of 32 along a row) scaled by weight_step.
#if KILN_GEMV_TILES
#define KILN_W_ROW(T, r, in) (::kiln::weight_row<T>((r), (in)))
#define KILN_W_ROW32(T, r, in) (::kiln::weight_row32<T>((r), (in)))
#define KILN_W_COL(T, k) (::kiln::weight_col<T>((k)))
#define KILN_W_STEP(T, v) (::kiln::weight_step<T>() * (v))
#else
#define KILN_W_ROW(T, r, in) ((size_t)(r) * (in))
#define KILN_W_ROW32(T, r, in) ((r) * (in))
#define KILN_W_COL(T, k) (k)
#define KILN_W_STEP(T, v) (v)
#endif

// The instruction of a weight load (`load16_stream`, and linear.cu's `load16_stream_ordered`),
// by KILN_STREAM_LOAD: 0 through the read-only path with no L1 allocation and a 256-byte L2
// prefetch of the surrounding line; 1 the plain read-only load (`__ldg`); 2 no L1 allocation
// only; 3 the L2 prefetch only. 0 is the fastest in decode on the H200 (session 20, same-call A/B,
// batch 1, Llama-3.1-8B 247.9 tok/s against 230.8 / 226.7 / 243.5 for 1 / 2 / 3; the 0.5B and 1B
// agree), although a plain grid-stride read runs 5% faster with `__ldg` than with 0's hints
// (scripts/probe_read_bw.cu): a GEMV lane quad reads 64 bytes of a row, whose neighbours the
// block's other warps read next, and the prefetch brings them in with it.
// Tile-packed weights (KILN_GEMV_TILES) read fastest in decode with 2 (session 21, same-call A/B,
// batch 1, context 128, tok/s 0.5B / 1B / 8B: row-major with 0 1636 / 1206 / 248.5; tiled with 0
// 1670 / 1185 / 247.6, 1 1618 / 1109 / 247.5, 2 1685 / 1225 / 256.1, 3 1600 / 1087 / 240.9): a load
// instruction reads 256 contiguous bytes already, and the prefetch of 0 and 3 brings in bytes of
// the next chunk, which other warps read.
#ifndef KILN_STREAM_LOAD
#if KILN_GEMV_TILES
#define KILN_STREAM_LOAD 2
#else
#define KILN_STREAM_LOAD 0
#endif
#endif
#if KILN_STREAM_LOAD == 0
#define KILN_LD_STREAM "ld.global.nc.L1::no_allocate.L2::256B.v4.u32"
#elif KILN_STREAM_LOAD == 1
#define KILN_LD_STREAM "ld.global.nc.v4.u32"
#elif KILN_STREAM_LOAD == 2
#define KILN_LD_STREAM "ld.global.nc.L1::no_allocate.v4.u32"
#elif KILN_STREAM_LOAD == 3
#define KILN_LD_STREAM "ld.global.nc.L2::256B.v4.u32"
#else
#error "KILN_STREAM_LOAD: 0, 1, 2 or 3"
#endif

// 16 bytes of a weight, read exactly once per launch: KILN_STREAM_LOAD's instruction. `p` must be
// 16-byte aligned.
__device__ __forceinline__ uint4 load16_stream(const void* p) {
  uint4 v;
  asm(KILN_LD_STREAM " {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// 16 bytes of an activation read exactly once (the KV cache in decode attention): coherent (L2,
// `.cg`: kv_write wrote it in the same step) with the same 256-byte L2 prefetch.
__device__ __forceinline__ uint4 load16_stream_act(const void* p) {
  uint4 v;
  asm("ld.global.cg.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// The 16 bits of a 16-bit storage value, and the 32 of an f32.
__device__ __forceinline__ unsigned int storage_bits(__half x) { return __half_as_ushort(x); }
__device__ __forceinline__ unsigned int storage_bits(__nv_bfloat16 x) { return __bfloat16_as_ushort(x); }
__device__ __forceinline__ unsigned int storage_bits(float x) { return __float_as_uint(x); }

// cp.async (sm_80+), global -> shared without a register: 16 bytes bypassing L1, where src_bytes 0
// (valid false) zero-fills the destination (src must still be a valid address); or N = 4, 8 or 16
// bytes through L1 (.ca, the only mode below 16). Both addresses aligned to the size. Then commit
// the group and wait.
__device__ __forceinline__ void cp_async16(unsigned int dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
template <int N> __device__ __forceinline__ void cp_async_ca(unsigned int dst, const void* src) {
  static_assert(N == 4 || N == 8 || N == 16, "cp.async copies 4, 8 or 16 bytes");
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(dst), "l"(src), "n"(N) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// d += A * B for one m16n8k16 tile with f32 accumulation (`mma.sync`, sm_80+): A is 16x16
// (row-major fragment a0..a3), B is 16x8 (column fragment b0, b1), both f16 or bf16 pairs.
// Fragment layouts are the PTX ISA's; callers may permute k as long as A and B agree. Volatile, so
// that it stays after the (volatile) loads a caller issues ahead of it: the compiler otherwise
// interleaves load, MMA, load, and the warp stalls on each load in turn.
template <typename H> __device__ __forceinline__ void mma_m16n8k16(float (&d)[4], unsigned int a0, unsigned int a1,
                                                                   unsigned int a2, unsigned int a3, unsigned int b0,
                                                                   unsigned int b1);
template <> __device__ __forceinline__ void mma_m16n8k16<__nv_bfloat16>(float (&d)[4], unsigned int a0, unsigned int a1,
                                                                        unsigned int a2, unsigned int a3,
                                                                        unsigned int b0, unsigned int b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
template <> __device__ __forceinline__ void mma_m16n8k16<__half>(float (&d)[4], unsigned int a0, unsigned int a1,
                                                                 unsigned int a2, unsigned int a3, unsigned int b0,
                                                                 unsigned int b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// A 16-byte vector of storage type T (from `load16_stream`, say) as f32.
template <typename T> __device__ __forceinline__ void unpack16_as(const uint4& v, float (&out)[Vec16<T>::N]);
template <> __device__ __forceinline__ void unpack16_as<float>(const uint4& v, float (&out)[4]) { unpack16(v, out); }
template <> __device__ __forceinline__ void unpack16_as<__half>(const uint4& v, float (&out)[8]) {
  unpack16<__half>(v, out);
}
template <> __device__ __forceinline__ void unpack16_as<__nv_bfloat16>(const uint4& v, float (&out)[8]) {
  unpack16<__nv_bfloat16>(v, out);
}

}  // namespace kiln

// ---- programmatic dependent launch (PDL, sm_90+) ---------------------------------------------

namespace kiln {

// In a graph, kiln gives a kernel node whose only dependency is another kernel node a
// programmatic edge (src/runtime/cuda/graph.rs): it may start while its predecessor's last
// blocks still run. Every kiln kernel calls wait_prior_grids() first thing in every block (the
// GEMVs after issuing their first weight loads, which depend on nothing) and then lets its own
// dependents launch, so that a chain of kernels can be resident at once. That is why every
// activation is read with coherent loads (the coherence rule at load16_act): on the H200 (kiln
// gate, 2026-11-29) non-coherent loads (`ld.global.nc`, `const __restrict__` pointers) of
// activations gave wrong bf16 results under PDL, and with coherent loads every check passes
// (bench/NOTES-decode.md). `KILN_PDL=0` turns programmatic edges off.
//
// Blocks until every grid this one depends on programmatically has completed and its memory
// writes are visible (`griddepcontrol.wait`). Without a programmatic launch (no PDL attribute or
// graph edge) the grid starts only after its predecessors anyway and this returns at once; before
// sm_90 it is a no-op. A kernel that supports PDL reads nothing the prior grid may still write
// (the activations) and writes nothing before this call, in every block, unconditionally (also on
// its early-return paths): a grid whose blocks complete without waiting would let a later grid pass
// an unfinished earlier one. Because every grid waits before it lets its dependents launch, all
// grids before the prior one are complete when a grid starts: what they wrote may be read before
// the wait (the planned early reads of the step block, src/plan/check.rs rule 9; the KV rows of
// earlier steps, attention_split.cu KILN_ATTN_KV_EARLY).
//
// Then lets this grid's dependents launch (allow_dependents below): they wait in turn.
//
// KILN_TRACE=1 (a developer's define, KILN_NVRTC_DEFINES=KILN_TRACE=1; never in output runs): thread
// 0 of every block records one trace entry in the module globals kiln_trace_n / kiln_trace, read by
// the CUDA executor when KILN_TRACE_OUT names a file (src/runtime/cuda/exec.rs `trace_end`, summed
// by scripts/trace_summary.py): the grid's %gridid, %globaltimer (ns) when the block reached the
// wait and when the wait returned, %smid, the grid's block count and the block's index, and (where
// the kernel opens with KILN_TRACE_BLOCK_END(), below) %globaltimer when the block's last thread
// left the kernel, else 0. The slot is taken (an atomic) before the wait, so a block resident
// before the prior grid completes adds nothing after the wait but a store; entries past
// KILN_TRACE_CAP are dropped (counted).
#ifndef KILN_TRACE
#define KILN_TRACE 0
#endif
#if KILN_TRACE
#ifndef KILN_TRACE_CAP
#define KILN_TRACE_CAP (1u << 20)
#endif
// Words (u64) per block entry: grid, at the wait, after it, smid/blocks/block, end (exec.rs `trace_end`).
#define KILN_TRACE_WORDS 5ull
// Phase stamps per block entry (KILN_TRACE_PHASE below; exec.rs writes them beside the trace): the one
// place the count is set, exec.rs and scripts/trace_summary.py take it from the buffers' sizes.
#define KILN_TRACE_PHASES 12ull
// What the trace build's own parts cost (A/Bs of trace builds; both 1 by default): 0 leaves out the
// phase stamps (KILN_TRACE_PHASE, _AFTER: the words stay 0) or the end guard (KILN_TRACE_BLOCK_END: its
// barrier, every thread's atomic and fence at exit; the end word stays 0).
#ifndef KILN_TRACE_PHASE_STAMPS
#define KILN_TRACE_PHASE_STAMPS 1
#endif
#ifndef KILN_TRACE_END_GUARD
#define KILN_TRACE_END_GUARD 1
#endif
}  // namespace kiln
// Global scope, so the module's symbols are these names (no namespace mangling).
__device__ unsigned int kiln_trace_n;
__device__ unsigned long long kiln_trace[KILN_TRACE_WORDS * (KILN_TRACE_CAP)];
__device__ unsigned long long kiln_trace_phase[KILN_TRACE_PHASES * (KILN_TRACE_CAP)];
__device__ unsigned int kiln_trace_sink;  // KILN_TRACE_PHASE_AFTER's stores
namespace kiln {
__device__ __forceinline__ unsigned long long trace_clock() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ bool trace_thread() { return threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0; }
// The block's trace slot (written by thread 0 in wait_prior_grids) and how many of its threads have
// left the kernel.
struct TraceBlock {
  unsigned int slot;
  unsigned int done;
};
__device__ __forceinline__ TraceBlock& trace_block() {
  __shared__ TraceBlock b;
  return b;
}
// KILN_TRACE_BLOCK_END(), a kernel's first statement (every thread's): a guard that stamps, on every
// return path, when the block's last thread left the kernel into the block's entry (a kernel without
// it leaves 0 there). Its constructor's barrier (trace builds only) orders the counter's reset before
// any thread's exit.
struct TraceBlockEnd {
  __device__ __forceinline__ TraceBlockEnd() {
    if (trace_thread()) {  // thread 0's own slot reads (its phase stamps) need this even without the guard
      trace_block().slot = 0xffffffffu;
      trace_block().done = 0;
    }
    if (!KILN_TRACE_END_GUARD) return;
    __syncthreads();
  }
  __device__ __forceinline__ ~TraceBlockEnd() {
    if (!KILN_TRACE_END_GUARD) return;
    __threadfence_block();
    const unsigned int threads = blockDim.x * blockDim.y * blockDim.z;
    if (atomicAdd(&trace_block().done, 1u) == threads - 1) {
      __threadfence_block();
      const unsigned int s = *(volatile unsigned int*)&trace_block().slot;
      if (s != 0xffffffffu) kiln_trace[KILN_TRACE_WORDS * s + 4] = trace_clock();
    }
  }
};
#define KILN_TRACE_BLOCK_END() ::kiln::TraceBlockEnd kiln_trace_block_end_
// KILN_TRACE_PHASE(i), i < KILN_TRACE_PHASES: thread 0 stamps %globaltimer as phase i of its block's
// entry (0 where a block never reaches it; kernels that open with KILN_TRACE_BLOCK_END() only, after
// their wait_prior_grids). Where a kernel's time goes after its wait: scripts/trace_summary.py prints
// each phase's median time past a block's own wait return.
__device__ __forceinline__ void trace_phase(unsigned int i) {
  if (KILN_TRACE_PHASE_STAMPS && trace_thread()) {
    const unsigned int s = trace_block().slot;
    if (s != 0xffffffffu && i < KILN_TRACE_PHASES) kiln_trace_phase[KILN_TRACE_PHASES * s + i] = trace_clock();
  }
}
#define KILN_TRACE_PHASE(i) ::kiln::trace_phase(i)
// KILN_TRACE_PHASE_AFTER(i, v): phase i once thread 0 holds the 32-bit value v (a register a load
// fills: thread 0 stores it first, so the stamp waits for that load's data).
__device__ __forceinline__ void trace_phase_after(unsigned int i, unsigned int v) {
  if (KILN_TRACE_PHASE_STAMPS && trace_thread()) *(volatile unsigned int*)&kiln_trace_sink = v;
  trace_phase(i);
}
#define KILN_TRACE_PHASE_AFTER(i, v) ::kiln::trace_phase_after(i, (unsigned int)(v))
#else
#define KILN_TRACE_BLOCK_END() \
  do {                         \
  } while (0)
#define KILN_TRACE_PHASE(i) \
  do {                      \
  } while (0)
#define KILN_TRACE_PHASE_AFTER(i, v) \
  do {                               \
  } while (0)
#endif
__device__ __forceinline__ void wait_prior_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#if KILN_TRACE
  const bool tracer = trace_thread();
  unsigned int slot = 0xffffffffu;
  if (tracer) {
    const unsigned int s = atomicAdd(&kiln_trace_n, 1u);
    if (s < (KILN_TRACE_CAP)) {
      slot = s;
      trace_block().slot = s;
      kiln_trace[KILN_TRACE_WORDS * s + 4] = 0;
      for (unsigned int i = 0; i < KILN_TRACE_PHASES; ++i) kiln_trace_phase[KILN_TRACE_PHASES * s + i] = 0;
      unsigned long long grid;
      unsigned int sm;
      asm volatile("mov.u64 %0, %%gridid;" : "=l"(grid));
      asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
      const unsigned long long blocks = (unsigned long long)gridDim.x * gridDim.y * gridDim.z;
      const unsigned long long block = blockIdx.x + (unsigned long long)gridDim.x * (blockIdx.y + (unsigned long long)gridDim.y * blockIdx.z);
      kiln_trace[KILN_TRACE_WORDS * s] = grid;
      kiln_trace[KILN_TRACE_WORDS * s + 3] = ((unsigned long long)sm << 48) | ((blocks & 0xffffffull) << 24) | (block & 0xffffffull);
      kiln_trace[KILN_TRACE_WORDS * s + 1] = trace_clock();
    }
  }
#endif
  asm volatile("griddepcontrol.wait;" ::: "memory");
#if KILN_TRACE
  if (slot != 0xffffffffu) kiln_trace[KILN_TRACE_WORDS * slot + 2] = trace_clock();
#endif
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Lets the grids that depend on this one programmatically start launching once every block of
// this grid has called it or exited (`griddepcontrol.launch_dependents`); they still wait for
// this grid's completion in their own wait_prior_grids(). A no-op without PDL and before sm_90.
__device__ __forceinline__ void allow_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Thread-block clusters (sm_90+; kernels/sample.cu, attention_split.cu): a barrier over every
// thread of the cluster that orders shared-memory writes before it with reads after it, in any
// block of the cluster; and the address of `p` (in this block's shared memory) in the shared
// memory of cluster block `rank`, generic, for plain loads and stores.
__device__ __forceinline__ void cluster_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#endif
}
template <typename P> __device__ __forceinline__ P* cluster_map(P* p, unsigned int rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  unsigned long long a;
  asm volatile("mapa.u64 %0, %1, %2;\n" : "=l"(a) : "l"(p), "r"(rank));
  return reinterpret_cast<P*>(a);
#else
  return rank == 0 ? p : nullptr;
#endif
}

// Pushes into a cluster block's shared memory (sm_90+; attention_qkv.cu, attention_split.cu's cluster
// kernel): the shared::cta address of `p`, that address in cluster block `rank`, an mbarrier's init,
// expected bytes and phase-0 wait, and 4- / 8- / 16-byte st.async stores that complete their bytes on the
// receiver's mbarrier `bar`. A reader that waits on its own mbarrier sees the pushed bytes with no
// fence on either side (barrier.cluster.arrive's default .release costs a GPU-scope MEMBAR; the
// relaxed barrier below has none). The protocol: every block initializes its mbarrier(s), posts the
// bytes it expects, runs fence_mbarrier_init() and cluster_arrive_relaxed() before its PDL wait, and
// cluster_wait() before its first push; no block may leave while a push can still target it: a
// relaxed barrier at the end, or (attention_qkv.cu) every block waiting on its own mbarriers, whose
// counts cover every push into it, before it leaves (a push's source is registers, so its sender may
// leave at once).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ unsigned int smem_addr(const void* p) { return (unsigned int)__cvta_generic_to_shared(p); }
__device__ __forceinline__ unsigned int remote_addr(unsigned int a, unsigned int rank) {
  unsigned int r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank));
  return r;
}
__device__ __forceinline__ void mbar_init(unsigned int bar) { asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory"); }
__device__ __forceinline__ void fence_mbarrier_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
__device__ __forceinline__ void mbar_expect(unsigned int bar, unsigned int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait0(unsigned int bar) {
  asm volatile(
      "{\n\t.reg .pred done;\n"
      "WAIT_%=:\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], 0;\n\t"
      "@!done bra WAIT_%=;\n}" ::"r"(bar)
      : "memory");
}
__device__ __forceinline__ void push16(unsigned int dst, const float4& v, unsigned int bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];" ::"r"(dst),
               "r"(__float_as_uint(v.x)), "r"(__float_as_uint(v.y)), "r"(__float_as_uint(v.z)), "r"(__float_as_uint(v.w)),
               "r"(bar)
               : "memory");
}
__device__ __forceinline__ void push4(unsigned int dst, float a, unsigned int bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(dst), "r"(__float_as_uint(a)),
               "r"(bar)
               : "memory");
}
__device__ __forceinline__ void push8(unsigned int dst, float a, float b, unsigned int bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.b32 [%0], {%1, %2}, [%3];" ::"r"(dst),
               "r"(__float_as_uint(a)), "r"(__float_as_uint(b)), "r"(bar)
               : "memory");
}
__device__ __forceinline__ void cluster_arrive_relaxed() { asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.aligned;" ::: "memory"); }
#endif

// Timing ablation, for `kiln bench` only (KILN_NVRTC_DEFINES=KILN_ABLATE=<mask>): a kernel whose bit
// is set keeps its launch and its place in the PDL chain (it waits, then lets its dependents
// launch) but does no work, so the step time it removes is what that kernel costs on the critical
// path. Results are garbage (never use it for output). Bits: 1 gated_linear, 2 fused_linear (o /
// down), 8 qkv_rope / qkv_linear, 16 attention_split and attention_cluster (the cluster writes
// zeros), 32 attention_merge, 64 linear (the logits: the fusion pass never fuses the vocabulary
// projection), 256 the fused GEMVs' folded norm only
// (as if has_norm were 0), 512 the gated_linear blocks from KILN_ABLATE_GATED_FROM (792) on only;
// 1024 sample, 2048 gather (the token embedding), 4096 rms_norm (decode's output norm); 4 names no
// kernel. 0, the default, compiles every check away.
#ifndef KILN_ABLATE
#define KILN_ABLATE 0
#endif
#ifndef KILN_ABLATE_GATED_FROM
#define KILN_ABLATE_GATED_FROM 792
#endif
#define KILN_ABLATED(bit)            \
  if ((KILN_ABLATE) & (bit)) {       \
    ::kiln::wait_prior_grids();      \
    return;                          \
  }

}  // namespace kiln
