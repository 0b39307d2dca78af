//! The closed set of operations. Every pass, the planner and every executor match on
//! [`Op`] exhaustively, so adding an op makes the compiler list every place that must
//! learn it.
//!
//! Conventions shared by all ops (the executors rely on them):
//! - tensors are row-major; "rows" are all leading dimensions, the last one is contiguous;
//! - weights of a linear layer are `[out_features, in_features]` (Hugging Face layout);
//! - per-token step inputs (`positions`, `cache_base`) are `i32 [tokens]`; a position of
//!   `-1` marks a padding token: it writes no KV row, attends to nothing (output zeros);
//! - the KV cache of a layer is `[kv_rows, n_kv_heads * head_dim]`; token `t` lives in row
//!   `cache_base[t] + positions[t]` and attends to rows `cache_base[t] ..= cache_base[t] + positions[t]`.

use super::types::ValueId;
use serde::{Deserialize, Serialize};

/// How rotary embeddings pair up the elements of a head.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RopeStyle {
    /// Pairs `(2i, 2i+1)`: GGUF `llama`, llama2.c.
    Interleaved,
    /// Pairs `(i, i + rotary_dim/2)`: Hugging Face `rotate_half`, GGUF NeoX-style (`qwen2`, `qwen3`).
    HalfSplit,
}

/// Frequency scaling of rotary embeddings.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum RopeScaling {
    None,
    /// Llama 3.1 style: long wavelengths divided by `factor`, short ones kept, smooth between.
    Llama3 {
        factor: f32,
        low_freq_factor: f32,
        high_freq_factor: f32,
        original_max_position: u32,
    },
    /// Linear position interpolation: positions divided by `factor`.
    Linear {
        factor: f32,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct RopeSpec {
    pub style: RopeStyle,
    pub theta: f32,
    /// Number of leading elements of each head that are rotated (== head_dim for every model so far).
    pub rotary_dim: u32,
    pub scaling: RopeScaling,
}

impl RopeSpec {
    /// Inverse frequency of pair `i` (0 <= i < rotary_dim/2), scaling applied. Shared by the CPU
    /// executor and the CPU side of kernel checks; the CUDA kernels compute the same formula.
    pub fn inv_freq(&self, i: usize) -> f32 {
        let d = self.rotary_dim as f32;
        let base = 1.0f32 / self.theta.powf((2 * i) as f32 / d);
        match self.scaling {
            RopeScaling::None | RopeScaling::Linear { .. } => base,
            RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_max_position } => {
                let old = original_max_position as f32;
                let low_freq_wavelen = old / low_freq_factor;
                let high_freq_wavelen = old / high_freq_factor;
                let wavelen = 2.0 * std::f32::consts::PI / base;
                if wavelen < high_freq_wavelen {
                    base
                } else if wavelen > low_freq_wavelen {
                    base / factor
                } else {
                    let smooth = (old / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
                    (1.0 - smooth) * base / factor + smooth * base
                }
            }
        }
    }
    /// Position as fed to the rotation (linear scaling divides it).
    pub fn scaled_position(&self, pos: i32) -> f32 {
        match self.scaling {
            RopeScaling::Linear { factor } => pos as f32 / factor,
            _ => pos as f32,
        }
    }
}

/// Where the attention's q, k and v are: three tensors, or one packed `[rows, nq + nk + nv]`
/// tensor whose rows hold q's features, then k's, then v's. Packed is what one GEMM over the
/// three projection weights writes when the planner lays them out back to back (prefill runs
/// it as one library GEMM; the K / V projections alone are too narrow to fill the GPU).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Qkv {
    Split([ValueId; 3]),
    Packed(ValueId),
}

impl Qkv {
    pub fn values(&self) -> Vec<ValueId> {
        match *self {
            Qkv::Split(v) => v.to_vec(),
            Qkv::Packed(v) => vec![v],
        }
    }
    pub fn values_mut(&mut self) -> Vec<&mut ValueId> {
        match self {
            Qkv::Split(v) => v.iter_mut().collect(),
            Qkv::Packed(v) => vec![v],
        }
    }
}

