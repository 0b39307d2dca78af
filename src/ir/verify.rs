//! The IR verifier. Run after lowering and after every pass (`debug_assertions` builds run it
//! always; `kiln plan` runs it in release too, it is cheap).
//!
//! Invariants checked, in this order:
//! 1. Every value id an op names exists; value names and op names are unique in a program.
//! 2. `Weight` values are never written; `Step` and `Ring` values only by `Advance` (the
//!    device loop's step) or `SampleAdvance`; `State` values only by the KV writes (`KvWrite`,
//!    `RopeKvWrite`, `QkvRope`, `QkvAttention`) and the argmax key's two ops (`LinearArgmax`, `SampleAdvance`);
//!    `Output` and `Temp` values exactly once.
//! 3. A `Temp` or `Output` value is written before it is read; every `Temp` is read at least
//!    once (a dead temp would waste arena bytes).
//! 4. Per-op shape and dtype rules (each op's doc in `op.rs`): matching row counts and
//!    feature sizes, `i32` positions/indices, `f32` logits and sampling parameters,
//!    heads dividing evenly, even rotary dims, and no zero-sized value.
//! 5. The program's `tokens` and `sample_rows` agree with its step inputs and outputs.

use super::{DType, Op, OutNorm, Program, Qkv, RopeSpec, ValueClass, ValueId};
use anyhow::{bail, ensure, Result};
use std::collections::HashSet;

pub fn verify(p: &Program) -> Result<()> {
    let label = p.label();
    verify_inner(p).map_err(|e| e.context(format!("IR verifier failed on program {label}")))
}

fn verify_inner(p: &Program) -> Result<()> {
    let n = p.values.len();
    let mut names = HashSet::new();
    for v in &p.values {
        ensure!(names.insert(v.name.as_str()), "value name `{}` is used twice", v.name);
        ensure!(v.shape.numel() > 0, "value `{}` has an empty shape {}", v.name, v.shape);
    }
    let mut op_names = HashSet::new();
    let mut written = vec![0usize; n];
    let mut read = vec![false; n];
    for node in &p.ops {
        ensure!(op_names.insert(node.name.as_str()), "op name `{}` is used twice", node.name);
        for id in node.op.reads().into_iter().chain(node.op.writes()) {
            ensure!(id.index() < n, "op `{}` names {id}, but the program has {n} values", node.name);
        }
        for id in node.op.reads() {
            let v = p.value(id);
            if matches!(v.class, ValueClass::Temp | ValueClass::Output) && written[id.index()] == 0 {
                bail!("op `{}` reads `{}` before anything writes it", node.name, v.name);
            }
            read[id.index()] = true;
        }
        for id in node.op.writes() {
            let v = p.value(id);
            match v.class {
                ValueClass::Weight => {
                    bail!("op `{}` writes {} value `{}`, which is read-only", node.name, v.class.name(), v.name)
                }
                ValueClass::Step | ValueClass::Ring => ensure!(
                    matches!(node.op, Op::Advance { .. } | Op::SampleAdvance { .. }),
                    "op `{}` ({}) writes {} value `{}`; only advance (or sample_advance) may",
                    node.name,
                    node.op.mnemonic(),
                    v.class.name(),
                    v.name
                ),
                ValueClass::State => ensure!(
                    matches!(
                        node.op,
                        Op::KvWrite { .. }
                            | Op::RopeKvWrite { .. }
                            | Op::QkvRope { .. }
                            | Op::QkvAttention { .. }
                            | Op::LinearArgmax { .. }
                            | Op::NormedLinear { argmax: Some(_), .. }
                            | Op::SampleAdvance { argmax: Some(_), .. }
                    ),
                    "op `{}` ({}) writes state `{}`; only kv_write, rope_kv_write, qkv_rope, qkv_attention and the argmax key's \
                     linear_argmax, normed_linear and sample_advance may",
                    node.name,
                    node.op.mnemonic(),
                    v.name
                ),
                ValueClass::Output | ValueClass::Temp => {
                    ensure!(written[id.index()] == 0, "`{}` is written twice (second time by `{}`)", v.name, node.name)
                }
            }
            written[id.index()] += 1;
        }
        check_op(p, &node.name, &node.op)?;
    }
    for (i, v) in p.values.iter().enumerate() {
        if v.class == ValueClass::Temp {
            ensure!(written[i] > 0, "temp `{}` is never written", v.name);
            ensure!(read[i], "temp `{}` is written but never read", v.name);
        }
        if v.class == ValueClass::Output {
            ensure!(written[i] == 1, "output `{}` is never written", v.name);
        }
        if v.class == ValueClass::Step && !v.name.starts_with("step.loop_") {
            let rows = v.shape.dims()[0];
            ensure!(
                rows == p.tokens || rows == p.sample_rows,
                "step input `{}` has {rows} rows; expected {} tokens or {} sample rows",
                v.name,
                p.tokens,
                p.sample_rows
            );
        }
    }
    Ok(())
}

