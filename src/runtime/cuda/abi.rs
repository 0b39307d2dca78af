//! The kernel ABI: how a launch record becomes a CUDA kernel call. Shared by the eager and
//! graph executors and matched by `kernels/*.cu`. Pure host code, testable without a GPU.
//!
//! - Symbol: `kiln_{kernel}_{dt}` where `dt` is the dtype of the launch's first float operand
//!   (`f32`, `f16`, `bf16`); `linear` appends the output dtype (`kiln_linear_bf16_f32` for
//!   logits); `sample` is always `kiln_sample_f32`; a launch with `occupancy` 3 calls the dense
//!   variant of a linear-family kernel, the same name with `_o3` appended (`_o3u` for a
//!   `fused_linear` whose norm's rows are not staged; [`launch_symbol`]). A decode o / down
//!   projection calls `kiln_fused_linear_res_{dt}_{dt}`, its one path compiled alone
//!   (`KILN_FUSED_RES_ENTRY=0` off); a GEMV `linear` / `gated_linear` calls
//!   `kiln_linear[_argmax]_gemv_*` / `kiln_gated_linear_gemv_*` (its tensor-core paths only;
//!   `KILN_GEMV_ONLY_ENTRY=0` off); with `KILN_QKV_ROPE_GEMV_ENTRY=1` a decode `qkv_rope` with a
//!   norm calls `kiln_qkv_rope_gemv_*`.
//! - Parameters: one device pointer (`u64`) per operand, in `Launch::bufs` order, then the
//!   kernel's scalars in the order of [`scalars`]. `u32` as `unsigned int`, `i32` as `int`,
//!   `f32` as `float`; a `bool` is an `unsigned int` 0/1.

use crate::ir::{RopeScaling, RopeStyle};
use crate::plan::{BufArg, Kernel};

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    U32(u32),
    I32(i32),
    F32(f32),
}

impl Scalar {
    pub fn to_le_bytes(self) -> [u8; 4] {
        match self {
            Scalar::U32(x) => x.to_le_bytes(),
            Scalar::I32(x) => x.to_le_bytes(),
            Scalar::F32(x) => x.to_le_bytes(),
        }
    }
}

/// The symbol of a kernel launch (a library launch, `Kernel::is_library`, has none: its name
/// here is only a label).
pub fn symbol(kernel: &Kernel, bufs: &[BufArg]) -> String {
    let first_float = bufs.iter().find(|b| b.dtype.is_float()).map(|b| b.dtype.name()).unwrap_or("f32");
    match kernel {
        // The output is the last operand but for the argmax key (u32) after it.
        Kernel::Linear { argmax, stats, .. } => {
            let out = bufs.iter().rev().find(|b| b.dtype.is_float()).map(|b| b.dtype.name()).unwrap_or("f32");
            let a = if *argmax { "argmax_" } else { "" };
            let st = if stats.is_some() { "stats_" } else { "" };
            format!("kiln_linear_{a}{st}{first_float}_{out}")
        }
        Kernel::Sample { .. } => "kiln_sample_f32".to_string(),
        Kernel::Advance { .. } => "kiln_advance".to_string(),
        Kernel::SampleAdvance { .. } => "kiln_sample_advance_f32".to_string(),
        // With an out-norm, `out` is second from last (before sumsq).
        Kernel::FusedLinear { out_norm, .. } => {
            let at = bufs.len().saturating_sub(if *out_norm { 2 } else { 1 });
            let out = bufs.get(at).map(|b| b.dtype.name()).unwrap_or("f32");
            let on = if *out_norm { "outnorm_" } else { "" };
            format!("kiln_fused_linear_{on}{first_float}_{out}")
        }
        // One entry point per chunk of heads (registers of that many heads).
        Kernel::AttentionCluster { chunk_heads, .. } => format!("kiln_attention_cluster_g{chunk_heads}_{first_float}"),
        // The workspace is f32; the kernel is named by the output's dtype.
        Kernel::AttentionMerge { .. } => {
            format!("kiln_attention_merge_{}", bufs.last().map(|b| b.dtype.name()).unwrap_or("f32"))
        }
        // Their entries that let dependents launch before the wait.
        Kernel::Gather { release: true, .. } | Kernel::RmsNorm { release: true, .. } => {
            format!("kiln_{}_release_{first_float}", kernel.name())
        }
        k => format!("kiln_{}_{first_float}", k.name()),
    }
}