/// Where a fused linear applies its RMSNorm (`FusedLinear`, `QkvLinear`, `QkvRope`,
/// `GatedLinear` with a norm), fixed by the dtype of `x`:
/// - `BeforeDot` (f16): `h = rms_norm(x)` rounded to `x`'s dtype exactly as `RmsNorm` stores it,
///   then `acc = h · w`: bit for bit the unfused `RmsNorm` + projection.
/// - `AfterDot` (f32, bf16): `h = x ⊙ norm_w` rounded to `x`'s dtype, `acc = (h · w) * inv` with
///   `inv = 1 / sqrt(mean(x²) + eps)`: the same function with one rounding moved, so a GEMV
///   streams its weights against `x` at once and applies the row statistics in its epilogue
///   (no dependent reduction before its first multiply). Within rounding of the unfused ops,
///   not bit for bit. f16 keeps `BeforeDot` because `x * norm_w` can leave f16's range where
///   the normed values do not; bf16 and f32 have f32's exponent range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NormOrder {
    BeforeDot,
    AfterDot,
}

impl NormOrder {
    pub fn of(x_dtype: super::DType) -> NormOrder {
        if x_dtype == super::DType::F16 {
            NormOrder::BeforeDot
        } else {
            NormOrder::AfterDot
        }
    }
}

/// The RMSNorm a `FusedLinear` applies to its own output for the op after it (`lower::fuse`
/// rewrite 10, the output norm of a decoder). With `o[r, :]` the linear's output as it would
/// store it (rounded to `out`'s dtype `dt`), it stores `out[r, n] = dt(o[n] * weight[n])` (the
/// `NormOrder::AfterDot` product) instead, and `sumsq[r, g]` (`f32 [rows, features / 8]`) the sum
/// of the squares of `o[8g .. 8g + 8]` as the pairwise tree `((s0 + s1) + (s2 + s3)) + ((s4 +
/// s5) + (s6 + s7))` (`s_i = o[8g + i]²` in f32). A [`Op::NormedLinear`] takes the row's inverse
/// RMS from `sumsq`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutNorm {
    pub weight: ValueId,
    pub sumsq: ValueId,
}

/// Sum of `sumsq` rows (an [`OutNorm`]'s, `[rows, groups]`) the way the GPU's consumer adds them
/// (`kernels/linear.cu` `stats_inv_rows`): lane `l` of a warp adds `row[l], row[l + 32], ..` in order,
/// then the 32 lane sums meet in a butterfly (xor 16, 8, 4, 2, 1). Returns the row's inverse RMS
/// `1 / sqrt(sum / in_features + eps)`.
pub fn stats_inv(row: &[f32], in_features: usize, eps: f32) -> f32 {
    let mut lanes = [0.0f32; 32];
    for (l, lane) in lanes.iter_mut().enumerate() {
        let mut t = 0.0f32;
        for v in row.iter().skip(l).step_by(32) {
            t += v;
        }
        *lane = t;
    }
    let mut off = 16;
    while off > 0 {
        let prev = lanes;
        for (l, lane) in lanes.iter_mut().enumerate() {
            *lane = prev[l] + prev[l ^ off];
        }
        off /= 2;
    }
    1.0 / (lanes[0] / in_features as f32 + eps).sqrt()
}

/// The squares' sum of one [`OutNorm`] group of 8 stored outputs, in its pairwise order.
pub fn group_sumsq(o: &[f32; 8]) -> f32 {
    let s = o.map(|v| v * v);
    ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))
}