/// An argmax key (`Op::LinearArgmax`): `u32 [rows, 2]` state.
fn want_argmax_key(p: &Program, name: &str, op: &Op, key: ValueId, rows: usize) -> Result<()> {
    let v = p.value(key);
    ensure!(
        v.class == ValueClass::State && v.dtype == DType::U32 && v.shape.dims() == [rows, 2],
        "op `{name}` ({}): the argmax key `{}` must be u32 [{rows}, 2] state, is {} {} {}",
        op.mnemonic(),
        v.name,
        v.class.name(),
        v.dtype,
        v.shape
    );
    Ok(())
}

fn check_op(p: &Program, name: &str, op: &Op) -> Result<()> {
    let v = |id: ValueId| p.value(id);
    let dims = |id: ValueId| v(id).shape.dims().to_vec();
    let ctx = |what: String| anyhow::anyhow!("op `{name}` ({}): {what}", op.mnemonic());
    let want_dtype = |id: ValueId, dt: DType| -> Result<()> {
        if v(id).dtype != dt {
            return Err(ctx(format!("`{}` must be {dt}, is {}", v(id).name, v(id).dtype)));
        }
        Ok(())
    };
    let want_float = |id: ValueId| -> Result<()> {
        if !v(id).dtype.is_float() {
            return Err(ctx(format!("`{}` must be a float type, is {}", v(id).name, v(id).dtype)));
        }
        Ok(())
    };
    let want_2d = |id: ValueId| -> Result<(usize, usize)> {
        let d = dims(id);
        if d.len() != 2 {
            return Err(ctx(format!("`{}` must be 2-D, is {}", v(id).name, v(id).shape)));
        }
        Ok((d[0], d[1]))
    };
    let want_vec = |id: ValueId, len: usize| -> Result<()> {
        if dims(id) != [len] {
            return Err(ctx(format!("`{}` must be [{len}], is {}", v(id).name, v(id).shape)));
        }
        Ok(())
    };
    let same_shape = |a: ValueId, b: ValueId| -> Result<()> {
        if v(a).shape != v(b).shape {
            return Err(ctx(format!("`{}` {} and `{}` {} must have the same shape", v(a).name, v(a).shape, v(b).name, v(b).shape)));
        }
        Ok(())
    };
    // The RoPE and KV-write half of `RopeKvWrite` and `QkvRope`: `r` rows of q (`qd` wide) and k
    // (`kd` wide) rotated at `positions` and written to the caches at `cache_base + positions`.
    let rope_kv_write = |r: usize,
                         qd: usize,
                         kd: usize,
                         (positions, cache_base): (ValueId, ValueId),
                         (k_cache, v_cache): (ValueId, ValueId),
                         head_dim: u32,
                         rope: &RopeSpec|
     -> Result<()> {
        want_dtype(positions, DType::I32)?;
        want_dtype(cache_base, DType::I32)?;
        want_vec(positions, r)?;
        want_vec(cache_base, r)?;
        ensure!(
            head_dim > 0 && qd.is_multiple_of(head_dim as usize) && kd.is_multiple_of(head_dim as usize),
            ctx(format!("row lengths {qd} / {kd} are not multiples of head_dim {head_dim}"))
        );
        ensure!(
            rope.rotary_dim > 0 && rope.rotary_dim.is_multiple_of(2) && rope.rotary_dim <= head_dim,
            ctx(format!("rotary_dim {} must be even and at most head_dim {head_dim}", rope.rotary_dim))
        );
        ensure!(rope.theta > 0.0, ctx("rope theta must be positive".into()));
        same_shape(k_cache, v_cache)?;
        for c in [k_cache, v_cache] {
            ensure!(v(c).class == ValueClass::State, ctx(format!("`{}` must be state", v(c).name)));
        }
        Ok(())
    };
    match *op {
        Op::Gather { table, indices, out } => {
            let (_, d) = want_2d(table)?;
            want_dtype(indices, DType::I32)?;
            let (r, od) = want_2d(out)?;
            want_vec(indices, r)?;
            ensure!(od == d, ctx(format!("out row length {od} != table row length {d}")));
            ensure!(v(table).dtype.is_float() && v(out).dtype.is_float(), ctx("gather moves float rows".into()));
        }
        Op::RmsNorm { x, weight, out, eps } => {
            let (_, d) = want_2d(x)?;
            want_vec(weight, d)?;
            same_shape(x, out)?;
            want_float(x)?;
            want_float(out)?;
            ensure!(eps > 0.0, ctx(format!("eps must be positive, is {eps}")));
        }
        Op::HeadRmsNorm { x, weight, out, head_dim, eps } => {
            let (_, d) = want_2d(x)?;
            ensure!(head_dim > 0 && d % head_dim as usize == 0, ctx(format!("row length {d} is not a multiple of head_dim {head_dim}")));
            want_vec(weight, head_dim as usize)?;
            same_shape(x, out)?;
            ensure!(eps > 0.0, ctx(format!("eps must be positive, is {eps}")));
        }
        Op::Linear { x, weight, bias, out } => {
            let (r, k) = want_2d(x)?;
            let (nf, kw) = want_2d(weight)?;
            ensure!(k == kw, ctx(format!("x has {k} features but weight `{}` expects {kw}", v(weight).name)));
            if let Some(b) = bias {
                want_vec(b, nf)?;
            }
            let (ro, no) = want_2d(out)?;
            ensure!(ro == r && no == nf, ctx(format!("out is {} but should be [{r},{nf}]", v(out).shape)));
            want_float(x)?;
            want_float(weight)?;
            want_float(out)?;
        }
        Op::LinearArgmax { x, weight, out, argmax } => {
            check_op(p, name, &Op::Linear { x, weight, bias: None, out })?;
            want_dtype(out, DType::F32)?;
            want_argmax_key(p, name, op, argmax, want_2d(out)?.0)?;
        }
        Op::NormedLinear { x, sumsq, weight, out, argmax, eps } => {
            check_op(p, name, &Op::Linear { x, weight, bias: None, out })?;
            let (r, k) = want_2d(x)?;
            ensure!(k % 8 == 0, ctx(format!("x has {k} features, not a whole number of 8-feature groups")));
            let (rs, g) = want_2d(sumsq)?;
            ensure!(rs == r && g == k / 8, ctx(format!("sumsq is {} but should be [{r},{}]", v(sumsq).shape, k / 8)));
            want_dtype(sumsq, DType::F32)?;
            ensure!(eps > 0.0, ctx(format!("eps must be positive, is {eps}")));
            if let Some(key) = argmax {
                want_dtype(out, DType::F32)?;
                want_argmax_key(p, name, op, key, r)?;
            }
        }
        Op::FusedLinear { x, norm, weight, bias, residual, out, out_norm } => {
            let (r, k) = want_2d(x)?;
            let (nf, kw) = want_2d(weight)?;
            ensure!(k == kw, ctx(format!("x has {k} features but weight `{}` expects {kw}", v(weight).name)));
            if let Some((nw, eps)) = norm {
                want_vec(nw, k)?;
                ensure!(eps > 0.0, ctx(format!("eps must be positive, is {eps}")));
            }
            if let Some(b) = bias {
                want_vec(b, nf)?;
            }
            let (ro, no) = want_2d(out)?;
            ensure!(ro == r && no == nf, ctx(format!("out is {} but should be [{r},{nf}]", v(out).shape)));
            if let Some(res) = residual {
                same_shape(res, out)?;
            }
            want_float(x)?;
            want_float(weight)?;
            want_float(out)?;
            if let Some(OutNorm { weight: onw, sumsq }) = out_norm {
                ensure!(nf % 8 == 0, ctx(format!("out_norm needs whole 8-feature groups; out has {nf} features")));
                want_vec(onw, nf)?;
                let (rs, g) = want_2d(sumsq)?;
                ensure!(rs == r && g == nf / 8, ctx(format!("sumsq is {} but should be [{r},{}]", v(sumsq).shape, nf / 8)));
                want_dtype(sumsq, DType::F32)?;
            }
        }
        Op::QkvLinear { x, norm, weights, biases, outs } => {
            let (r, k) = want_2d(x)?;
            if let Some((nw, eps)) = norm {
                want_vec(nw, k)?;
                ensure!(eps > 0.0, ctx(format!("eps must be positive, is {eps}")));
            }
            want_float(x)?;
            let mut total = 0;
            for i in 0..3 {
                let (nf, kw) = want_2d(weights[i])?;
                ensure!(k == kw, ctx(format!("x has {k} features but weight `{}` expects {kw}", v(weights[i]).name)));
                if let Some(b) = biases {
                    want_vec(b[i], nf)?;
                }
                want_float(weights[i])?;
                total += nf;
                if let Qkv::Split(outs) = outs {
                    let (ro, no) = want_2d(outs[i])?;
                    ensure!(ro == r && no == nf, ctx(format!("out {i} is {} but should be [{r},{nf}]", v(outs[i]).shape)));
                    ensure!(v(outs[i]).dtype == v(outs[0]).dtype, ctx("the three outputs must share a dtype".to_string()));
                    want_float(outs[i])?;
                }
            }
            if let Qkv::Packed(out) = outs {
                let (ro, no) = want_2d(out)?;
                ensure!(ro == r && no == total, ctx(format!("packed out is {} but should be [{r},{total}]", v(out).shape)));
                want_float(out)?;
            }
        }
        Op::GatedLinear { x, norm, gate, up, out } => {
            let (r, k) = want_2d(x)?;
            let (nf, kw) = want_2d(gate)?;
            ensure!(k == kw, ctx(format!("x has {k} features but `{}` expects {kw}", v(gate).name)));
            same_shape(gate, up)?;
            if let Some((nw, eps)) = norm {
                want_vec(nw, k)?;
                ensure!(eps > 0.0, ctx(format!("eps must be positive, is {eps}")));
            }
            let (ro, no) = want_2d(out)?;
            ensure!(ro == r && no == nf, ctx(format!("out is {} but should be [{r},{nf}]", v(out).shape)));
            want_float(x)?;
            want_float(out)?;
        }
        Op::Rope { x, positions, out, head_dim, rope } => {
            let (r, d) = want_2d(x)?;
            want_dtype(positions, DType::I32)?;
            want_vec(positions, r)?;
            same_shape(x, out)?;
            ensure!(head_dim > 0 && d % head_dim as usize == 0, ctx(format!("row length {d} is not a multiple of head_dim {head_dim}")));
            ensure!(
                rope.rotary_dim > 0 && rope.rotary_dim % 2 == 0 && rope.rotary_dim <= head_dim,
                ctx(format!("rotary_dim {} must be even and at most head_dim {head_dim}", rope.rotary_dim))
            );
            ensure!(rope.theta > 0.0, ctx("rope theta must be positive".into()));
        }
        // `QkvAttention` writes the attention of the q that `QkvRope` writes as q_out: the same rules
        // with its `out` in q_out's place, then `Attention`'s.
        Op::QkvRope { x, norm, weights, biases, positions, cache_base, q_out: q, k_cache, v_cache, head_dim, rope }
        | Op::QkvAttention { x, norm, weights, biases, positions, cache_base, out: q, k_cache, v_cache, head_dim, rope, .. } => {
            let (r, k) = want_2d(x)?;
            let (rq, qd) = want_2d(q)?;
            let (_, kd) = want_2d(k_cache)?;
            ensure!(rq == r, ctx(format!("`{}` has {rq} rows but x has {r}", v(q).name)));
            if let Some((nw, eps)) = norm {
                want_vec(nw, k)?;
                ensure!(eps > 0.0, ctx(format!("eps must be positive, is {eps}")));
            }
            want_float(x)?;
            for (i, want) in [qd, kd, kd].into_iter().enumerate() {
                let (nf, kw) = want_2d(weights[i])?;
                ensure!(k == kw, ctx(format!("x has {k} features but weight `{}` expects {kw}", v(weights[i]).name)));
                ensure!(
                    nf == want,
                    ctx(format!("weight `{}` has {nf} outputs but its cache / `{}` rows have {want}", v(weights[i]).name, v(q).name))
                );
                if let Some(b) = biases {
                    want_vec(b[i], nf)?;
                }
                want_float(weights[i])?;
            }
            rope_kv_write(r, qd, kd, (positions, cache_base), (k_cache, v_cache), head_dim, &rope)?;
            // The GPU kernel keeps both elements of every rotary pair in one 16-row block.
            ensure!(head_dim.is_multiple_of(16), ctx(format!("head_dim {head_dim} must be a multiple of 16")));
            ensure!(rope.rotary_dim == head_dim, ctx(format!("rotary_dim {} must equal head_dim {head_dim}", rope.rotary_dim)));
            for c in [k_cache, v_cache] {
                ensure!(v(c).dtype == v(q).dtype, ctx(format!("`{}` and the caches must share a dtype", v(q).name)));
            }
            want_float(q)?;
            if let Op::QkvAttention { scale, .. } = *op {
                let (heads, kv_heads) = (qd / head_dim as usize, kd / head_dim as usize);
                ensure!(
                    kv_heads > 0 && heads.is_multiple_of(kv_heads),
                    ctx(format!("{heads} heads are not a multiple of {kv_heads} kv heads"))
                );
                ensure!(scale > 0.0, ctx("scale must be positive".into()));
            }
        }
        Op::RopeKvWrite { qkv, positions, cache_base, q_out, k_cache, v_cache, head_dim, rope } => {
            let (r, qd) = want_2d(q_out)?;
            let (_, kd) = want_2d(k_cache)?;
            match qkv {
                Qkv::Split([q, k, vv]) => {
                    let (rk, kw) = want_2d(k)?;
                    ensure!(rk == r && kw == kd, ctx(format!("k is {} but should be [{r},{kd}]", v(k).shape)));
                    same_shape(k, vv)?;
                    same_shape(q, q_out)?;
                }
                Qkv::Packed(p) => {
                    let (rp, w) = want_2d(p)?;
                    ensure!(rp == r && w == qd + 2 * kd, ctx(format!("packed qkv is {} but should be [{r},{}]", v(p).shape, qd + 2 * kd)));
                    ensure!(v(p).dtype == v(q_out).dtype, ctx("packed qkv and q_out must share a dtype".to_string()));
                }
            }
            rope_kv_write(r, qd, kd, (positions, cache_base), (k_cache, v_cache), head_dim, &rope)?;
            for x in qkv.values() {
                want_float(x)?;
            }
            want_float(q_out)?;
        }
        Op::KvWrite { k, v: vv, positions, cache_base, k_cache, v_cache } => {
            let (r, kd) = want_2d(k)?;
            same_shape(k, vv)?;
            want_dtype(positions, DType::I32)?;
            want_dtype(cache_base, DType::I32)?;
            want_vec(positions, r)?;
            want_vec(cache_base, r)?;
            let (_, cd) = want_2d(k_cache)?;
            same_shape(k_cache, v_cache)?;
            ensure!(cd == kd, ctx(format!("cache row length {cd} != k row length {kd}")));
            for c in [k_cache, v_cache] {
                ensure!(v(c).class == ValueClass::State, ctx(format!("`{}` must be state", v(c).name)));
            }
        }
        Op::Attention { q, k_cache, v_cache, positions, cache_base, out, n_heads, n_kv_heads, head_dim, scale } => {
            let (r, qd) = want_2d(q)?;
            ensure!(
                n_heads > 0 && n_kv_heads > 0 && n_heads % n_kv_heads == 0,
                ctx(format!("{n_heads} heads are not a multiple of {n_kv_heads} kv heads"))
            );
            ensure!(qd == (n_heads * head_dim) as usize, ctx(format!("q row length {qd} != {n_heads} heads x {head_dim}")));
            let (_, cd) = want_2d(k_cache)?;
            same_shape(k_cache, v_cache)?;
            ensure!(cd == (n_kv_heads * head_dim) as usize, ctx(format!("cache row length {cd} != {n_kv_heads} kv heads x {head_dim}")));
            want_dtype(positions, DType::I32)?;
            want_dtype(cache_base, DType::I32)?;
            want_vec(positions, r)?;
            want_vec(cache_base, r)?;
            same_shape(q, out)?;
            ensure!(scale > 0.0, ctx("scale must be positive".into()));
        }
        Op::SwiGlu { gate, up, out } => {
            same_shape(gate, up)?;
            same_shape(gate, out)?;
            want_float(gate)?;
        }
        Op::Add { a, b, out } => {
            same_shape(a, b)?;
            same_shape(a, out)?;
            want_float(a)?;
        }
        Op::AddRmsNorm { a, b, weight, sum, out, eps } => {
            let (_, d) = want_2d(a)?;
            same_shape(a, b)?;
            same_shape(a, sum)?;
            same_shape(a, out)?;
            want_vec(weight, d)?;
            want_float(a)?;
            want_float(sum)?;
            want_float(out)?;
            ensure!(eps > 0.0, ctx(format!("eps must be positive, is {eps}")));
        }
        Op::Advance { tokens, stop_ids, token_ids, positions, counter, control, ring } => {
            let rows = v(tokens).shape.numel();
            want_dtype(tokens, DType::I32)?;
            want_dtype(stop_ids, DType::I32)?;
            for (id, dt) in [(token_ids, DType::I32), (positions, DType::I32), (counter, DType::U32)] {
                want_dtype(id, dt)?;
                want_vec(id, rows)?;
            }
            want_dtype(control, DType::U32)?;
            want_vec(control, 4 + rows)?;
            want_dtype(ring, DType::I32)?;
            ensure!(v(ring).class == ValueClass::Ring, ctx(format!("`{}` must be a ring value", v(ring).name)));
            ensure!(v(ring).shape.numel() % rows == 0, ctx("ring length is not a multiple of the rows".into()));
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
            if let Some(a) = argmax {
                want_argmax_key(p, name, op, a, 1)?;
            }
            // The two ops' rules, and one row (the fused kernel's advance runs in one block).
            check_op(p, name, &Op::Sample { logits, temperature, top_k, top_p, seed, counter, out })?;
            check_op(p, name, &Op::Advance { tokens: out, stop_ids, token_ids, positions, counter, control, ring })?;
            ensure!(v(out).shape.numel() == 1, ctx(format!("one row only, has {}", v(out).shape.numel())));
        }
        Op::Sample { logits, temperature, top_k, top_p, seed, counter, out } => {
            let (r, _) = want_2d(logits)?;
            want_dtype(logits, DType::F32)?;
            for (id, dt) in [
                (temperature, DType::F32),
                (top_k, DType::I32),
                (top_p, DType::F32),
                (seed, DType::U32),
                (counter, DType::U32),
                (out, DType::I32),
            ] {
                want_dtype(id, dt)?;
                want_vec(id, r)?;
            }
        }
    }
    Ok(())
}
