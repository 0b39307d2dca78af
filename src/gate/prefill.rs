//! Gate checks 6 and 7: prefill padding and chunking (issue 5).
//!
//! 6. Padding invisibility: a prompt chunk of `n` tokens run in every prefill bucket that holds
//!    it (the rest of the bucket is padding, position -1) gives bit-identical last-row logits
//!    and bit-identical KV rows, and the padding writes no KV row. Chunks start at position 0
//!    and after a prefix (a second chunk), on random configs whose attention takes the
//!    tensor-core prefill kernel (head_dim 64 and 128, bf16), on an f32 one, and on a
//!    `kiln synth` Llama-3.2-1B with prefill buckets 16 to 2048 (real GEMM shapes, for which
//!    cuBLASLt picks different algorithms per bucket).
//! 7. Chunked == unchunked prefill: the same prompt prefilled through a plan whose largest
//!    bucket holds it (one chunk) and through a plan with small buckets (several chunks, the KV
//!    cache written in place) gives the same greedy continuation and logits within the gate's
//!    tolerance at every step (the detail says when they are bit-identical), on stories260K in
//!    f32 and on a `kiln synth` Llama-3.2-1B directory in bf16.

use super::*;

/// Prefill buckets of check 6's plans.
const PAD_BUCKETS: [usize; 3] = [16, 64, 256];
/// (start, tokens) of check 6's chunks; a chunk with start > 0 follows a prefix prefilled first.
const PAD_CASES: [(usize, usize); 7] = [(0, 1), (0, 13), (0, 16), (0, 50), (0, 200), (100, 10), (100, 60)];
/// Greedy tokens after the prompt in check 7.
const CHUNK_CONTINUE: usize = 48;

fn pad_config(kind: &str) -> Result<(ModelConfig, DType)> {
    Ok(match kind {
        // head_dim 64, GQA group 4.
        "qwen3-hd64" => (random_config("qwen3")?, DType::BF16),
        // head_dim 128, GQA group 2.
        "llama-hd128" => {
            let mut c = random_config("llama")?;
            c.head_dim = 128;
            c.rope.rotary_dim = 128;
            c.validate()?;
            (c, DType::BF16)
        }
        // head_dim 32: the general attention kernel, f32 GEMMs.
        "llama-f32" => (random_config("llama")?, DType::F32),
        other => bail!("unknown padding config `{other}`"),
    })
}

/// KV rows `[0, rows)` of sequence `seq` in every layer, K then V, as bytes.
fn kv_rows(e: &mut dyn Executor, cfg: &ModelConfig, seq: usize, rows: usize) -> Result<Vec<Vec<u8>>> {
    let row_bytes = cfg.n_kv_heads * cfg.head_dim * e.plan().options.dtype.size();
    let base = seq * e.plan().options.max_context * row_bytes;
    let mut out = Vec::new();
    for l in 0..cfg.n_layers {
        for which in ["k_cache", "v_cache"] {
            out.push(e.read_tensor(&format!("blk.{l}.{which}"), base + rows * row_bytes)?.split_off(base));
        }
    }
    Ok(out)
}

pub(super) fn check_padding(g: &mut Gate, kind: &str, seed: u64) -> Result<()> {
    let (cfg, dtype) = pad_config(kind)?;
    let src = if dtype == DType::F32 { SrcDType::F32 } else { SrcDType::BF16 };
    let weights = MemWeights::random(&cfg, seed, src);
    padding_cases(g, kind, &cfg, &weights, dtype, &PAD_BUCKETS, &PAD_CASES, 512, seed, false)
}

/// Check 6 on a `kiln synth` directory of a real model shape, with the prefill buckets of a
/// serving plan up to 2048 (the library GEMMs pick their algorithms per row count there).
/// `fuse`: plans with the fusion pass (prefill programs take its `rope_kv_write`).
pub(super) fn check_padding_synth(g: &mut Gate, args: &GateArgs, shape: &str, fuse: bool) -> Result<()> {
    let dir = synth_dir(args, shape)?;
    let model = crate::model::open(&dir, None).with_context(|| format!("opening {}", dir.display()))?;
    let cases = [(0, 1), (0, 100), (0, 500), (0, 1500), (300, 200)];
    let what = if fuse { format!("{shape} fused") } else { shape.to_string() };
    padding_cases(g, &what, &model.config, model.weights.as_ref(), DType::BF16, &[16, 128, 512, 2048], &cases, 2048, args.seed, fuse)
}