/// One operation. Fields name values of the enclosing program; scalars are attributes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Op {
    /// `out[r, :] = table[indices[r], :]`; an index outside the table gives a zero row.
    /// Token embedding, and picking the rows whose logits are wanted.
    Gather { table: ValueId, indices: ValueId, out: ValueId },
    /// `out[r, :] = x[r, :] / rms(x[r, :]) * weight` over the last dimension.
    RmsNorm { x: ValueId, weight: ValueId, out: ValueId, eps: f32 },
    /// RMSNorm of each head separately (Qwen3 Q/K norm): `x` is `[rows, heads * head_dim]`,
    /// `weight` is `[head_dim]`.
    HeadRmsNorm { x: ValueId, weight: ValueId, out: ValueId, head_dim: u32, eps: f32 },
    /// `out[r, n] = sum_k x[r, k] * weight[n, k] (+ bias[n])`.
    Linear { x: ValueId, weight: ValueId, bias: Option<ValueId>, out: ValueId },
    /// `Linear` without a bias (the vocabulary projection, `out` f32 logits) that also folds each
    /// row's argmax into `argmax` (made by `lower::fuse` for a device loop's `SampleAdvance`, never
    /// by lowering): `argmax` is `u32 [rows, 2]` state, one little-endian 64-bit key per row,
    /// `key[r] = max(key[r], max_n argmax_key(out[r, n], n))` with `runtime::sampling::argmax_key`
    /// (the value's bits made order-preserving in the high word, `!n` in the low one: the
    /// largest logit, the lowest index on ties, NaN never, as `Sample`'s argmax); a max over any
    /// order, so blocks may fold their keys in as they finish. The key must be zero before the
    /// op (state is zeroed at load; the `SampleAdvance` that reads it zeroes it again).
    LinearArgmax { x: ValueId, weight: ValueId, out: ValueId, argmax: ValueId },
    /// A linear layer with fused neighbours (made by `lower::fuse`, never by lowering):
    /// `o = rms_norm(x, norm.0, norm.1) · weightᵀ (+ bias)` (the norm where present, applied as
    /// [`NormOrder::of`] `x`'s dtype says) rounded to `out`'s dtype, then `out = o + residual`
    /// when present. Equal, bit for bit, to the unfused ops without a norm or with a
    /// `BeforeDot` one; within rounding of them with an `AfterDot` norm. With `out_norm`, `out`
    /// holds that output times the next norm's weight, and `sumsq` its row statistics (see
    /// [`OutNorm`]).
    FusedLinear {
        x: ValueId,
        norm: Option<(ValueId, f32)>,
        weight: ValueId,
        bias: Option<ValueId>,
        residual: Option<ValueId>,
        out: ValueId,
        out_norm: Option<OutNorm>,
    },
    /// The projection after a `FusedLinear` with an [`OutNorm`] (made by `lower::fuse` rewrite
    /// 10, never by lowering): `x` is that `FusedLinear`'s `out` (`o ⊙ norm_w`, rounded) and
    /// `sumsq` its statistics; `out[r, n] = OutT((x[r] · weight[n]) * inv[r])` with `inv[r] =
    /// [`stats_inv`]`(sumsq[r], in_features, eps)`: `RmsNorm` + `Linear` with the norm after the
    /// dot product (`NormOrder::AfterDot`), within rounding of the two ops. No bias. With
    /// `argmax`, each row's argmax is folded into the key as `LinearArgmax` does.
    NormedLinear { x: ValueId, sumsq: ValueId, weight: ValueId, out: ValueId, argmax: Option<ValueId>, eps: f32 },
    /// The attention's three input projections in one pass over `x` (made by `lower::fuse`,
    /// never by lowering): q, k, v `= rms_norm(x) · weights[i]ᵀ (+ biases[i])` with the norm as
    /// in `FusedLinear`, to three tensors or one packed tensor (see [`Qkv`]); equal, bit for
    /// bit, to three `FusedLinear`s without residuals.
    QkvLinear { x: ValueId, norm: Option<(ValueId, f32)>, weights: [ValueId; 3], biases: Option<[ValueId; 3]>, outs: Qkv },
    /// `q_out = rope(q)`, and for every token `t` with `positions[t] >= 0`, `rope(k)[t]` and `v[t]`
    /// to cache row `cache_base[t] + positions[t]` (made by `lower::fuse`, never by lowering):
    /// `Rope` of q and of k and the `KvWrite` of the rotated k, in one launch, bit for bit.
    /// q, k and v are three tensors or one packed tensor (see [`Qkv`]); the head counts come
    /// from `q_out` and `k_cache`.
    RopeKvWrite {
        qkv: Qkv,
        positions: ValueId,
        cache_base: ValueId,
        q_out: ValueId,
        k_cache: ValueId,
        v_cache: ValueId,
        head_dim: u32,
        rope: RopeSpec,
    },
    /// The attention's input projections with RoPE and the KV write in their epilogue (made by
    /// `lower::fuse`, decode programs only): `QkvLinear` followed by `RopeKvWrite` of its three
    /// outputs, with no q / k / v tensors in between. Each projection is rounded to `q_out`'s
    /// dtype as `QkvLinear` stores it, then rotated and written as `RopeKvWrite` does: bit for
    /// bit the two ops. Only where `rope.rotary_dim == head_dim` and `head_dim % 16 == 0` (the GPU
    /// kernel keeps both elements of every rotary pair in one block); head counts come from
    /// `q_out` and `k_cache`.
    QkvRope {
        x: ValueId,
        norm: Option<(ValueId, f32)>,
        weights: [ValueId; 3],
        biases: Option<[ValueId; 3]>,
        positions: ValueId,
        cache_base: ValueId,
        q_out: ValueId,
        k_cache: ValueId,
        v_cache: ValueId,
        head_dim: u32,
        rope: RopeSpec,
    },
    /// `out = silu(g) * u` with `g = rms_norm(x) · gateᵀ`, `u = rms_norm(x) · upᵀ` (each rounded
    /// to `out`'s dtype; the norm, where present, as in `FusedLinear`): a gated MLP's up
    /// projection in one pass over `x`.
    GatedLinear { x: ValueId, norm: Option<(ValueId, f32)>, gate: ValueId, up: ValueId, out: ValueId },
    /// Rotary embedding of every head of `x` (`[rows, heads * head_dim]`) at `positions[r]`.
    Rope { x: ValueId, positions: ValueId, out: ValueId, head_dim: u32, rope: RopeSpec },
    /// Writes `k` and `v` rows into the caches at row `cache_base[t] + positions[t]`;
    /// skipped for positions < 0. Has no output value: it updates state.
    KvWrite { k: ValueId, v: ValueId, positions: ValueId, cache_base: ValueId, k_cache: ValueId, v_cache: ValueId },
    /// Causal grouped-query attention of each query row over its sequence's cache rows
    /// (see the module doc), softmax in f32, scaled by `scale`.
    Attention {
        q: ValueId,
        k_cache: ValueId,
        v_cache: ValueId,
        positions: ValueId,
        cache_base: ValueId,
        out: ValueId,
        n_heads: u32,
        n_kv_heads: u32,
        head_dim: u32,
        scale: f32,
    },
    /// `out = silu(gate) * up`.
    SwiGlu { gate: ValueId, up: ValueId, out: ValueId },
    /// `out = a + b`, elementwise.
    Add { a: ValueId, b: ValueId, out: ValueId },
    /// The step of a device loop, after `sample`. When `done` is already set it changes nothing.
    /// Otherwise, for every row `r` with `positions[r] >= 0`,
    /// `ring[produced * rows + r] = tokens[r]`, `token_ids[r] = tokens[r]`, `positions[r] += 1`,
    /// `counter[r] += 1`; a row whose token is in `stop_ids` (-1 = unused slot) is finished; a
    /// row whose next position reaches `max_position` leaves as a padding row (`positions[r] =
    /// -1`), so that the steps an unrolled loop body still runs after `done` write no KV row
    /// past the sequence's end (the others write only rows the next step would write alike).
    /// Then `produced += 1`, and `done = 1` when `produced >= budget`, when every row is
    /// finished or padding, when a row's next position reaches `max_position`, or when the ring
    /// is full. `control` is `u32 [4 + rows]`: budget, produced, done, max_position, then one
    /// finished flag per row. The only op that writes step inputs.
    Advance {
        tokens: ValueId,
        stop_ids: ValueId,
        token_ids: ValueId,
        positions: ValueId,
        counter: ValueId,
        control: ValueId,
        ring: ValueId,
    },
    /// One token per row of `logits` (`f32 [rows, vocab]`): argmax (lowest index on ties) where
    /// `temperature[r] <= 0`; otherwise softmax(logits / T), keep the `top_k` largest
    /// (0 = all), then the smallest prefix whose mass reaches `top_p`, and draw with a
    /// counter-based generator keyed by `(seed[r], counter[r])`.
    Sample { logits: ValueId, temperature: ValueId, top_k: ValueId, top_p: ValueId, seed: ValueId, counter: ValueId, out: ValueId },
    /// `Sample` then `Advance` over its tokens, as one op (made by `lower::fuse` for a device loop's
    /// single-row step, never by lowering): `out = sample(logits, temperature, top_k, top_p, seed,
    /// counter)` (the counter as it was before the step), then `advance(out, stop_ids, token_ids,
    /// positions, counter, control, ring)`. Equal, word for word, to the two ops. With `argmax`
    /// (the key a `LinearArgmax` folded the logits' argmax into), a greedy row takes its token
    /// from the key instead of scanning the logits (the same token), and the key is zeroed.
    SampleAdvance {
        logits: ValueId,
        temperature: ValueId,
        top_k: ValueId,
        top_p: ValueId,
        seed: ValueId,
        stop_ids: ValueId,
        out: ValueId,
        token_ids: ValueId,
        positions: ValueId,
        counter: ValueId,
        control: ValueId,
        ring: ValueId,
        argmax: Option<ValueId>,
    },
    /// `sum = a + b` (as `Add`, rounded to `sum`'s dtype), then `out = rms_norm(sum)` (as
    /// `RmsNorm` over the rounded sum): a residual add and the norm that reads it in one pass
    /// (made by `lower::fuse`, never by lowering); equal, bit for bit, to the two ops.
    AddRmsNorm { a: ValueId, b: ValueId, weight: ValueId, sum: ValueId, out: ValueId, eps: f32 },
    /// `QkvRope` whose rotated q only the decode `Attention` over the caches it writes reads, as
    /// one op (made by `lower::fuse` rewrite 11, on unless `KILN_FUSE_QKV_ATTN=0` at plan time,
    /// decode programs of one row, never by lowering): the projections, RoPE and the KV write as
    /// `QkvRope` (q rounded to the caches' dtype and rotated as `QkvRope` stores `q_out`), then
    /// `Attention` of that q, with no q tensor in between; `out = attention(q)`, `[rows, heads *
    /// head_dim]`. Equal, bit for bit, to the two ops on the CPU reference. Head counts from `out`
    /// and `k_cache`; the caches are read and written in place (listed once, as writes).
    QkvAttention {
        x: ValueId,
        norm: Option<(ValueId, f32)>,
        weights: [ValueId; 3],
        biases: Option<[ValueId; 3]>,
        positions: ValueId,
        cache_base: ValueId,
        k_cache: ValueId,
        v_cache: ValueId,
        out: ValueId,
        head_dim: u32,
        rope: RopeSpec,
        scale: f32,
    },
}

