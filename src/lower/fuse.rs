//! The fusion pass: rewrites a lowered program so that fewer, larger launches do the same
//! work, with results bit-identical to the unfused program on the CPU reference (each fused
//! op keeps the intermediate roundings of the ops it replaces; see `Op::FusedLinear`), except
//! one: a norm folded into a linear over f32 / bf16 `x` is applied after the dot product
//! (`ir::NormOrder::AfterDot`: `x * norm_w` rounded instead of the normed value, the inverse RMS
//! in the epilogue), within rounding of the unfused ops (`tests/fusion.rs` bounds it).
//!
//! Rewrites, in order, each only where every intermediate is a temp with no other reader:
//! 1. `rms_norm` whose readers are all linears -> each linear normalizes its input itself
//!    (`FusedLinear` with a norm, before or after its dot product as `ir::NormOrder` says for
//!    the dtype); the norm op disappears. Not when a reader has more
//!    than [`NORM_PROLOGUE_MAX_FEATURES`] outputs (the vocabulary projection): every block of
//!    the fused GEMV recomputes the row's RMS, and over thousands of blocks that costs more than
//!    the launch it saves (H200, ncu: the Llama-3.1-8B logits took 320 us fused against 252 us
//!    plus a 15 us norm unfused; `bench/results/2026-11-30-h200-ncu-l8f.txt`).
//! 2. `swiglu(linear(h, gate), linear(h, up))` with the same input and norm, no bias ->
//!    one `GatedLinear`.
//! 3. `add(r, linear(..))` -> the linear adds the residual in its epilogue.
//! 4. `rope(k)` read only by `kv_write`, and the `rope(q)` read only by the attention over that
//!    cache (same positions and rotary spec) -> one `RopeKvWrite` at the `kv_write`'s place: one
//!    launch instead of three, and no rotated-k temp.
//! 5. exactly three linears (the attention's Q, K, V) reading the same input with the same norm,
//!    none with a residual, all or none with a bias and one output dtype -> one `QkvLinear`, at
//!    the first one's place: one launch over all their outputs instead of three, two of them
//!    narrow (the K / V projections left most of the GPU idle, see bench/NOTES-decode.md).
//!    Its output is *packed* (`Qkv::Packed`, one `[rows, nq + nk + nv]` temp) when the three
//!    outputs are read only by one `RopeKvWrite` and every weight and bias is a whole number
//!    of `plan::ALIGN` blocks, so that the planner lays them out back to back and one GEMM
//!    (prefill) or GEMV (decode) over the three reads them as one `[nq + nk + nv, in]` matrix;
//!    otherwise (Qwen3's per-head q/k norms sit between) three outputs, decode only.
//! 6. `rms_norm(s)` where `s = add(a, b)` -> one `AddRmsNorm` at the add's place, writing `s`
//!    (which keeps its other readers) and the norm: one launch and one pass over the row
//!    instead of two. Only where the residual adds and norms are still separate ops: prefill
//!    programs (decode's adds and norms were folded into the linears by rewrites 1 and 3).
//!
//! 7. decode: a packed `QkvLinear` whose output only a `RopeKvWrite` reads, with `rotary_dim == head_dim`, `head_dim % 16 == 0`, at most
//!    `geometry::LINEAR_GEMV_MAX_ROWS` rows and one dtype for q and the caches -> one `QkvRope`
//!    (on the GEMV variant the packed QKV would take) at the `RopeKvWrite`'s place: the projections, RoPE and the KV write in one launch, and no
//!    q / k / v temps.
//!
//! 8. device loop: `sample` of one row whose tokens go straight to `advance` (same counter) -> one
//!    `SampleAdvance`: the sampler's block that draws the token runs the step's advance, one launch
//!    boundary fewer at the end of every step (`KILN_FUSE_SAMPLE_ADVANCE=0` at plan time keeps two).
//!
//! 9. device loop: the bias-less vocabulary `linear` whose f32 logits only a `SampleAdvance` reads
//!    -> `LinearArgmax`: each GEMV block folds its logits' argmax into a 64-bit key per row
//!    (state, `red.max`), so a greedy step's sampler reads one key instead of scanning the
//!    vocabulary (`KILN_FUSE_ARGMAX=0` at plan time keeps the scan). The logits are still written.
//!
//! 10. decode, bf16, plan-time knob `KILN_FUSE_OUTPUT_NORM=1` (off by default: 1B +0.2%, 0.5B -1.7%):
//!     the output norm `rms_norm(s)` read only by the bias-less vocabulary projection, `s` made
//!     by a `FusedLinear` (the last down projection) and read by nothing else -> that
//!     `FusedLinear` writes `s ⊙ norm_w` instead of `s`, and each row's squares summed per 8
//!     features (`ir::OutNorm`), and the projection becomes a `NormedLinear` that takes the
//!     row's inverse RMS from those sums in its epilogue: the norm's launch and its boundary
//!     leave the step, and no block of the vocabulary GEMV reduces over x (what made rewrite 1
//!     lose there). Both decode programs take it, so a device loop and one-step decode stay
//!     bit-identical.
//!
//! 11. decode, one row (`KILN_FUSE_QKV_ATTN=0` or `KILN_ATTN_CLUSTER=0` at plan time turns it off): a
//!     `QkvRope` whose rotated q only the next op reads, the `Attention` over the caches it writes
//!     at the same positions -> one `QkvAttention` at the attention's place, where its kernel
//!     covers the shape (`plan::geometry::qkv_attention_fits`: bf16, head_dim 64, at most 1024
//!     inputs and 14 heads, the Qwen2.5-0.5B's attention): each query head's cluster computes its
//!     own q / k / v rows, so the QKV-RoPE launch and its boundary leave the layer and no q tensor
//!     is written (bench/NOTES-decode.md, session 48). Both decode programs take it, so a device
//!     loop and one-step decode stay bit-identical.
//!
//! Values are renumbered densely in order of first use afterwards, so dumps stay canonical.
//!
//! Prefill programs take rewrites 4, 6 and the packed form of 5 (RoPE, the KV write, adds and
//! norms are a pass over the activations each, whatever the row count; a packed QKV is one
//! library GEMM); rewrites 1-3 stay out: prefill linears run as library GEMMs (`Kernel::Gemm`),
//! which take no norm prologue, residual or three outputs.

