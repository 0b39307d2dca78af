// probe_qkv_attn_o.cu: kiln's QKV-in-attention kernel (kernels/attention_qkv.cu, KILN_FUSE_QKV_ATTN=1)
// with the o projection as a tail, through that file's probe hooks. NOT one of kiln's kernels:
// compiled only by scripts/probe_qkv_attn_fold.py (kind `fold+o`), which times it against kiln's
// chain and against the fold without the tail.
//
//   kiln_qkv_attention_bf16(<kiln's arguments>)   this module's build of it, with the tail below
//     The tail's operands lie in the 32 bytes after the attention output: `out` + heads * 64 holds
//     a ProbeO {wo, acc, out_features} (the probe writes it; kiln's kernel would take them as
//     arguments). wo: W_o [out_features][heads * 64] row-major bf16; acc: out_features int64.
//     Adds round(y[n] * 2^32) to acc[n] for y = W_o att (att: the launch's bf16 attention output).
//
// Why (bench/NOTES-decode.md, session 49): with QKV in the attention a 0.5B layer is four launches
// (fused attention, o, gate/up, down); o is 1.9 us of the 20.2 us layer in place (session 40's
// trace), most of it its boundary. o's input is all 14 heads' outputs, each in its own cluster, so
// no cluster holds it; but o is linear: y = sum_h W_o[:, 64h..64h+63] att_h. So each cluster adds
// its head's term for every output: rank s takes rows s * out/8 .. (s+1) * out/8 - 1 (112 x 64
// weights, 14 KiB, copied into shared memory before the PDL wait, while the previous launch runs),
// every rank merges the splits itself (kEveryRankMerges: 8 DSMEM slot reads, no extra barrier),
// and after the last cluster barrier each 8-lane group sums one row's 64 products and adds it to
// the accumulator at 2^-32 fixed point by an L2 reduction (red.global.add.u64). Integer sums do not
// depend on the order, so every run gives the same bits (kiln's eager == graph rule), which float
// atomics would not.
//
// What kiln would add and this probe does not model: gate/up's norm and down's residual would read
// resid + acc * 2^-32 (7 KiB of int64 more per block than the bf16 row) after their wait, and down
// would zero acc behind its read for the next layer. The probe's gate/up and down stand-ins read
// the o stand-in's buffer, so `kiln - fold+o` prices the launch and the tail, not those reads.
// Shapes: out_features % 8 == 0, out_features <= 8 * 128 (4 passes of 32 rows per rank).
#include "probe_common.cuh"

struct ProbeO {
  const __nv_bfloat16* wo;
  unsigned long long* acc;
  unsigned int out_features, pad;
};

#define PO_PASSES 4                   // 32 rows per pass: out_features / 8 <= 128
__shared__ __align__(16) __nv_bfloat16 probe_ws[32 * PO_PASSES * 64];  // the rank's W_o rows x 64
__shared__ float probe_att[64];                                        // the head's output (bf16 values)

// Before the wait: the tail's operands, and the rank's W_o columns of head h into shared memory
// (thread tid copies the 16-byte chunk c = tid % 8 of rows tid / 8 + 32 i: the chunks it reads back).
__device__ __forceinline__ ProbeO probe_o_before_wait(const __nv_bfloat16* out, unsigned int heads, unsigned int h,
                                                      unsigned int s, unsigned int tid) {
  const ProbeO po = *reinterpret_cast<const ProbeO*>(out + (size_t)heads * 64);
  const unsigned int rows = po.out_features / 8, in = heads * 64, c = tid & 7;
#pragma unroll
  for (unsigned int i = 0; i < PO_PASSES; ++i) {
    const unsigned int r = (tid >> 3) + 32 * i;
    if (r < rows) cp_async16(probe_ws + (r * 8 + c) * 8, po.wo + (size_t)(s * rows + r) * in + h * 64 + 8 * c);
  }
  return po;
}

// After the last cluster barrier (probe_att written by every rank's merge): row r's 64 products over
// its 8 lanes (8 each, in element order, then a shuffle tree), added at 2^-32 fixed point.
__device__ __forceinline__ void probe_o_after_merge(const ProbeO& po, unsigned int s, unsigned int tid) {
  cp_async_wait_all();
  const unsigned int rows = po.out_features / 8, c = tid & 7;
  float a[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) a[e] = probe_att[8 * c + e];
#pragma unroll
  for (unsigned int i = 0; i < PO_PASSES; ++i) {
    const unsigned int r = (tid >> 3) + 32 * i;
    float d = 0.0f;
    if (r < rows) {
      const uint4 w = *reinterpret_cast<const uint4*>(probe_ws + (r * 8 + c) * 8);
      const __nv_bfloat162* w2 = reinterpret_cast<const __nv_bfloat162*>(&w);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float2 f = __bfloat1622float2(w2[e]);
        d = __fmaf_rn(f.x, a[2 * e], d);
        d = __fmaf_rn(f.y, a[2 * e + 1], d);
      }
    }
#pragma unroll
    for (int o = 4; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
    if (r < rows && c == 0) {
      atomicAdd(po.acc + s * rows + r, (unsigned long long)__double2ll_rn((double)d * 4294967296.0));
    }
  }
}

#define KILN_QKV_ATTN_EVERY_RANK_MERGES 1
#define KILN_QKV_ATTN_PUSH 0  // every rank merges: the cluster-barrier exchanges (kernels/attention_qkv.cu)
#define KILN_QKV_ATTN_ATT probe_att
#define KILN_QKV_ATTN_BEFORE_WAIT() const ProbeO probe_po = probe_o_before_wait(out, heads, h, s, tid)
#define KILN_QKV_ATTN_AFTER_MERGE() probe_o_after_merge(probe_po, s, tid)
#include "attention_qkv.cu"