/// Scalar parameters after the pointers, in order. The CUDA signature of each kernel lists
/// exactly these, with these names.
pub fn scalars(kernel: &Kernel) -> Vec<Scalar> {
    use Scalar::*;
    match *kernel {
        // (table, indices, out, rows, dim, table_rows)
        Kernel::Gather { rows, dim, table_rows, .. } => vec![U32(rows), U32(dim), U32(table_rows)],
        // (x, weight, out, rows, dim, eps)
        Kernel::RmsNorm { rows, dim, eps, .. } => vec![U32(rows), U32(dim), F32(eps)],
        // (a, b, weight, sum, out, rows, dim, eps)
        Kernel::AddRmsNorm { rows, dim, eps } => vec![U32(rows), U32(dim), F32(eps)],
        // (x, weight, out, rows, heads, head_dim, eps)
        Kernel::HeadRmsNorm { rows, heads, head_dim, eps } => vec![U32(rows), U32(heads), U32(head_dim), F32(eps)],
        // (x, [sumsq,] weight, [bias,] out, [argmax_key,] rows, in_features, out_features, has_bias
        // [, eps]). Without a bias the pointer list has no bias entry; the kernel takes a bias
        // pointer anyway and the runtime passes 0 in its place (see `pointer_slots`). The argmax
        // key only for `kiln_linear_argmax_*`; sumsq and eps only for `kiln_linear_*stats_*`.
        Kernel::Linear { rows, in_features, out_features, bias, stats, .. } => {
            let mut v = vec![U32(rows), U32(in_features), U32(out_features), U32(bias as u32)];
            v.extend(stats.map(F32));
            v
        }
        // A library call (`blaslt`): no kernel parameters.
        Kernel::Gemm { .. } => vec![],
        // (x, positions, out, rows, heads, head_dim, rotary_dim, interleaved, theta,
        //  scaling_kind (0 none, 1 llama3, 2 linear), factor, low_freq_factor, high_freq_factor,
        //  original_max_position, then RopeFreqs by value: by_value_slots)
        Kernel::Rope { rows, heads, head_dim, rope } => [vec![U32(rows), U32(heads), U32(head_dim)], rope_scalars(&rope)].concat(),
        // (q, k, v, positions, cache_base, q_out, k_cache, v_cache, rows, heads, kv_heads,
        //  head_dim, kv_rows, q_stride, kv_stride, then Rope's rotary_dim .. original_max_position,
        //  then RopeFreqs by value: by_value_slots): the strides are the elements between rows of q
        //  and of k / v (a packed qkv's width).
        Kernel::RopeKvWrite { rows, heads, kv_heads, head_dim, kv_rows, rope, packed } => {
            let (q_stride, kv_stride) = if packed {
                let w = (heads + 2 * kv_heads) * head_dim;
                (w, w)
            } else {
                (heads * head_dim, kv_heads * head_dim)
            };
            [vec![U32(rows), U32(heads), U32(kv_heads), U32(head_dim), U32(kv_rows), U32(q_stride), U32(kv_stride)], rope_scalars(&rope)]
                .concat()
        }
        // (k, v, positions, cache_base, k_cache, v_cache, rows, kv_dim, kv_rows)
        Kernel::KvWrite { rows, kv_dim, kv_rows } => vec![U32(rows), U32(kv_dim), U32(kv_rows)],
        // (q, k_cache, v_cache, positions, cache_base, out, rows, heads, kv_heads, head_dim, scale, kv_rows)
        Kernel::Attention { rows, heads, kv_heads, head_dim, scale, kv_rows }
        | Kernel::AttentionPrefill { rows, heads, kv_heads, head_dim, scale, kv_rows } => {
            vec![U32(rows), U32(heads), U32(kv_heads), U32(head_dim), F32(scale), U32(kv_rows)]
        }
        // (x, norm_w|0, weight, bias|0, residual|0, out, prefetch|0, [out_norm_w, sumsq,]
        //  rows, in_features, out_features, has_norm, eps, has_bias, has_residual, l2_prefetch);
        //  absent operands are null pointer slots (`pointers`); the out-norm's two only for
        //  `kiln_fused_linear_outnorm_*`.
        Kernel::FusedLinear { rows, in_features, out_features, norm, eps, bias, residual, l2_prefetch, .. } => vec![
            U32(rows),
            U32(in_features),
            U32(out_features),
            U32(norm as u32),
            F32(eps),
            U32(bias as u32),
            U32(residual as u32),
            U32(l2_prefetch),
        ],
        // (x, norm_w|0, wq, wk, wv, bq|0, bk|0, bv|0, out_q, out_k, out_v, rows, in_features,
        //  nq, nk, nv, has_norm, eps, has_bias)
        Kernel::QkvLinear { rows, in_features, out_features: [q, k, v], norm, eps, bias } => {
            vec![U32(rows), U32(in_features), U32(q), U32(k), U32(v), U32(norm as u32), F32(eps), U32(bias as u32)]
        }
        // (x, norm_w|0, weight, bias|0, positions, cache_base, q_out, k_cache, v_cache, rows,
        //  in_features, heads, kv_heads, head_dim, kv_rows, has_norm, eps, has_bias, early, then
        //  Rope's rotary_dim .. original_max_position, then RopeFreqs by value: by_value_slots)
        Kernel::QkvRope { rows, in_features, heads, kv_heads, head_dim, kv_rows, norm, eps, bias, early, rope } => [
            vec![
                U32(rows),
                U32(in_features),
                U32(heads),
                U32(kv_heads),
                U32(head_dim),
                U32(kv_rows),
                U32(norm as u32),
                F32(eps),
                U32(bias as u32),
                U32(early as u32),
            ],
            rope_scalars(&rope),
        ]
        .concat(),
        // (x, norm_w|0, gate, up, out, rows, in_features, out_features, has_norm, eps)
        Kernel::GatedLinear { rows, in_features, out_features, norm, eps } => {
            vec![U32(rows), U32(in_features), U32(out_features), U32(norm as u32), F32(eps)]
        }
        // (q, k_cache, v_cache, positions, cache_base, workspace, rows, heads, kv_heads, head_dim,
        //  scale, kv_rows, splits, split_len)
        Kernel::AttentionSplit { rows, heads, kv_heads, head_dim, scale, kv_rows, splits, split_len, min_split_len, early } => {
            vec![
                U32(rows),
                U32(heads),
                U32(kv_heads),
                U32(head_dim),
                F32(scale),
                U32(kv_rows),
                U32(splits),
                U32(split_len),
                U32(min_split_len),
                U32(early as u32),
            ]
        }
        // (workspace, positions, out, rows, heads, head_dim, splits, split_len, min_split_len, early)
        Kernel::AttentionMerge { rows, heads, head_dim, splits, split_len, min_split_len, early } => {
            vec![U32(rows), U32(heads), U32(head_dim), U32(splits), U32(split_len), U32(min_split_len), U32(early as u32)]
        }
        // (q, k_cache, v_cache, positions, cache_base, out, rows, heads, kv_heads, head_dim, scale,
        //  kv_rows, split_len, min_split_len, chunk_heads, early)
        Kernel::AttentionCluster { rows, heads, kv_heads, head_dim, scale, kv_rows, split_len, min_split_len, chunk_heads, early } => {
            vec![
                U32(rows),
                U32(heads),
                U32(kv_heads),
                U32(head_dim),
                F32(scale),
                U32(kv_rows),
                U32(split_len),
                U32(min_split_len),
                U32(chunk_heads),
                U32(early as u32),
            ]
        }
        // (x, norm_w|0, weight, bias|0, positions, cache_base, k_cache, v_cache, out, in_features,
        //  heads, kv_heads, head_dim, kv_rows, has_norm, eps, has_bias, early, scale, split_len,
        //  min_split_len, then Rope's rotary_dim .. original_max_position, then RopeFreqs by value)
        Kernel::QkvAttention {
            in_features,
            heads,
            kv_heads,
            head_dim,
            kv_rows,
            norm,
            eps,
            bias,
            rope,
            scale,
            split_len,
            min_split_len,
            early,
        } => [
            vec![
                U32(in_features),
                U32(heads),
                U32(kv_heads),
                U32(head_dim),
                U32(kv_rows),
                U32(norm as u32),
                F32(eps),
                U32(bias as u32),
                U32(early as u32),
                F32(scale),
                U32(split_len),
                U32(min_split_len),
            ],
            rope_scalars(&rope),
        ]
        .concat(),
        // (gate, up, out, n) / (a, b, out, n)
        Kernel::SwiGlu { n } | Kernel::Add { n } => vec![U32(n)],
        // (tokens, stop_ids, token_ids, positions, counter, control, ring, rows, burst, stop_ids,
        //  cond_handle): the trailing `unsigned long long` conditional handle of the device
        //  loop is appended by the runtime (0 outside a graph loop).
        Kernel::Advance { rows, burst, stop_ids } => vec![U32(rows), U32(burst), U32(stop_ids)],
        // (logits, temperature, top_k, top_p, seed, counter, out, rows, vocab)
        Kernel::Sample { rows, vocab } => vec![U32(rows), U32(vocab)],
        // (logits, temperature, top_k, top_p, seed, stop_ids, out, token_ids, positions, counter,
        //  control, ring, argmax_key|0, vocab, burst, stop_ids, cond_handle): the handle as
        //  `Advance`'s; the key's slot is null without one.
        Kernel::SampleAdvance { vocab, burst, stop_ids, .. } => vec![U32(vocab), U32(burst), U32(stop_ids)],
    }
}