#[allow(clippy::too_many_arguments)]
fn padding_cases(
    g: &mut Gate,
    kind: &str,
    cfg: &ModelConfig,
    weights: &dyn WeightSource,
    dtype: DType,
    buckets: &[usize],
    cases: &[(usize, usize)],
    max_context: usize,
    seed: u64,
    fuse: bool,
) -> Result<()> {
    let cfg = cfg.clone();
    let label = format!("6 padding invisible [{kind} {dtype}, prefill buckets {buckets:?}]");
    let opts = PlanOptions {
        // One KV slot per case, so every case starts from untouched rows.
        decode_buckets: vec![1, cases.len()],
        prefill_buckets: buckets.to_vec(),
        max_context,
        dtype,
        memory_budget: None,
        burst: 0,
        fuse,
    };
    let plan = build_plan(&cfg, &opts)?;
    let mut gpu = g.load(&plan, weights, Mode::Graph)?;
    let row_bytes = cfg.n_kv_heads * cfg.head_dim * dtype.size();
    let mut compared = 0usize;
    let outcome = (|| -> Result<()> {
        for (case, &(start, n)) in cases.iter().enumerate() {
            let prompt = random_tokens(seed ^ (0xbad + case as u64), start + n, cfg.vocab_size);
            let mut reference: Option<(usize, Vec<u8>, Vec<Vec<u8>>)> = None;
            for &bucket in buckets.iter().filter(|&&b| b >= n) {
                if start > 0 {
                    let big = largest_prefill(&plan)?;
                    gpu.run(big, &prefill_step(&plan, big, &prompt[..start], 0, case)?)?;
                }
                let program = plan.program(Phase::Prefill, bucket).context("bucket program")?;
                gpu.run(program, &prefill_step(&plan, program, &prompt[start..], start, case)?)?;
                let logits = gpu.read_tensor(names::LOGITS, cfg.vocab_size * 4)?;
                // Rows written by the chunk, and 16 rows past it that padding must not touch.
                let kv = kv_rows(&mut gpu, &cfg, case, start + n + 16)?;
                for (t, rows) in kv.iter().enumerate() {
                    let past = &rows[(start + n) * row_bytes..];
                    ensure!(
                        past.iter().all(|&b| b == 0),
                        "{n} tokens at {start} in bucket {bucket}: tensor {t} has bytes written past the chunk (padding wrote KV rows)"
                    );
                }
                let kv: Vec<Vec<u8>> = kv.into_iter().map(|mut r| r.split_off(start * row_bytes)).collect();
                match &reference {
                    None => reference = Some((bucket, logits, kv)),
                    Some((b0, l0, kv0)) => {
                        ensure!(
                            *l0 == logits,
                            "{n} tokens at {start}: logits in bucket {bucket} differ from bucket {b0} (normalized error {:.3e})",
                            errors(&decode_f32s(&logits, DType::F32), &decode_f32s(l0, DType::F32)).0
                        );
                        if let Some(t) = kv0.iter().zip(&kv).position(|(a, b)| a != b) {
                            bail!("{n} tokens at {start}: KV tensor {t} (layer {}) in bucket {bucket} differs from bucket {b0}", t / 2);
                        }
                        compared += 1;
                    }
                }
            }
        }
        Ok(())
    })();
    let detail = format!(
        "{} (start, tokens) cases {:?}, {compared} bucket pairs bit-identical in last-row logits and KV rows, no KV row written by padding",
        cases.len(),
        cases
    );
    match &outcome {
        Ok(()) => g.record(&label, true, &detail),
        Err(e) => g.record(&label, false, &format!("{e:#}; {detail}")),
    }
    g.absorb(&gpu);
    Ok(())
}