use crate::ir::{verify::verify, Op, OpNode, Program, Qkv, Shape, Value, ValueClass, ValueId};
use anyhow::Result;

/// A linear's (x, norm, weight, bias, out).
type LinearParts = (ValueId, Option<(ValueId, f32)>, ValueId, Option<ValueId>, ValueId);

/// Most output features of a linear that takes a norm prologue (rewrite 1).
pub const NORM_PROLOGUE_MAX_FEATURES: usize = 16384;

/// [`NORM_PROLOGUE_MAX_FEATURES`], or the plan-time A/B knob `KILN_NORM_PROLOGUE_MAX=<n>`. Measured
/// again with the norm after the dot product (session 33 call C, H200, batch 1, context 128,
/// `bench/results/2026-12-03-h200-decode-ab-s33.md`): folding the final norm into the vocabulary
/// projection still loses, 0.5B -4.0%, 1B -3.3%, 8B -0.7% (the 1B's logits GEMV 115.8 -> 147.7 us
/// for the 3.3 us norm launch it saves), so the limit stays.
pub fn norm_prologue_max_features() -> usize {
    crate::plan::knob("KILN_NORM_PROLOGUE_MAX").parse::<usize>().unwrap_or(NORM_PROLOGUE_MAX_FEATURES)
}

/// Whether rewrite 9 runs: on by default; the plan-time knob `KILN_FUSE_ARGMAX=0` keeps the
/// sampler's scan of the logits (an A/B knob).
pub fn linear_argmax_enabled() -> bool {
    crate::plan::knob("KILN_FUSE_ARGMAX") != "0"
}

/// Whether rewrite 10 runs: off by default (session 46 on an H200: 1B +0.2%, 0.5B -1.7%, 8B -0.1%;
/// `bench/LEVERS.md`); the plan-time knob `KILN_FUSE_OUTPUT_NORM=1` turns it on (an A/B knob).
pub fn output_norm_stats_enabled() -> bool {
    crate::plan::knob("KILN_FUSE_OUTPUT_NORM") == "1"
}

/// Whether rewrite 11 runs: on by default (session 52 on an H100, kiln's own decode of the 0.5B
/// over four placements: +1.5% at context 128, +4.4% at 4096; `bench/LEVERS.md`); the plan-time
/// knob `KILN_FUSE_QKV_ATTN=0` keeps QKV-RoPE and the attention as two launches (an A/B knob), and
/// so does `KILN_ATTN_CLUSTER=0` (the fused kernel is a cluster launch, as the attention it replaces).
pub fn qkv_attention_enabled() -> bool {
    crate::plan::knob("KILN_FUSE_QKV_ATTN") != "0" && crate::plan::planner::attention_cluster_enabled()
}

/// Whether rewrite 8 runs: on by default; the plan-time knob `KILN_FUSE_SAMPLE_ADVANCE=0` keeps
/// `sample` and `advance` as two launches (an A/B knob).
pub fn sample_advance_enabled() -> bool {
    crate::plan::knob("KILN_FUSE_SAMPLE_ADVANCE") != "0"
}

