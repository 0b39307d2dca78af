//! Lowering: a [`ModelConfig`] and a (phase, bucket) become one IR [`Program`].
//!
//! Owns: the op sequence of each architecture and the names of step fields, outputs, state
//! and temps. Never: offsets, sizes of regions or kernels (that is `plan`'s).
//!
//! Step fields every program reads (`i32` unless noted), `T` tokens, `S` sample rows:
//! - `step.token_ids [T]`, `step.positions [T]` (-1 = padding), `step.cache_base [T]`
//!   (first KV row of the token's sequence);
//! - prefill only: `step.logit_rows [1]` (which of the `T` rows is the last real token);
//! - `step.temperature f32 [S]`, `step.top_k [S]`, `step.top_p f32 [S]`, `step.seed u32 [S]`,
//!   `step.counter u32 [S]` (sampling; see `Op::Sample`).
//!
//! Outputs: `out.logits f32 [S, vocab]`, `out.tokens i32 [S]`.
//!
//! Device loops (`Phase::DecodeLoop`) add `step.loop_control u32 [4 + S]`,
//! `step.loop_stop_ids i32 [MAX_STOP_IDS]` and the ring `ring.tokens i32 [burst * S]` (see
//! `Op::Advance`).
//! State: `blk.{i}.k_cache`, `blk.{i}.v_cache`, each `[kv_rows, n_kv_heads * head_dim]`.

pub mod fuse;
pub mod tiles;

use crate::ir::{verify::verify, DType, Op, Phase, Program, ValueClass, ValueId};
use crate::model::config::ModelConfig;
use anyhow::{ensure, Result};

/// Names of the step fields and outputs, shared by lowering, the runtime and the tests.
pub mod names {
    pub const TOKEN_IDS: &str = "step.token_ids";
    pub const POSITIONS: &str = "step.positions";
    pub const CACHE_BASE: &str = "step.cache_base";
    pub const LOGIT_ROWS: &str = "step.logit_rows";
    pub const TEMPERATURE: &str = "step.temperature";
    pub const TOP_K: &str = "step.top_k";
    pub const TOP_P: &str = "step.top_p";
    pub const SEED: &str = "step.seed";
    pub const COUNTER: &str = "step.counter";
    pub const LOOP_CONTROL: &str = "step.loop_control";
    pub const LOOP_STOP_IDS: &str = "step.loop_stop_ids";
    pub const RING: &str = "ring.tokens";
    pub const LOGITS: &str = "out.logits";
    pub const TOKENS: &str = "out.tokens";
}

/// What lowering needs besides the config.
#[derive(Clone, Copy, Debug)]
pub struct LowerOptions {
    /// Storage dtype of weights, activations and the KV cache.
    pub dtype: DType,
    /// Rows of each layer's KV cache (sequences x max context).
    pub kv_rows: usize,
    /// Tokens per row a device loop can stream per launch (the ring's length).
    pub burst: usize,
}

/// Stop tokens a device loop checks (EOS ids; unused slots are -1).
pub const MAX_STOP_IDS: usize = 8;