/// The rotary scalars of `rope.cu` and `rope_kv_write`: rotary_dim, interleaved, theta,
/// scaling_kind (0 none, 1 llama3, 2 linear), factor, low_freq_factor, high_freq_factor,
/// original_max_position.
fn rope_scalars(rope: &crate::ir::RopeSpec) -> Vec<Scalar> {
    use Scalar::*;
    let (kind, factor, low, high, orig) = match rope.scaling {
        RopeScaling::None => (0, 1.0, 0.0, 0.0, 0),
        RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_max_position } => {
            (1, factor, low_freq_factor, high_freq_factor, original_max_position)
        }
        RopeScaling::Linear { factor } => (2, factor, 0.0, 0.0, 0),
    };
    vec![
        U32(rope.rotary_dim),
        U32((rope.style == RopeStyle::Interleaved) as u32),
        F32(rope.theta),
        U32(kind),
        F32(factor),
        F32(low),
        F32(high),
        U32(orig),
    ]
}

/// Pairs of the inverse-frequency table a rotating launch (`qkv_rope`, `qkv_attention`, `rope`, `rope_kv_write`)
/// takes by value (kernels/rope.cuh `KILN_ROPE_TABLE`).
pub const ROPE_TABLE: usize = 64;

/// The by-value parameter after a launch's scalars, as consecutive 8-byte slots holding its bytes
/// (little-endian; `LaunchParams` hands the driver a pointer to the first, and the driver copies
/// the parameter's size from there): for the kernels that rotate (`qkv_rope`, `qkv_attention`,
/// `rope`, `rope_kv_write`), kernels/rope.cuh `RopeFreqs` { n, v[64] } with v[i] = `RopeSpec::inv_freq(i)`,
/// the CPU reference's own values, and n = rotary_dim / 2, or n = 0 (the kernel computes them)
/// when the rope has more pairs than the table. Empty for every other kernel.
pub fn by_value_slots(kernel: &Kernel) -> Vec<u64> {
    let (Kernel::QkvRope { rope, .. } | Kernel::QkvAttention { rope, .. } | Kernel::Rope { rope, .. } | Kernel::RopeKvWrite { rope, .. }) =
        kernel
    else {
        return Vec::new();
    };
    let pairs = rope.rotary_dim as usize / 2;
    let mut words = vec![0u32; 1 + ROPE_TABLE];
    if pairs <= ROPE_TABLE {
        words[0] = pairs as u32;
        for (i, w) in words[1..=pairs].iter_mut().enumerate() {
            *w = rope.inv_freq(i).to_bits();
        }
    }
    words.chunks(2).map(|c| c[0] as u64 | (c.get(1).copied().unwrap_or(0) as u64) << 32).collect()
}

