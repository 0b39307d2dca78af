//! The fusion pass: rewrites a lowered program so that fewer, larger launches do the same
//! work, with results bit-identical to the unfused program on the CPU reference (each fused
//! op keeps the intermediate roundings of the ops it replaces; see `Op::FusedLinear`).
//!
//! Rewrites, in order, each only where every intermediate is a temp with no other reader:
//! 1. `rms_norm` whose readers are all linears -> each linear normalizes its input itself
//!    (`FusedLinear` with a norm prologue); the norm op disappears. Not when a reader has more
//!    than [`NORM_PROLOGUE_MAX_FEATURES`] outputs (the vocabulary projection): every block of
//!    the fused GEMV recomputes the row's RMS, and over thousands of blocks that costs more than
//!    the launch it saves (H200, ncu: the Llama-3.1-8B logits took 320 us fused against 252 us
//!    plus a 15 us norm unfused; `bench/results/2026-11-30-h200-ncu-l8f.txt`).
//! 2. `swiglu(linear(h, gate), linear(h, up))` with the same input and norm, no bias ->
//!    one `GatedLinear`.
//! 3. `add(r, linear(..))` -> the linear adds the residual in its epilogue.
//!
//! Values are renumbered densely in order of first use afterwards, so dumps stay canonical.
//!
//! Prefill programs are left as they are: their linears run as library GEMMs (`Kernel::Gemm`),
//! which take no norm prologue, and the elementwise ops they would save are small next to the
//! GEMMs. Fusion is a decode optimization (launch count and bytes per token).

use crate::ir::{verify::verify, Op, OpNode, Program, ValueClass, ValueId};
use anyhow::Result;

/// Most output features of a linear that takes a norm prologue (rewrite 1).
pub const NORM_PROLOGUE_MAX_FEATURES: usize = 16384;

pub fn fuse(p: &Program) -> Result<Program> {
    if p.phase == crate::ir::Phase::Prefill {
        return Ok(p.clone());
    }
    let mut ops: Vec<Option<OpNode>> = p.ops.iter().cloned().map(Some).collect();
    let readers = |ops: &[Option<OpNode>], v: ValueId| -> Vec<usize> {
        ops.iter().enumerate().filter(|(_, o)| o.as_ref().is_some_and(|o| o.op.reads().contains(&v))).map(|(i, _)| i).collect()
    };
    let producer = |ops: &[Option<OpNode>], v: ValueId| -> Option<usize> {
        ops.iter().position(|o| o.as_ref().is_some_and(|o| o.op.writes().contains(&v)))
    };
    let is_temp = |v: ValueId| p.value(v).class == ValueClass::Temp;

    // 1. Norm prologues.
    for i in 0..ops.len() {
        let Some(OpNode { op: Op::RmsNorm { x, weight, out: h, eps }, .. }) = ops[i].clone() else { continue };
        if !is_temp(h) {
            continue;
        }
        let rs = readers(&ops, h);
        let all_linear = !rs.is_empty()
            && rs.iter().all(|&j| {
                matches!(ops[j].as_ref().map(|o| &o.op), Some(Op::Linear { x: lx, weight: w, .. })
                    if *lx == h && *w != h && p.value(*w).shape.0.first().is_some_and(|&n| n <= NORM_PROLOGUE_MAX_FEATURES))
            });
        if !all_linear {
            continue;
        }
        for j in rs {
            let node = ops[j].as_mut().expect("reader exists");
            if let Op::Linear { weight: w, bias, out, .. } = node.op {
                node.op = Op::FusedLinear { x, norm: Some((weight, eps)), weight: w, bias, residual: None, out };
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
                Some(Op::Linear { x, weight, bias, .. }) => Op::FusedLinear { x, norm: None, weight, bias, residual: Some(residual), out },
                Some(Op::FusedLinear { x, norm, weight, bias, residual: None, .. }) => {
                    Op::FusedLinear { x, norm, weight, bias, residual: Some(residual), out }
                }
                _ => continue,
            };
            ops[j].as_mut().expect("producer exists").op = fused;
            ops[k] = None;
            break;
        }
    }

    let fused = compact(p, ops.into_iter().flatten().collect());
    verify(&fused)?;
    Ok(fused)
}

/// A program with only the values `ops` use, numbered in order of first use.
fn compact(p: &Program, ops: Vec<OpNode>) -> Program {
    let mut map: Vec<Option<ValueId>> = vec![None; p.values.len()];
    let mut out = Program::new(p.phase, p.bucket, p.sample_rows);
    out.tokens = p.tokens;
    let mut remap = |v: ValueId, out: &mut Program| -> ValueId {
        if let Some(id) = map[v.index()] {
            return id;
        }
        out.values.push(p.value(v).clone());
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
        Op::FusedLinear { x, norm, weight, bias, residual, out } => {
            let mut v = vec![x];
            v.extend(norm.as_mut().map(|n| &mut n.0));
            v.push(weight);
            v.extend(bias.as_mut());
            v.extend(residual.as_mut());
            v.push(out);
            v
        }
        Op::GatedLinear { x, norm, gate, up, out } => {
            let mut v = vec![x];
            v.extend(norm.as_mut().map(|n| &mut n.0));
            v.extend([gate, up, out]);
            v
        }
        Op::Rope { x, positions, out, .. } => vec![x, positions, out],
        Op::KvWrite { k, v, positions, cache_base, k_cache, v_cache } => vec![k, v, positions, cache_base, k_cache, v_cache],
        Op::Attention { q, k_cache, v_cache, positions, cache_base, out, .. } => vec![q, k_cache, v_cache, positions, cache_base, out],
        Op::SwiGlu { gate, up, out } => vec![gate, up, out],
        Op::Add { a, b, out } => vec![a, b, out],
        Op::Sample { logits, temperature, top_k, top_p, seed, counter, out } => vec![logits, temperature, top_k, top_p, seed, counter, out],
        Op::Advance { tokens, stop_ids, token_ids, positions, counter, control, ring } => {
            vec![tokens, stop_ids, token_ids, positions, counter, control, ring]
        }
    }
}