pub fn fuse(p: &Program) -> Result<Program> {
    // Prefill programs take rewrites 4-6 only, 5 only packed (see the module doc).
    let decode = p.phase != crate::ir::Phase::Prefill;
    let mut ops: Vec<Option<OpNode>> = p.ops.iter().cloned().map(Some).collect();
    let readers = |ops: &[Option<OpNode>], v: ValueId| -> Vec<usize> {
        ops.iter().enumerate().filter(|(_, o)| o.as_ref().is_some_and(|o| o.op.reads().contains(&v))).map(|(i, _)| i).collect()
    };
    let producer = |ops: &[Option<OpNode>], v: ValueId| -> Option<usize> {
        ops.iter().position(|o| o.as_ref().is_some_and(|o| o.op.writes().contains(&v)))
    };
    let is_temp = |v: ValueId| p.value(v).class == ValueClass::Temp;
    // Values made here (packed q/k/v), numbered after `p`'s.
    let mut extra: Vec<Value> = Vec::new();

    if decode {
        // 1. Norm prologues.
        let max_features = norm_prologue_max_features();
        for i in 0..ops.len() {
            let Some(OpNode { op: Op::RmsNorm { x, weight, out: h, eps }, .. }) = ops[i].clone() else { continue };
            if !is_temp(h) {
                continue;
            }
            let rs = readers(&ops, h);
            let all_linear = !rs.is_empty()
                && rs.iter().all(|&j| {
                    matches!(ops[j].as_ref().map(|o| &o.op), Some(Op::Linear { x: lx, weight: w, .. })
                        if *lx == h && *w != h && p.value(*w).shape.0.first().is_some_and(|&n| n <= max_features))
                });
            if !all_linear {
                continue;
            }
            for j in rs {
                let node = ops[j].as_mut().expect("reader exists");
                if let Op::Linear { weight: w, bias, out, .. } = node.op {
                    node.op = Op::FusedLinear { x, norm: Some((weight, eps)), weight: w, bias, residual: None, out, out_norm: None };
                }
            }
            ops[i] = None;
        }

        // 2. Gated MLP up projections.
        for k in 0..ops.len() {
            let Some(OpNode { name, op: Op::SwiGlu { gate: g, up: u, out: a } }) = ops[k].clone() else { continue };
            if !is_temp(g) || !is_temp(u) || readers(&ops, g) != [k] || readers(&ops, u) != [k] {
                continue;
            }
            let (Some(pg), Some(pu)) = (producer(&ops, g), producer(&ops, u)) else { continue };
            let linear_parts = |i: usize| match ops[i].as_ref().map(|o| &o.op) {
                Some(&Op::Linear { x, weight, bias: None, .. }) => Some((x, None, weight)),
                Some(&Op::FusedLinear { x, norm, weight, bias: None, residual: None, .. }) => Some((x, norm, weight)),
                _ => None,
            };
            let (Some((xg, ng, wg)), Some((xu, nu, wu))) = (linear_parts(pg), linear_parts(pu)) else { continue };
            if xg != xu || ng != nu {
                continue;
            }
            let fused_name = name.strip_suffix("ffn_act").map(|s| format!("{s}ffn_gate_up")).unwrap_or_else(|| format!("{name}.gated"));
            ops[k] = Some(OpNode { name: fused_name, op: Op::GatedLinear { x: xg, norm: ng, gate: wg, up: wu, out: a } });
            ops[pg] = None;
            ops[pu] = None;
        }

        // 3. Residual epilogues.
        for k in 0..ops.len() {
            let Some(OpNode { op: Op::Add { a, b, out }, .. }) = ops[k].clone() else { continue };
            for (lin_out, residual) in [(b, a), (a, b)] {
                if !is_temp(lin_out) || readers(&ops, lin_out) != [k] {
                    continue;
                }
                let Some(j) = producer(&ops, lin_out) else { continue };
                // The residual must exist before the linear runs.
                if producer(&ops, residual).is_some_and(|r| r >= j) {
                    continue;
                }
                let fused = match ops[j].as_ref().map(|o| o.op.clone()) {
                    Some(Op::Linear { x, weight, bias, .. }) => {
                        Op::FusedLinear { x, norm: None, weight, bias, residual: Some(residual), out, out_norm: None }
                    }
                    Some(Op::FusedLinear { x, norm, weight, bias, residual: None, out_norm: None, .. }) => {
                        Op::FusedLinear { x, norm, weight, bias, residual: Some(residual), out, out_norm: None }
                    }
                    _ => continue,
                };
                ops[j].as_mut().expect("producer exists").op = fused;
                ops[k] = None;
                break;
            }
        }
    }

    // 4. RoPE of q and k with the KV write.
    for m in 0..ops.len() {
        let Some(OpNode { name, op: Op::KvWrite { k: kr, v, positions, cache_base, k_cache, v_cache } }) = ops[m].clone() else { continue };
        if !is_temp(kr) || readers(&ops, kr) != [m] {
            continue;
        }
        let Some(jk) = producer(&ops, kr) else { continue };
        let Some(Op::Rope { x: k, positions: pk, head_dim, rope, .. }) = ops[jk].as_ref().map(|o| o.op.clone()) else { continue };
        if pk != positions {
            continue;
        }
        // The attention over this cache, and the rope that makes its q.
        let attention = ops.iter().enumerate().find_map(|(i, o)| match o.as_ref().map(|o| &o.op) {
            Some(&Op::Attention { q, k_cache: kc, .. }) if kc == k_cache => Some((i, q)),
            _ => None,
        });
        let Some((ia, qr)) = attention else { continue };
        if !is_temp(qr) || readers(&ops, qr) != [ia] || ia <= m {
            continue;
        }
        let Some(jq) = producer(&ops, qr) else { continue };
        let Some(Op::Rope { x: q, positions: pq, head_dim: hq, rope: rq, .. }) = ops[jq].as_ref().map(|o| o.op.clone()) else { continue };
        if pq != positions || hq != head_dim || rq != rope {
            continue;
        }
        let fused_name = name.strip_suffix("kv_write").map(|s| format!("{s}rope_kv_write")).unwrap_or_else(|| format!("{name}.rope"));
        ops[m] = Some(OpNode {
            name: fused_name,
            op: Op::RopeKvWrite { qkv: Qkv::Split([q, k, v]), positions, cache_base, q_out: qr, k_cache, v_cache, head_dim, rope },
        });
        ops[jq] = None;
        ops[jk] = None;
    }

    // 5. Q/K/V projections (after 4, so that it knows who reads q, k and v).
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (j, o) in ops.iter().enumerate() {
        let key = match o.as_ref().map(|o| &o.op) {
            Some(&Op::Linear { x, .. }) => (x, None),
            Some(&Op::FusedLinear { x, norm, residual: None, .. }) => (x, norm.map(|n| (n.0, n.1.to_bits()))),
            _ => continue,
        };
        let same = |i: &usize| match ops[*i].as_ref().map(|o| &o.op) {
            Some(&Op::Linear { x, .. }) => (x, None) == key,
            Some(&Op::FusedLinear { x, norm, .. }) => (x, norm.map(|n| (n.0, n.1.to_bits()))) == key,
            _ => false,
        };
        match groups.iter_mut().find(|g| same(&g[0])) {
            Some(g) => g.push(j),
            None => groups.push(vec![j]),
        }
    }
    for g in groups.into_iter().filter(|g| g.len() == 3) {
        let parts: Vec<LinearParts> = g
            .iter()
            .filter_map(|&j| match ops[j].as_ref().map(|o| &o.op) {
                Some(&Op::Linear { x, weight, bias, out }) => Some((x, None, weight, bias, out)),
                Some(&Op::FusedLinear { x, norm, weight, bias, out, .. }) => Some((x, norm, weight, bias, out)),
                _ => None,
            })
            .collect();
        let with_bias = parts.iter().filter(|p| p.3.is_some()).count();
        let dtype = |v: ValueId| p.value(v).dtype;
        if parts.len() != 3 || (with_bias != 0 && with_bias != 3) || parts.iter().any(|q| dtype(q.4) != dtype(parts[0].4)) {
            continue;
        }
        let outs = [0, 1, 2].map(|i| parts[i].4);
        let weights = [0, 1, 2].map(|i| parts[i].2);
        let biases = (with_bias == 3).then(|| [0, 1, 2].map(|i| parts[i].3.expect("all have a bias")));
        // Packed when the three outputs are read only by one RopeKvWrite, as its q, k, v, and
        // the planner can lay the weights (and biases) out back to back: whole ALIGN blocks.
        let rkv =
            ops.iter().position(|o| matches!(o.as_ref().map(|o| &o.op), Some(Op::RopeKvWrite { qkv: Qkv::Split(s), .. }) if *s == outs));
        let whole = |v: ValueId| p.value(v).bytes().is_multiple_of(crate::plan::ALIGN);
        let packed = rkv.filter(|&m| {
            outs.iter().all(|&o| is_temp(o) && readers(&ops, o) == [m]) && weights.iter().chain(biases.iter().flatten()).all(|&w| whole(w))
        });
        if packed.is_none() && !decode {
            continue;
        }
        let name = ops[g[0]].as_ref().expect("grouped").name.clone();
        let fused_name = name.strip_suffix("attn_q").map(|s| format!("{s}attn_qkv")).unwrap_or_else(|| format!("{name}.qkv"));
        let outs = match packed {
            Some(m) => {
                let width = outs.iter().map(|&o| p.value(o).shape.last()).sum::<usize>();
                let rows = p.value(outs[0]).shape.rows();
                let id = add_value(
                    p,
                    &mut extra,
                    Value { name: fused_name.clone(), dtype: dtype(outs[0]), shape: Shape::new(&[rows, width]), class: ValueClass::Temp },
                );
                if let Some(Op::RopeKvWrite { qkv, .. }) = ops[m].as_mut().map(|o| &mut o.op) {
                    *qkv = Qkv::Packed(id);
                }
                Qkv::Packed(id)
            }
            None => Qkv::Split(outs),
        };
        let op = Op::QkvLinear { x: parts[0].0, norm: parts[0].1, weights, biases, outs };
        ops[g[0]] = Some(OpNode { name: fused_name, op });
        ops[g[1]] = None;
        ops[g[2]] = None;
    }

    // 7. Decode: the Q/K/V projections and the RoPE + KV write of their outputs.
    if decode {
        for m in 0..ops.len() {
            let Some(OpNode { name, op: Op::RopeKvWrite { qkv, positions, cache_base, q_out, k_cache, v_cache, head_dim, rope } }) =
                ops[m].clone()
            else {
                continue;
            };
            let Some(j) = qkv.values().first().and_then(|&v| producer(&ops, v)) else { continue };
            let Some(Op::QkvLinear { x, norm, weights, biases, outs }) = ops[j].as_ref().map(|o| o.op.clone()) else { continue };
            let rows = p.value(x).shape.rows();
            let fits = rope.rotary_dim == head_dim
                && head_dim.is_multiple_of(16)
                && rows <= crate::plan::geometry::LINEAR_GEMV_MAX_ROWS as usize
                && p.value(q_out).dtype == p.value(k_cache).dtype;
            // A packed qkv is one of this pass's values (`extra`): a temp.
            let temp = |v: ValueId| v.index() >= p.values.len() || is_temp(v);
            // Packed only: the kernel reads the three weights as one matrix (`plan::Kernel::QkvRope`).
            if outs != qkv || !matches!(outs, Qkv::Packed(_)) || !fits || !qkv.values().iter().all(|&v| temp(v) && readers(&ops, v) == [m])
            {
                continue;
            }
            let fused_name = name.strip_suffix("rope_kv_write").map(|s| format!("{s}qkv_rope")).unwrap_or_else(|| format!("{name}.qkv"));
            ops[m] = Some(OpNode {
                name: fused_name,
                op: Op::QkvRope { x, norm, weights, biases, positions, cache_base, q_out, k_cache, v_cache, head_dim, rope },
            });
            ops[j] = None;
        }
    }

    // 6. Residual adds with the norm of their sum.
    for i in 0..ops.len() {
        let Some(OpNode { name: norm_name, op: Op::RmsNorm { x: s, weight, out, eps } }) = ops[i].clone() else { continue };
        let Some(j) = producer(&ops, s) else { continue };
        let Some(OpNode { name: add_name, op: Op::Add { a, b, .. } }) = ops[j].clone() else { continue };
        // The norm's weight must exist when the add runs (it is a weight: it always does).
        if producer(&ops, weight).is_some_and(|w| w >= j) {
            continue;
        }
        let short = norm_name.rsplit('.').next().unwrap_or(&norm_name).to_string();
        ops[j] = Some(OpNode { name: format!("{add_name}.{short}"), op: Op::AddRmsNorm { a, b, weight, sum: s, out, eps } });
        ops[i] = None;
    }

    // 8. A device loop's single-row step end: `sample` whose tokens the next op, `advance`, takes
    //    (with the same counter) -> one `SampleAdvance` at the advance's place.
    if p.phase == crate::ir::Phase::DecodeLoop && sample_advance_enabled() {
        for i in 0..ops.len() {
            let Some(OpNode { op: Op::Sample { logits, temperature, top_k, top_p, seed, counter, out }, .. }) = ops[i].clone() else {
                continue;
            };
            let Some(j) = (i + 1..ops.len()).find(|&j| ops[j].is_some()) else { continue };
            let Some(OpNode { name, op: Op::Advance { tokens, stop_ids, token_ids, positions, counter: c2, control, ring } }) =
                ops[j].clone()
            else {
                continue;
            };
            if tokens != out || c2 != counter || p.value(out).shape.numel() != 1 {
                continue;
            }
            ops[j] = Some(OpNode {
                name: format!("sample_{name}"),
                op: Op::SampleAdvance {
                    logits,
                    temperature,
                    top_k,
                    top_p,
                    seed,
                    stop_ids,
                    out,
                    token_ids,
                    positions,
                    counter,
                    control,
                    ring,
                    argmax: None,
                },
            });
            ops[i] = None;
        }
    }

    // 9. A device loop's greedy argmax in the vocabulary projection: the f32 logits of a
    //    `SampleAdvance` made by a bias-less `linear` read by nothing else -> a `LinearArgmax`
    //    folding each row's argmax into a key the `SampleAdvance` reads (and zeroes).
    if p.phase == crate::ir::Phase::DecodeLoop && linear_argmax_enabled() {
        for i in 0..ops.len() {
            let Some(OpNode { op: Op::SampleAdvance { logits, argmax: None, .. }, .. }) = ops[i].as_ref() else { continue };
            let logits = *logits;
            let Some(j) = producer(&ops, logits) else { continue };
            let Some(OpNode { name, op: Op::Linear { x, weight, bias: None, out } }) = ops[j].clone() else { continue };
            if out != logits || readers(&ops, logits) != [i] || p.value(logits).dtype != crate::ir::DType::F32 {
                continue;
            }
            let rows = p.value(logits).shape.dims()[0];
            let key = add_value(
                p,
                &mut extra,
                Value {
                    name: "argmax_key".to_string(),
                    dtype: crate::ir::DType::U32,
                    shape: Shape::new(&[rows, 2]),
                    class: ValueClass::State,
                },
            );
            ops[j] = Some(OpNode { name, op: Op::LinearArgmax { x, weight, out, argmax: key } });
            if let Some(OpNode { op: Op::SampleAdvance { argmax, .. }, .. }) = ops[i].as_mut() {
                *argmax = Some(key);
            }
        }
    }

    // 10. Decode, bf16: the output norm carried by the last layer's down projection. `rms_norm(s)`
    //     whose only reader is the bias-less vocabulary projection (a `linear` or `linear_argmax`
    //     that rewrite 1 left alone), where `s` is a `FusedLinear`'s output read by the norm only
    //     -> that `FusedLinear` writes `s ⊙ norm_w` (as the norm's output) and the squares' sums
    //     of `s` per 8 features (`ir::OutNorm`), and the projection becomes a `NormedLinear`
    //     that reads them; `s` is gone.
    if decode && output_norm_stats_enabled() {
        for i in 0..ops.len() {
            let Some(OpNode { op: Op::RmsNorm { x: s, weight: nw, out: h, eps }, .. }) = ops[i].clone() else { continue };
            let bf16 = |v: ValueId| value_of(p, &extra, v).dtype == crate::ir::DType::BF16;
            if !is_temp(s) || !is_temp(h) || !bf16(s) || !bf16(h) || !bf16(nw) || readers(&ops, s) != [i] {
                continue;
            }
            let rs = readers(&ops, h);
            let [j] = rs[..] else { continue };
            let (weight, out, argmax) = match ops[j].as_ref().map(|o| &o.op) {
                Some(&Op::Linear { x, weight, bias: None, out }) if x == h => (weight, out, None),
                Some(&Op::LinearArgmax { x, weight, out, argmax }) if x == h => (weight, out, Some(argmax)),
                _ => continue,
            };
            let Some(k) = producer(&ops, s) else { continue };
            let Some(Op::FusedLinear { x: px, out_norm: None, .. }) = ops[k].as_ref().map(|o| &o.op) else { continue };
            let shape = &value_of(p, &extra, s).shape;
            let (rows, features) = (shape.rows(), shape.last());
            let producer_in = value_of(p, &extra, *px).shape.last();
            if rows > crate::plan::geometry::LINEAR_GEMV_MAX_ROWS as usize || !features.is_multiple_of(8) || !producer_in.is_multiple_of(8)
            {
                continue;
            }
            let name = format!("{}.sumsq", value_of(p, &extra, h).name);
            let sumsq = add_value(
                p,
                &mut extra,
                Value { name, dtype: crate::ir::DType::F32, shape: Shape::new(&[rows, features / 8]), class: ValueClass::Temp },
            );
            if let Some(Op::FusedLinear { out, out_norm, .. }) = ops[k].as_mut().map(|o| &mut o.op) {
                *out = h;
                *out_norm = Some(crate::ir::OutNorm { weight: nw, sumsq });
            }
            let node = ops[j].as_mut().expect("reader exists");
            node.op = Op::NormedLinear { x: h, sumsq, weight, out, argmax, eps };
            ops[i] = None;
        }
    }

    // 11. Decode, one row: QKV-RoPE and the attention of its q in one launch.
    if decode && qkv_attention_enabled() {
        for m in 0..ops.len() {
            let Some(OpNode {
                name,
                op: Op::QkvRope { x, norm, weights, biases, positions, cache_base, q_out, k_cache, v_cache, head_dim, rope },
            }) = ops[m].clone()
            else {
                continue;
            };
            let Some(ia) = (m + 1..ops.len()).find(|&i| ops[i].is_some()) else { continue };
            let Some(Op::Attention { q, k_cache: kc, v_cache: vc, positions: pa, cache_base: ca, out, head_dim: ha, scale, .. }) =
                ops[ia].as_ref().map(|o| o.op.clone())
            else {
                continue;
            };
            let same = q == q_out && kc == k_cache && vc == v_cache && pa == positions && ca == cache_base && ha == head_dim;
            let val = |v: ValueId| value_of(p, &extra, v);
            let bf16 = [x, out, k_cache, v_cache].into_iter().chain(weights).all(|v| val(v).dtype == crate::ir::DType::BF16);
            let (rows, in_features) = (val(x).shape.rows(), val(x).shape.last());
            let heads = val(out).shape.last() / head_dim.max(1) as usize;
            let fits = crate::plan::geometry::qkv_attention_fits(rows, in_features, heads, head_dim, &rope, bf16);
            if !same || !fits || !is_temp(q_out) || readers(&ops, q_out) != [ia] {
                continue;
            }
            let fused_name = name.strip_suffix("qkv_rope").map(|s| format!("{s}qkv_attn")).unwrap_or_else(|| format!("{name}.attn"));
            ops[ia] = Some(OpNode {
                name: fused_name,
                op: Op::QkvAttention { x, norm, weights, biases, positions, cache_base, k_cache, v_cache, out, head_dim, rope, scale },
            });
            ops[m] = None;
        }
    }

    let values: Vec<Value> = p.values.iter().cloned().chain(extra).collect();
    let fused = compact(p, &values, ops.into_iter().flatten().collect());
    verify(&fused)?;
    Ok(fused)
}