/// Number of pointer parameters the CUDA kernel takes (Linear always takes a bias slot).
pub fn pointer_slots(kernel: &Kernel, bufs: &[BufArg]) -> usize {
    match kernel {
        Kernel::Linear { bias: false, .. } => bufs.len() + 1,
        Kernel::FusedLinear { out_norm, .. } => 7 + 2 * *out_norm as usize,
        Kernel::QkvLinear { .. } => 11,
        Kernel::QkvRope { .. } | Kernel::QkvAttention { .. } => 9,
        Kernel::RopeKvWrite { .. } => 8,
        Kernel::GatedLinear { .. } => 5,
        Kernel::SampleAdvance { .. } => 13,
        _ => bufs.len(),
    }
}

/// Device pointers of a launch's operands given each region's base address, with a null bias
/// slot inserted for a bias-less linear (its operands become x, weight, 0, out), and a packed
/// qkv expanded to its q, k and v column ranges.
pub fn pointers(kernel: &Kernel, bufs: &[BufArg], region_base: &[u64; crate::plan::N_REGIONS]) -> Vec<u64> {
    let mut p: Vec<u64> = bufs.iter().map(|b| region_base[b.region.index()] + b.offset).collect();
    match *kernel {
        Kernel::Linear { bias: false, stats, .. } => p.insert(2 + stats.is_some() as usize, 0),
        // Fixed slots x, norm_w, weight, bias, residual, out, prefetch (then, with an out-norm,
        // out_norm_w, sumsq); absent ones are null (the operands list the out-norm weight
        // and the prefetch span before out).
        Kernel::FusedLinear { norm, bias, residual, l2_prefetch, out_norm, .. } => {
            let mut it = p.into_iter();
            let mut next = |present: bool| if present { it.next().unwrap_or(0) } else { 0 };
            let head = [next(true), next(norm), next(true), next(bias), next(residual)];
            let out_norm_w = next(out_norm);
            let prefetch = next(l2_prefetch > 0);
            let mut slots = [head.to_vec(), vec![next(true), prefetch]].concat();
            if out_norm {
                slots.extend([out_norm_w, next(true)]);
            }
            return slots;
        }
        Kernel::GatedLinear { norm: false, .. } => p.insert(1, 0),
        Kernel::SampleAdvance { argmax: false, .. } => p.push(0),
        // A packed qkv: q, k and v are column ranges of one buffer.
        Kernel::RopeKvWrite { heads, kv_heads, head_dim, packed: true, .. } => {
            let es = bufs[0].dtype.size() as u64;
            let base = p[0];
            let (k, v) = (base + (heads * head_dim) as u64 * es, base + ((heads + kv_heads) * head_dim) as u64 * es);
            p.splice(1..1, [k, v]);
        }
        // Fixed slots x, norm_w, wq, wk, wv, bq, bk, bv, out_q, out_k, out_v; absent ones are null.
        Kernel::QkvLinear { norm, bias, .. } => {
            let mut it = p.into_iter();
            let mut next = |present: bool| if present { it.next().unwrap_or(0) } else { 0 };
            let (x, nw) = (next(true), next(norm));
            let w = [next(true), next(true), next(true)];
            let b = [next(bias), next(bias), next(bias)];
            let o = [next(true), next(true), next(true)];
            return [vec![x, nw], w.to_vec(), b.to_vec(), o.to_vec()].concat();
        }
        // Fixed slots x, norm_w, weight, bias, positions, cache_base, q_out, k_cache, v_cache
        // (`qkv_attention`: ..., cache_base, k_cache, v_cache, out); absent ones are null.
        Kernel::QkvRope { norm, bias, .. } | Kernel::QkvAttention { norm, bias, .. } => {
            let mut it = p.into_iter();
            let mut next = |present: bool| if present { it.next().unwrap_or(0) } else { 0 };
            let head = [next(true), next(norm), next(true), next(bias)];
            let rest = [next(true), next(true), next(true), next(true), next(true)];
            return [head.to_vec(), rest.to_vec()].concat();
        }
        _ => {}
    }
    p
}