pub fn lower(cfg: &ModelConfig, phase: Phase, bucket: usize, opts: LowerOptions) -> Result<Program> {
    ensure!(bucket > 0, "a bucket of 0 tokens cannot be lowered");
    ensure!(opts.dtype.is_float(), "plan dtype must be f32, f16 or bf16, not {}", opts.dtype);
    let t = bucket;
    let s = match phase {
        Phase::Decode | Phase::DecodeLoop => bucket,
        Phase::Prefill => 1,
    };
    let dt = opts.dtype;
    let (d, f, v) = (cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size);
    let (qd, kvd, hd) = (cfg.q_dim(), cfg.kv_dim(), cfg.head_dim);
    let mut p = Program::new(phase, bucket, s);

    use names::*;
    let step = |p: &mut Program, name: &str, dtype: DType, rows: usize| p.add_value(name, dtype, &[rows], ValueClass::Step);
    let token_ids = step(&mut p, TOKEN_IDS, DType::I32, t);
    let positions = step(&mut p, POSITIONS, DType::I32, t);
    let cache_base = step(&mut p, CACHE_BASE, DType::I32, t);
    let weight = |p: &mut Program, name: String, shape: &[usize]| p.add_value(name, dt, shape, ValueClass::Weight);
    let temp = |p: &mut Program, name: &str, shape: &[usize]| p.add_value(name, dt, shape, ValueClass::Temp);

    let embd = weight(&mut p, "token_embd.weight".into(), &[v, d]);
    let mut x = temp(&mut p, "embed", &[t, d]);
    p.push("embed", Op::Gather { table: embd, indices: token_ids, out: x });

    for i in 0..cfg.n_layers {
        let w = |p: &mut Program, n: &str, shape: &[usize]| weight(p, format!("blk.{i}.{n}"), shape);
        let name = |n: &str| format!("blk.{i}.{n}");
        // Attention block.
        let norm_w = w(&mut p, "attn_norm.weight", &[d]);
        let h = temp(&mut p, &name("attn_norm"), &[t, d]);
        p.push(name("attn_norm"), Op::RmsNorm { x, weight: norm_w, out: h, eps: cfg.rms_norm_eps });
        let proj = |p: &mut Program, n: &str, out_dim: usize| -> ValueId {
            let wt = w(p, &format!("{n}.weight"), &[out_dim, d]);
            let bias = cfg.qkv_bias.then(|| w(p, &format!("{n}.bias"), &[out_dim]));
            let out = temp(p, &name(n), &[t, out_dim]);
            p.push(name(n), Op::Linear { x: h, weight: wt, bias, out });
            out
        };
        let mut q = proj(&mut p, "attn_q", qd);
        let mut k = proj(&mut p, "attn_k", kvd);
        let vv = proj(&mut p, "attn_v", kvd);
        if cfg.qk_norm {
            for (val, n) in [(&mut q, "attn_q_norm"), (&mut k, "attn_k_norm")] {
                let nw = w(&mut p, &format!("{n}.weight"), &[hd]);
                let width = val_dim(&p, *val);
                let out = temp(&mut p, &name(n), &[t, width]);
                p.push(name(n), Op::HeadRmsNorm { x: *val, weight: nw, out, head_dim: hd as u32, eps: cfg.rms_norm_eps });
                *val = out;
            }
        }
        let qr = temp(&mut p, &name("rope_q"), &[t, qd]);
        p.push(name("rope_q"), Op::Rope { x: q, positions, out: qr, head_dim: hd as u32, rope: cfg.rope });
        let kr = temp(&mut p, &name("rope_k"), &[t, kvd]);
        p.push(name("rope_k"), Op::Rope { x: k, positions, out: kr, head_dim: hd as u32, rope: cfg.rope });
        let k_cache = p.add_value(name("k_cache"), dt, &[opts.kv_rows, kvd], ValueClass::State);
        let v_cache = p.add_value(name("v_cache"), dt, &[opts.kv_rows, kvd], ValueClass::State);
        p.push(name("kv_write"), Op::KvWrite { k: kr, v: vv, positions, cache_base, k_cache, v_cache });
        let att = temp(&mut p, &name("attn"), &[t, qd]);
        p.push(
            name("attn"),
            Op::Attention {
                q: qr,
                k_cache,
                v_cache,
                positions,
                cache_base,
                out: att,
                n_heads: cfg.n_heads as u32,
                n_kv_heads: cfg.n_kv_heads as u32,
                head_dim: hd as u32,
                scale: 1.0 / (hd as f32).sqrt(),
            },
        );
        let wo = w(&mut p, "attn_output.weight", &[d, qd]);
        let o = temp(&mut p, &name("attn_output"), &[t, d]);
        p.push(name("attn_output"), Op::Linear { x: att, weight: wo, bias: None, out: o });
        let x1 = temp(&mut p, &name("attn_residual"), &[t, d]);
        p.push(name("attn_residual"), Op::Add { a: x, b: o, out: x1 });
        // Feed-forward block.
        let fnorm_w = w(&mut p, "ffn_norm.weight", &[d]);
        let h2 = temp(&mut p, &name("ffn_norm"), &[t, d]);
        p.push(name("ffn_norm"), Op::RmsNorm { x: x1, weight: fnorm_w, out: h2, eps: cfg.rms_norm_eps });
        let wg = w(&mut p, "ffn_gate.weight", &[f, d]);
        let g = temp(&mut p, &name("ffn_gate"), &[t, f]);
        p.push(name("ffn_gate"), Op::Linear { x: h2, weight: wg, bias: None, out: g });
        let wu = w(&mut p, "ffn_up.weight", &[f, d]);
        let u = temp(&mut p, &name("ffn_up"), &[t, f]);
        p.push(name("ffn_up"), Op::Linear { x: h2, weight: wu, bias: None, out: u });
        let a = temp(&mut p, &name("ffn_act"), &[t, f]);
        p.push(name("ffn_act"), Op::SwiGlu { gate: g, up: u, out: a });
        let wd = w(&mut p, "ffn_down.weight", &[d, f]);
        let dn = temp(&mut p, &name("ffn_down"), &[t, d]);
        p.push(name("ffn_down"), Op::Linear { x: a, weight: wd, bias: None, out: dn });
        let x2 = temp(&mut p, &name("ffn_residual"), &[t, d]);
        p.push(name("ffn_residual"), Op::Add { a: x1, b: dn, out: x2 });
        x = x2;
    }

    if phase == Phase::Prefill {
        let rows = step(&mut p, LOGIT_ROWS, DType::I32, s);
        let last = temp(&mut p, "last_row", &[s, d]);
        p.push("last_row", Op::Gather { table: x, indices: rows, out: last });
        x = last;
    }
    let onorm_w = weight(&mut p, "output_norm.weight".into(), &[d]);
    let xn = temp(&mut p, "output_norm", &[s, d]);
    p.push("output_norm", Op::RmsNorm { x, weight: onorm_w, out: xn, eps: cfg.rms_norm_eps });
    let out_w = if cfg.tie_word_embeddings { embd } else { weight(&mut p, "output.weight".into(), &[v, d]) };
    let logits = p.add_value(LOGITS, DType::F32, &[s, v], ValueClass::Output);
    p.push("output", Op::Linear { x: xn, weight: out_w, bias: None, out: logits });
    let temperature = step(&mut p, TEMPERATURE, DType::F32, s);
    let top_k = step(&mut p, TOP_K, DType::I32, s);
    let top_p = step(&mut p, TOP_P, DType::F32, s);
    let seed = step(&mut p, SEED, DType::U32, s);
    let counter = step(&mut p, COUNTER, DType::U32, s);
    let tokens = p.add_value(TOKENS, DType::I32, &[s], ValueClass::Output);
    p.push("sample", Op::Sample { logits, temperature, top_k, top_p, seed, counter, out: tokens });
    if phase == Phase::DecodeLoop {
        ensure!(opts.burst > 0, "a device loop needs a burst of at least one token");
        let stop_ids = p.add_value(LOOP_STOP_IDS, DType::I32, &[MAX_STOP_IDS], ValueClass::Step);
        let control = p.add_value(LOOP_CONTROL, DType::U32, &[4 + s], ValueClass::Step);
        let ring = p.add_value(RING, DType::I32, &[opts.burst * s], ValueClass::Ring);
        p.push("advance", Op::Advance { tokens, stop_ids, token_ids, positions, counter, control, ring });
    }

    verify(&p)?;
    Ok(p)
}

fn val_dim(p: &Program, v: ValueId) -> usize {
    p.value(v).shape.last()
}