/// A timing ablation, never for output (`KILN_PLAN_ABLATE=attention`, read by the planner): a decode
/// program whose attention ops are gone, each reader of an attention's output reading its `q`
/// instead (the same `[rows, heads * head_dim]` shape and dtype). The step then has no attention
/// launch and no boundary before the o projection, and stays deterministic (Q is a function of the
/// token and position), so `kiln bench` times it; against `KILN_ABLATE=16` (the launch kept, its work
/// emptied) it prices the launch and its boundary (bench/NOTES-decode.md, session 23). A
/// `QkvAttention` (rewrite 11) becomes its `QkvRope`, whose q is written where the attention's
/// output was. Prefill programs are returned unchanged.
pub fn ablate_attention(p: &Program) -> Result<Program> {
    if p.phase == crate::ir::Phase::Prefill {
        return Ok(p.clone());
    }
    let mut rename: Vec<(ValueId, ValueId)> = Vec::new();
    let mut ops: Vec<OpNode> = Vec::with_capacity(p.ops.len());
    for node in &p.ops {
        match node.op {
            Op::Attention { q, out, .. } => {
                anyhow::ensure!(
                    p.value(q).shape == p.value(out).shape && p.value(q).dtype == p.value(out).dtype,
                    "{}: the attention's q and output differ in shape or dtype; cannot ablate it",
                    node.name
                );
                rename.push((out, q));
            }
            // Rewrite 11's fused op: its QKV-RoPE alone, the rotated q written where the
            // attention's output was (same shape; bf16 like the caches, as the rewrite checked).
            Op::QkvAttention { x, norm, weights, biases, positions, cache_base, k_cache, v_cache, out, head_dim, rope, .. } => {
                // Rewrite 11's naming, undone.
                let name = node.name.strip_suffix("qkv_attn").map(|s| format!("{s}qkv_rope"));
                let name = name.or_else(|| node.name.strip_suffix(".attn").map(str::to_string)).unwrap_or_else(|| node.name.clone());
                let op = Op::QkvRope { x, norm, weights, biases, positions, cache_base, q_out: out, k_cache, v_cache, head_dim, rope };
                ops.push(OpNode { name, op });
            }
            _ => ops.push(node.clone()),
        }
    }
    for node in &mut ops {
        for v in op_values_mut(&mut node.op) {
            if let Some(&(_, q)) = rename.iter().find(|(o, _)| o == v) {
                *v = q;
            }
        }
    }
    let ablated = compact(p, &p.values, ops);
    verify(&ablated)?;
    Ok(ablated)
}