/// The symbol a launch calls: [`symbol`], with `_o3` / `_o3u` for the dense GEMV variant
/// (`Launch::occupancy` = `GEMV_DENSE_BLOCKS_PER_SM`: `__launch_bounds__(256, 3)` in linear.cu /
/// linear_fused.cu).
pub fn launch_symbol(l: &crate::plan::Launch) -> String {
    let s = symbol(&l.kernel, &l.bufs);
    let s = match l.kernel {
        Kernel::QkvRope { .. } if qkv_rope_gemv_entry(l) => s.replacen("kiln_qkv_rope_", "kiln_qkv_rope_gemv_", 1),
        _ if !gemv_only_entry(l) => s,
        Kernel::Linear { argmax: true, .. } => s.replacen("kiln_linear_argmax_", "kiln_linear_argmax_gemv_", 1),
        Kernel::Linear { .. } => s.replacen("kiln_linear_", "kiln_linear_gemv_", 1),
        _ => s.replacen("kiln_gated_linear_", "kiln_gated_linear_gemv_", 1),
    };
    if l.occupancy == crate::plan::geometry::GEMV_DENSE_BLOCKS_PER_SM {
        format!("{s}{}", crate::plan::geometry::dense_variant_suffix(&l.kernel))
    } else if fused_res_k2(l) {
        s.replacen("kiln_fused_linear_", "kiln_fused_linear_res_k2_", 1)
    } else if fused_res_entry(l) {
        s.replacen("kiln_fused_linear_", "kiln_fused_linear_res_", 1)
    } else {
        s
    }
}