/// Prefill `prompt` (chunked through the plan's largest prefill bucket), then `steps` greedy
/// decode steps: the tokens after the prompt and the logits of every step (the prefill's first).
fn prefill_then_decode(e: &mut dyn Executor, prompt: &[u32], steps: usize) -> Result<(Vec<u32>, Vec<Vec<f32>>, usize)> {
    let plan = e.plan().clone();
    let mut logits = Vec::new();
    let mut chunks = 0usize;
    let mut next = {
        let mut execs: [&mut dyn Executor; 1] = [&mut *e];
        prefill_all(&mut execs, prompt, 0, |l, _| {
            chunks += 1;
            logits = vec![l[0].clone()];
            Ok(())
        })?
    };
    let decode = plan.program(Phase::Decode, 1).context("the plan has no decode bucket 1")?;
    let mut tokens = vec![next];
    for k in 0..steps {
        let step = decode_step(&plan, decode, &[next], &[prompt.len() + k])?;
        e.run(decode, &step)?;
        logits.push(read_logits(e, 1)?);
        next = read_tokens(e, 1)?[0] as u32;
        tokens.push(next);
    }
    Ok((tokens, logits, chunks))
}

#[allow(clippy::too_many_arguments)]
pub(super) fn check_chunked(
    g: &mut Gate,
    what: &str,
    cfg: &ModelConfig,
    weights: &dyn WeightSource,
    dtype: DType,
    prompt: &[u32],
    buckets: (usize, usize),
    fuse: bool,
) -> Result<()> {
    let tol = if dtype == DType::F32 { TOL_F32 } else { TOL_BF16 };
    let label = format!("7 chunked==unchunked [{what} {dtype}{}, tolerance {tol:e}]", if fuse { " fused" } else { "" });
    let max_context = (prompt.len() + CHUNK_CONTINUE + 16).next_power_of_two().min(cfg.max_position_embeddings);
    let plan_for = |prefill_buckets: Vec<usize>| {
        build_plan(cfg, &PlanOptions { decode_buckets: vec![1], prefill_buckets, max_context, dtype, memory_budget: None, burst: 0, fuse })
    };
    let (small, big) = buckets;
    let whole_plan = plan_for(vec![big])?;
    let chunk_plan = plan_for(vec![small])?;
    let mut whole = g.load(&whole_plan, weights, Mode::Graph)?;
    let a = prefill_then_decode(&mut whole, prompt, CHUNK_CONTINUE);
    g.absorb(&whole);
    drop(whole);
    let mut chunked = g.load(&chunk_plan, weights, Mode::Graph)?;
    let b = prefill_then_decode(&mut chunked, prompt, CHUNK_CONTINUE);
    g.absorb(&chunked);
    let ((ta, la, ca), (tb, lb, cb)) = (a?, b?);
    let mut worst = (0f64, 0f64);
    let mut identical = true;
    for (x, y) in la.iter().zip(&lb) {
        let (rel, max) = errors(y, x);
        worst = (worst.0.max(rel), worst.1.max(max));
        identical &= x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits());
    }
    let same_tokens = ta == tb;
    let first_diff = ta.iter().zip(&tb).position(|(x, y)| x != y);
    let pass = same_tokens && worst.0 <= tol;
    g.record(
        &label,
        pass,
        &format!(
            "{} prompt tokens in {ca} chunk(s) of <= {big} vs {cb} chunks of <= {small}; greedy continuation of {} tokens {}; logits at {} steps: worst normalized error {:.3e} (max |diff| {:.3e}){}",
            prompt.len(),
            ta.len(),
            match first_diff {
                None => "identical".to_string(),
                Some(i) => format!("differs from token {i}"),
            },
            la.len(),
            worst.0,
            worst.1,
            if identical { ", bit-identical" } else { "" }
        ),
    );
    Ok(())
}

pub(super) fn check_chunked_stories(g: &mut Gate, path: &Path) -> Result<()> {
    let model = crate::model::open(path, None).with_context(|| format!("opening {}", path.display()))?;
    let tok = model.tokenizer.as_ref().context("stories260K has no tokenizer")?;
    // The known story as the prompt: about 80 tokens, so 16-token buckets take 6 chunks.
    let prompt = tok.encode(STORIES_KNOWN_TEXT, true)?;
    check_chunked(g, "stories260K", &model.config, model.weights.as_ref(), DType::F32, &prompt, (16, 128), false)
}

pub(super) fn check_chunked_synth(g: &mut Gate, args: &GateArgs, shape: &str, fuse: bool) -> Result<()> {
    let dir = synth_dir(args, shape)?;
    let model = crate::model::open(&dir, None).with_context(|| format!("opening {}", dir.display()))?;
    let prompt = random_tokens(args.seed ^ 0xc4u64, 300, model.config.vocab_size);
    check_chunked(g, shape, &model.config, model.weights.as_ref(), DType::BF16, &prompt, (64, 512), fuse)
}