/// Value `v` of `p`, or of the values made by the pass (`extra`).
fn value_of<'a>(p: &'a Program, extra: &'a [Value], v: ValueId) -> &'a Value {
    p.values.get(v.index()).unwrap_or_else(|| &extra[v.index() - p.values.len()])
}

/// Adds `v` to the values made by the pass (`extra`, numbered after `p`'s) and returns its id.
fn add_value(p: &Program, extra: &mut Vec<Value>, v: Value) -> ValueId {
    extra.push(v);
    ValueId((p.values.len() + extra.len() - 1) as u32)
}

/// A program with only the values `ops` use (ids index `values`), numbered in order of first use.
fn compact(p: &Program, values: &[Value], ops: Vec<OpNode>) -> Program {
    let mut map: Vec<Option<ValueId>> = vec![None; values.len()];
    let mut out = Program::new(p.phase, p.bucket, p.sample_rows);
    out.tokens = p.tokens;
    let mut remap = |v: ValueId, out: &mut Program| -> ValueId {
        if let Some(id) = map[v.index()] {
            return id;
        }
        out.values.push(values[v.index()].clone());
        let id = ValueId(out.values.len() as u32 - 1);
        map[v.index()] = Some(id);
        id
    };
    for node in ops {
        let mut op = node.op.clone();
        for v in op_values_mut(&mut op) {
            *v = remap(*v, &mut out);
        }
        out.ops.push(OpNode { name: node.name, op });
    }
    out
}