/// Whether a `linear` (no stats) or `gated_linear` launch calls its GEMV-only entry point
/// (`kiln_linear[_argmax]_gemv_*`, `kiln_gated_linear_gemv_*`: only the tensor-core GEMV paths, ~1/4
/// of the instructions; any other input traps): on unless `KILN_GEMV_ONLY_ENTRY=0` (run time; built in
/// session 54, the default since session 55's H100 A/B: +4.1% / +1.1% on the 0.5B / 1B) for a launch that takes
/// those paths: at most [`LINEAR_GEMV_MAX_ROWS`](crate::plan::geometry::LINEAR_GEMV_MAX_ROWS) rows,
/// 16-bit x with in % 8 == 0 (the planner's offsets are aligned; a dense gated launch is planned only
/// where its variant has the path: `geometry::dense_variant_covers`).
fn gemv_only_entry(l: &crate::plan::Launch) -> bool {
    let rows = match l.kernel {
        Kernel::Linear { rows, stats: None, .. } | Kernel::GatedLinear { rows, .. } => rows,
        _ => return false,
    };
    crate::plan::knob("KILN_GEMV_ONLY_ENTRY") != "0"
        && (1..=crate::plan::geometry::LINEAR_GEMV_MAX_ROWS).contains(&rows)
        && crate::plan::geometry::gemv_tensor_cores(&l.kernel, &l.bufs)
        && aligned16(l)
}

/// The kernels' own alignment test on top of the plan's (planned offsets are 256-aligned): every
/// operand 16-byte aligned, as the tensor-core paths the entry points keep require.
fn aligned16(l: &crate::plan::Launch) -> bool {
    l.bufs.iter().all(|b| b.offset % 16 == 0)
}