impl Op {
    /// Mnemonic used in the text form and plan dumps.
    pub fn mnemonic(&self) -> &'static str {
        match self {
            Op::Gather { .. } => "gather",
            Op::RmsNorm { .. } => "rms_norm",
            Op::HeadRmsNorm { .. } => "head_rms_norm",
            Op::Linear { .. } => "linear",
            Op::LinearArgmax { .. } => "linear_argmax",
            Op::FusedLinear { .. } => "fused_linear",
            Op::NormedLinear { .. } => "normed_linear",
            Op::QkvLinear { .. } => "qkv_linear",
            Op::GatedLinear { .. } => "gated_linear",
            Op::Rope { .. } => "rope",
            Op::KvWrite { .. } => "kv_write",
            Op::RopeKvWrite { .. } => "rope_kv_write",
            Op::QkvRope { .. } => "qkv_rope",
            Op::Attention { .. } => "attention",
            Op::SwiGlu { .. } => "swiglu",
            Op::Add { .. } => "add",
            Op::Sample { .. } => "sample",
            Op::Advance { .. } => "advance",
            Op::SampleAdvance { .. } => "sample_advance",
            Op::AddRmsNorm { .. } => "add_rms_norm",
            Op::QkvAttention { .. } => "qkv_attention",
        }
    }

    /// Values read, in operand order.
    pub fn reads(&self) -> Vec<ValueId> {
        match *self {
            Op::Gather { table, indices, .. } => vec![table, indices],
            Op::RmsNorm { x, weight, .. } | Op::HeadRmsNorm { x, weight, .. } => vec![x, weight],
            Op::Linear { x, weight, bias, .. } => {
                let mut v = vec![x, weight];
                v.extend(bias);
                v
            }
            Op::LinearArgmax { x, weight, .. } => vec![x, weight],
            Op::FusedLinear { x, norm, weight, bias, residual, out_norm, .. } => {
                let mut v = vec![x];
                v.extend(norm.map(|n| n.0));
                v.push(weight);
                v.extend(bias);
                v.extend(residual);
                v.extend(out_norm.map(|n| n.weight));
                v
            }
            Op::NormedLinear { x, sumsq, weight, .. } => vec![x, sumsq, weight],
            Op::QkvLinear { x, norm, weights, biases, .. } => {
                let mut v = vec![x];
                v.extend(norm.map(|n| n.0));
                v.extend(weights);
                v.extend(biases.into_iter().flatten());
                v
            }
            Op::GatedLinear { x, norm, gate, up, .. } => {
                let mut v = vec![x];
                v.extend(norm.map(|n| n.0));
                v.extend([gate, up]);
                v
            }
            Op::QkvRope { x, norm, weights, biases, positions, cache_base, .. }
            | Op::QkvAttention { x, norm, weights, biases, positions, cache_base, .. } => {
                let mut v = vec![x];
                v.extend(norm.map(|n| n.0));
                v.extend(weights);
                v.extend(biases.into_iter().flatten());
                v.extend([positions, cache_base]);
                v
            }
            Op::Rope { x, positions, .. } => vec![x, positions],
            Op::KvWrite { k, v, positions, cache_base, .. } => vec![k, v, positions, cache_base],
            Op::RopeKvWrite { qkv, positions, cache_base, .. } => [qkv.values(), vec![positions, cache_base]].concat(),
            Op::Attention { q, k_cache, v_cache, positions, cache_base, .. } => {
                vec![q, k_cache, v_cache, positions, cache_base]
            }
            Op::SwiGlu { gate, up, .. } => vec![gate, up],
            Op::Add { a, b, .. } => vec![a, b],
            Op::Sample { logits, temperature, top_k, top_p, seed, counter, .. } => {
                vec![logits, temperature, top_k, top_p, seed, counter]
            }
            Op::Advance { tokens, stop_ids, .. } => vec![tokens, stop_ids],
            // The counter (and the argmax key) are read and written in place, as `Advance`'s
            // counter (listed once, as a write).
            Op::SampleAdvance { logits, temperature, top_k, top_p, seed, stop_ids, .. } => {
                vec![logits, temperature, top_k, top_p, seed, stop_ids]
            }
            Op::AddRmsNorm { a, b, weight, .. } => vec![a, b, weight],
        }
    }

    /// Values written, in operand order.
    pub fn writes(&self) -> Vec<ValueId> {
        match *self {
            Op::Gather { out, .. }
            | Op::RmsNorm { out, .. }
            | Op::HeadRmsNorm { out, .. }
            | Op::Linear { out, .. }
            | Op::FusedLinear { out, out_norm: None, .. }
            | Op::GatedLinear { out, .. }
            | Op::Rope { out, .. }
            | Op::Attention { out, .. }
            | Op::SwiGlu { out, .. }
            | Op::Add { out, .. }
            | Op::Sample { out, .. } => vec![out],
            Op::KvWrite { k_cache, v_cache, .. } => vec![k_cache, v_cache],
            Op::RopeKvWrite { q_out, k_cache, v_cache, .. } | Op::QkvRope { q_out, k_cache, v_cache, .. } => {
                vec![q_out, k_cache, v_cache]
            }
            Op::QkvLinear { outs, .. } => outs.values(),
            Op::Advance { token_ids, positions, counter, control, ring, .. } => vec![token_ids, positions, counter, control, ring],
            Op::SampleAdvance { out, token_ids, positions, counter, control, ring, argmax, .. } => {
                let mut v = vec![out, token_ids, positions, counter, control, ring];
                v.extend(argmax);
                v
            }
            Op::FusedLinear { out, out_norm: Some(n), .. } => vec![out, n.sumsq],
            // The key is folded into in place (listed once, as a write).
            Op::LinearArgmax { out, argmax, .. } => vec![out, argmax],
            Op::NormedLinear { out, argmax, .. } => {
                let mut v = vec![out];
                v.extend(argmax);
                v
            }
            Op::AddRmsNorm { sum, out, .. } => vec![sum, out],
            Op::QkvAttention { k_cache, v_cache, out, .. } => vec![k_cache, v_cache, out],
        }
    }

    /// Scalar attributes as `key=value` pairs for the text form, in a fixed order.
    pub fn attrs(&self) -> Vec<(&'static str, String)> {
        match self {
            Op::RmsNorm { eps, .. } | Op::AddRmsNorm { eps, .. } => vec![("eps", format!("{eps:e}"))],
            Op::FusedLinear { norm, residual, out_norm, .. } => {
                let mut a = Vec::new();
                if let Some((_, eps)) = norm {
                    a.push(("norm_eps", format!("{eps:e}")));
                }
                if residual.is_some() {
                    a.push(("residual", "true".to_string()));
                }
                if out_norm.is_some() {
                    a.push(("out_norm", "true".to_string()));
                }
                a
            }
            Op::NormedLinear { eps, .. } => vec![("eps", format!("{eps:e}"))],
            Op::GatedLinear { norm, .. } | Op::QkvLinear { norm, .. } => {
                norm.map(|(_, eps)| vec![("norm_eps", format!("{eps:e}"))]).unwrap_or_default()
            }
            Op::HeadRmsNorm { head_dim, eps, .. } => {
                vec![("head_dim", head_dim.to_string()), ("eps", format!("{eps:e}"))]
            }
            Op::Rope { head_dim, rope, .. }
            | Op::RopeKvWrite { head_dim, rope, .. }
            | Op::QkvRope { head_dim, rope, .. }
            | Op::QkvAttention { head_dim, rope, .. } => {
                let mut a = match self {
                    Op::QkvRope { norm: Some((_, eps)), .. } | Op::QkvAttention { norm: Some((_, eps)), .. } => {
                        vec![("norm_eps", format!("{eps:e}"))]
                    }
                    _ => Vec::new(),
                };
                a.extend([
                    ("head_dim", head_dim.to_string()),
                    ("style", format!("{:?}", rope.style).to_lowercase()),
                    ("theta", format!("{}", rope.theta)),
                    ("rotary_dim", rope.rotary_dim.to_string()),
                ]);
                match rope.scaling {
                    RopeScaling::None => {}
                    RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_max_position } => {
                        a.push((
                            "scaling",
                            format!("llama3(factor={factor},low={low_freq_factor},high={high_freq_factor},orig={original_max_position})"),
                        ));
                    }
                    RopeScaling::Linear { factor } => a.push(("scaling", format!("linear(factor={factor})"))),
                }
                if let Op::QkvAttention { scale, .. } = self {
                    a.push(("scale", format!("{scale}")));
                }
                a
            }
            Op::Attention { n_heads, n_kv_heads, head_dim, scale, .. } => vec![
                ("heads", n_heads.to_string()),
                ("kv_heads", n_kv_heads.to_string()),
                ("head_dim", head_dim.to_string()),
                ("scale", format!("{scale}")),
            ],
            Op::Gather { .. }
            | Op::Linear { .. }
            | Op::LinearArgmax { .. }
            | Op::KvWrite { .. }
            | Op::SwiGlu { .. }
            | Op::Add { .. }
            | Op::Sample { .. }
            | Op::Advance { .. }
            | Op::SampleAdvance { .. } => vec![],
        }
    }
}