/// Every value id an op names, mutably, in `reads()` then `writes()` order.
fn op_values_mut(op: &mut Op) -> Vec<&mut ValueId> {
    match op {
        Op::Gather { table, indices, out } => vec![table, indices, out],
        Op::RmsNorm { x, weight, out, .. } | Op::HeadRmsNorm { x, weight, out, .. } => vec![x, weight, out],
        Op::Linear { x, weight, bias, out } => {
            let mut v = vec![x, weight];
            v.extend(bias.as_mut());
            v.push(out);
            v
        }
        Op::LinearArgmax { x, weight, out, argmax } => vec![x, weight, out, argmax],
        Op::FusedLinear { x, norm, weight, bias, residual, out, out_norm } => {
            let mut v = vec![x];
            v.extend(norm.as_mut().map(|n| &mut n.0));
            v.push(weight);
            v.extend(bias.as_mut());
            v.extend(residual.as_mut());
            match out_norm {
                Some(n) => v.extend([&mut n.weight, out, &mut n.sumsq]),
                None => v.push(out),
            }
            v
        }
        Op::NormedLinear { x, sumsq, weight, out, argmax, .. } => {
            let mut v = vec![x, sumsq, weight, out];
            v.extend(argmax.as_mut());
            v
        }
        Op::GatedLinear { x, norm, gate, up, out } => {
            let mut v = vec![x];
            v.extend(norm.as_mut().map(|n| &mut n.0));
            v.extend([gate, up, out]);
            v
        }
        Op::QkvLinear { x, norm, weights, biases, outs } => {
            let mut v = vec![x];
            v.extend(norm.as_mut().map(|n| &mut n.0));
            v.extend(weights.iter_mut());
            v.extend(biases.iter_mut().flatten());
            v.extend(outs.values_mut());
            v
        }
        Op::QkvRope { x, norm, weights, biases, positions, cache_base, q_out, k_cache, v_cache, .. } => {
            let mut v = vec![x];
            v.extend(norm.as_mut().map(|n| &mut n.0));
            v.extend(weights.iter_mut());
            v.extend(biases.iter_mut().flatten());
            v.extend([positions, cache_base, q_out, k_cache, v_cache]);
            v
        }
        Op::QkvAttention { x, norm, weights, biases, positions, cache_base, k_cache, v_cache, out, .. } => {
            let mut v = vec![x];
            v.extend(norm.as_mut().map(|n| &mut n.0));
            v.extend(weights.iter_mut());
            v.extend(biases.iter_mut().flatten());
            v.extend([positions, cache_base, k_cache, v_cache, out]);
            v
        }
        Op::Rope { x, positions, out, .. } => vec![x, positions, out],
        Op::KvWrite { k, v, positions, cache_base, k_cache, v_cache } => vec![k, v, positions, cache_base, k_cache, v_cache],
        Op::RopeKvWrite { qkv, positions, cache_base, q_out, k_cache, v_cache, .. } => {
            let mut v = qkv.values_mut();
            v.extend([positions, cache_base, q_out, k_cache, v_cache]);
            v
        }
        Op::Attention { q, k_cache, v_cache, positions, cache_base, out, .. } => vec![q, k_cache, v_cache, positions, cache_base, out],
        Op::SwiGlu { gate, up, out } => vec![gate, up, out],
        Op::Add { a, b, out } => vec![a, b, out],
        Op::AddRmsNorm { a, b, weight, sum, out, .. } => vec![a, b, weight, sum, out],
        Op::Sample { logits, temperature, top_k, top_p, seed, counter, out } => vec![logits, temperature, top_k, top_p, seed, counter, out],
        Op::Advance { tokens, stop_ids, token_ids, positions, counter, control, ring } => {
            vec![tokens, stop_ids, token_ids, positions, counter, control, ring]
        }
        Op::SampleAdvance {
            logits,
            temperature,
            top_k,
            top_p,
            seed,
            stop_ids,
            out,
            token_ids,
            positions,
            counter,
            control,
            ring,
            argmax,
        } => {
            let mut v = vec![logits, temperature, top_k, top_p, seed, stop_ids, out, token_ids, positions, counter, control, ring];
            v.extend(argmax.as_mut());
            v
        }
    }
}