/// Whether a `qkv_rope` launch calls `kiln_qkv_rope_gemv_*` (kernels/linear_fused.cu: its tensor-core
/// GEMV paths with a norm only; any other input traps): `KILN_QKV_ROPE_GEMV_ENTRY=1` (run time; off by
/// default: session 56's H100 A/B on the 1B lost 1.5%, `bench/results/2026-12-05-decode-ab-s56.md`) and a launch that
/// takes those paths: a norm, 256 threads, at most
/// [`LINEAR_GEMV_MAX_ROWS`](crate::plan::geometry::LINEAR_GEMV_MAX_ROWS) rows, 16-bit x, in % 8 == 0,
/// 16-byte aligned operands, and in the dense variant a staged norm
/// ([`norm_rows_staged`](crate::plan::geometry::norm_rows_staged); its other path spilled in the main
/// loop when compiled beside it). Sizes (sm_90a SASS instructions): 2792 against 7528 in the default
/// variant (the 1B's), 2856 against 6768 in `_o3` (the 8B's).
fn qkv_rope_gemv_entry(l: &crate::plan::Launch) -> bool {
    let Kernel::QkvRope { rows, in_features, norm: true, .. } = l.kernel else {
        return false;
    };
    crate::plan::knob("KILN_QKV_ROPE_GEMV_ENTRY") == "1"
        && l.block[0] == 256
        && (l.occupancy != crate::plan::geometry::GEMV_DENSE_BLOCKS_PER_SM || crate::plan::geometry::norm_rows_staged(rows, in_features))
        && (1..=crate::plan::geometry::LINEAR_GEMV_MAX_ROWS).contains(&rows)
        && in_features % 8 == 0
        && l.bufs.first().is_some_and(|b| matches!(b.dtype, crate::ir::DType::F16 | crate::ir::DType::BF16))
        && aligned16(l)
}

/// Whether a `fused_linear` launch calls `kiln_fused_linear_res_k2_*` (kernels/linear_fused.cu: the
/// 16-warp GEMV split over a cluster of two 256-thread blocks per tile): a launch planned so
/// ([`k2_launch`](crate::plan::geometry::k2_launch), on unless the plan-time knob `KILN_GEMV_K2=0`) with 16-byte
/// aligned operands.
fn fused_res_k2(l: &crate::plan::Launch) -> bool {
    crate::plan::geometry::k2_launch(l) && aligned16(l)
}

/// Whether a `fused_linear` launch calls `kiln_fused_linear_res_*` (kernels/linear_fused.cu): the
/// default variant's one path of a decode o or down projection (a GEMV of at most
/// [`LINEAR_GEMV_MAX_ROWS`](crate::plan::geometry::LINEAR_GEMV_MAX_ROWS) rows on tensor cores, no
/// norm, a residual, no out-norm, one block per 16-feature tile, input and output of one 16-bit
/// dtype), compiled alone: the same code and bits in a far smaller function. `KILN_FUSED_RES_ENTRY=0`
/// (run time) calls `kiln_fused_linear_*` instead, for an A/B (session 54).
fn fused_res_entry(l: &crate::plan::Launch) -> bool {
    // `gemv_tiles`: one block per tile at least (a walked grid has fewer).
    crate::plan::knob("KILN_FUSED_RES_ENTRY") != "0"
        && l.occupancy == 0
        && crate::plan::geometry::res_gemv(&l.kernel, &l.bufs)
        && crate::plan::geometry::gemv_tiles(&l.kernel).is_some_and(|tiles| l.grid[0] >= tiles)
        && matches!(l.block[0], 256 | 512)
}

/// All CUDA symbols a plan needs (library launches need none), sorted and deduplicated.
pub fn symbols(plan: &crate::plan::Plan) -> Vec<String> {
    let mut s: Vec<String> =
        plan.programs.iter().flat_map(|p| p.launches.iter().filter(|l| !l.kernel.is_library()).map(launch_symbol)).collect();
    s.sort();
    s.dedup();
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::DType;
    use crate::plan::{Access, BufArg, Launch, RegionKind};

    fn buf(dtype: DType, access: Access) -> BufArg {
        BufArg { region: RegionKind::Arena, offset: 0, bytes: 0, dtype, access }
    }

    /// A decode o / down launch (x, weight, residual, out) as the planner lays it out.
    fn fused(rows: u32, norm: bool, residual: bool, dtype: DType, grid: u32, threads: u32, occupancy: u32) -> Launch {
        let kernel = Kernel::FusedLinear {
            rows,
            in_features: 896,
            out_features: 896,
            norm,
            eps: 1e-6,
            bias: false,
            residual,
            l2_prefetch: 0,
            out_norm: false,
        };
        let bufs = vec![buf(dtype, Access::Read), buf(dtype, Access::Read), buf(dtype, Access::Read), buf(dtype, Access::Write)];
        Launch { name: "blk.0.attn_output".into(), kernel, bufs, grid: [grid, 1, 1], block: [threads, 1, 1], shared_bytes: 0, occupancy }
    }

    #[test]
    fn decode_o_and_down_call_their_own_entry_point_and_nothing_else_does() {
        // KILN_FUSED_RES_ENTRY unset in tests: on.
        assert_eq!(launch_symbol(&fused(1, false, true, DType::BF16, 56, 256, 0)), "kiln_fused_linear_res_bf16_bf16");
        assert_eq!(launch_symbol(&fused(8, false, true, DType::F16, 56, 512, 0)), "kiln_fused_linear_res_f16_f16");
        // Prefill rows, a norm, no residual, f32, the dense variant, a walked grid: the general kernel.
        assert_eq!(launch_symbol(&fused(9, false, true, DType::BF16, 14, 256, 0)), "kiln_fused_linear_bf16_bf16");
        assert_eq!(launch_symbol(&fused(1, true, true, DType::BF16, 56, 256, 0)), "kiln_fused_linear_bf16_bf16");
        assert_eq!(launch_symbol(&fused(1, false, false, DType::BF16, 56, 256, 0)), "kiln_fused_linear_bf16_bf16");
        assert_eq!(launch_symbol(&fused(1, false, true, DType::F32, 56, 256, 0)), "kiln_fused_linear_f32_f32");
        assert_eq!(launch_symbol(&fused(1, true, true, DType::BF16, 56, 256, 3)), "kiln_fused_linear_bf16_bf16_o3");
        assert_eq!(launch_symbol(&fused(1, false, true, DType::BF16, 28, 256, 0)), "kiln_fused_linear_bf16_bf16");
    }

    #[test]
    fn gemv_launches_call_their_own_entry_point_by_default() {
        // KILN_GEMV_ONLY_ENTRY unset in tests: on.
        let kernel = Kernel::GatedLinear { rows: 1, in_features: 896, out_features: 4864, norm: true, eps: 1e-6 };
        let bufs = vec![buf(DType::BF16, Access::Read); 4].into_iter().chain([buf(DType::BF16, Access::Write)]).collect();
        let l =
            Launch { name: "blk.0.ffn_gate_up".into(), kernel, bufs, grid: [304, 1, 1], block: [256, 1, 1], shared_bytes: 0, occupancy: 3 };
        assert_eq!(launch_symbol(&l), "kiln_gated_linear_gemv_bf16_o3");
        // Prefill rows (the tiled path) and f32 x (no tensor-core path): the general kernel.
        let prefill = Kernel::GatedLinear { rows: 9, in_features: 896, out_features: 4864, norm: true, eps: 1e-6 };
        assert_eq!(launch_symbol(&Launch { kernel: prefill, occupancy: 0, ..l.clone() }), "kiln_gated_linear_bf16");
        let f32_bufs = vec![buf(DType::F32, Access::Read); 4].into_iter().chain([buf(DType::F32, Access::Write)]).collect();
        assert_eq!(launch_symbol(&Launch { bufs: f32_bufs, occupancy: 0, ..l }), "kiln_gated_linear_f32");
    }

    #[test]
    fn qkv_rope_gemv_entry_is_off_by_default() {
        // KILN_QKV_ROPE_GEMV_ENTRY unset in tests.
        let rope = crate::ir::RopeSpec { style: RopeStyle::HalfSplit, theta: 500000.0, rotary_dim: 64, scaling: RopeScaling::None };
        let kernel = Kernel::QkvRope {
            rows: 1,
            in_features: 2048,
            heads: 32,
            kv_heads: 8,
            head_dim: 64,
            kv_rows: 4096,
            norm: true,
            eps: 1e-5,
            bias: false,
            early: true,
            rope,
        };
        let bufs = vec![buf(DType::BF16, Access::Read); 6].into_iter().chain([buf(DType::BF16, Access::Write); 3]).collect();
        let l = Launch { name: "blk.0.qkv".into(), kernel, bufs, grid: [192, 1, 1], block: [512, 1, 1], shared_bytes: 0, occupancy: 0 };
        assert_eq!(launch_symbol(&l), "kiln_qkv_rope_bf16");
    }
}
