//! Generation over any [`Executor`]: prefill the prompt in planned buckets (chunked when it is
//! longer than the largest), then decode one token per step with on-device sampling. Only the
//! step block changes between steps; the programs and their addresses never do.
//!
//! One sequence for now (slot 0, KV rows from 0). Batched serving comes with `kiln serve`.

use super::{Executor, StepBlock};
use crate::ir::Phase;
use crate::lower::names;
use anyhow::{bail, ensure, Result};

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampling {
    /// 0 = greedy (argmax).
    pub temperature: f32,
    /// 0 = no top-k cut.
    pub top_k: i32,
    /// 1 = no nucleus cut.
    pub top_p: f32,
    pub seed: u32,
}

impl Sampling {
    pub fn greedy() -> Sampling {
        Sampling { temperature: 0.0, top_k: 0, top_p: 1.0, seed: 0 }
    }
}

/// Why generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    StopToken,
    MaxTokens,
    ContextFull,
    Callback,
}

#[derive(Clone, Debug)]
pub struct Generated {
    pub tokens: Vec<u32>,
    pub stop: Stop,
    pub prefill_steps: usize,
    pub decode_steps: usize,
    pub prefill_seconds: f64,
    pub decode_seconds: f64,
}

/// Runs the prompt and then up to `max_tokens` new tokens. `on_token` sees each new token and
/// may return `false` to stop. Generation stops at any token in `stop_tokens`.
pub fn generate(
    exec: &mut dyn Executor,
    prompt: &[u32],
    max_tokens: usize,
    sampling: Sampling,
    stop_tokens: &[u32],
    mut on_token: impl FnMut(u32) -> bool,
) -> Result<Generated> {
    ensure!(!prompt.is_empty(), "the prompt has no tokens (not even BOS); give --prompt text or use a model with a BOS token");
    let plan = exec.plan().clone();
    let max_context = plan.options.max_context;
    if prompt.len() > max_context {
        bail!(
            "the prompt is {} tokens but the plan holds at most {max_context} tokens of context; shorten the prompt or re-plan with a larger --max-context (the model allows up to {})",
            prompt.len(),
            plan.config.max_position_embeddings
        );
    }
    let vocab = plan.config.vocab_size as u32;
    if let Some(&bad) = prompt.iter().find(|&&t| t >= vocab) {
        bail!("prompt token id {bad} is outside the model's vocabulary of {vocab}");
    }
    let decode = plan.program(Phase::Decode, 1);
    let largest_prefill = plan.programs.iter().filter(|p| p.phase == Phase::Prefill).map(|p| p.bucket).max();
    ensure!(
        decode.is_some() || largest_prefill.is_some(),
        "the plan has neither a decode bucket of 1 nor a prefill bucket; re-plan with --decode-buckets 1"
    );
    let mut step = StepBlock::new(&plan);
    let set_sampling = |step: &mut StepBlock, counter: u32| -> Result<()> {
        step.set_f32(&plan, names::TEMPERATURE, &[sampling.temperature])?;
        step.set_i32(&plan, names::TOP_K, &[sampling.top_k])?;
        step.set_f32(&plan, names::TOP_P, &[sampling.top_p])?;
        step.set_u32(&plan, names::SEED, &[sampling.seed])?;
        step.set_u32(&plan, names::COUNTER, &[counter])
    };
    let read_token = |exec: &mut dyn Executor| -> Result<u32> {
        let b = exec.read_tensor(names::TOKENS, 4)?;
        let t = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        ensure!(t >= 0 && (t as u32) < vocab, "the executor sampled token {t}, outside the vocabulary");
        Ok(t as u32)
    };

    // Prefill: chunks of the largest prefill bucket (or token by token through decode.b1).
    let t0 = std::time::Instant::now();
    let mut pos = 0usize;
    let mut next = 0u32;
    let mut prefill_steps = 0;
    while pos < prompt.len() {
        let remaining = prompt.len() - pos;
        let (program, n) = match largest_prefill {
            Some(big) => {
                let n = remaining.min(big);
                (plan.bucket_for(Phase::Prefill, n).expect("a prefill bucket holds n"), n)
            }
            None => (decode.expect("checked above"), 1),
        };
        let bucket = plan.programs[program].tokens;
        let mut ids = vec![0i32; bucket];
        let mut positions = vec![-1i32; bucket];
        for i in 0..n {
            ids[i] = prompt[pos + i] as i32;
            positions[i] = (pos + i) as i32;
        }
        step.set_i32(&plan, names::TOKEN_IDS, &ids)?;
        step.set_i32(&plan, names::POSITIONS, &positions)?;
        step.set_i32(&plan, names::CACHE_BASE, &vec![0; bucket])?;
        if plan.programs[program].phase == Phase::Prefill {
            step.set_i32(&plan, names::LOGIT_ROWS, &[n as i32 - 1])?;
        }
        set_sampling(&mut step, (pos + n) as u32)?;
        exec.run(program, &step)?;
        prefill_steps += 1;
        pos += n;
        if pos == prompt.len() {
            next = read_token(exec)?;
        }
    }
    let prefill_seconds = t0.elapsed().as_secs_f64();

    let t1 = std::time::Instant::now();
    let mut out = Vec::new();
    let mut decode_steps = 0;
    let stop = loop {
        if out.len() >= max_tokens {
            break Stop::MaxTokens;
        }
        if stop_tokens.contains(&next) {
            break Stop::StopToken;
        }
        out.push(next);
        if !on_token(next) {
            break Stop::Callback;
        }
        if out.len() >= max_tokens {
            break Stop::MaxTokens;
        }
        if pos >= max_context {
            break Stop::ContextFull;
        }
        let Some(program) = decode else {
            bail!("the plan has no decode bucket of 1; re-plan with --decode-buckets 1");
        };
        step.set_i32(&plan, names::TOKEN_IDS, &[next as i32])?;
        step.set_i32(&plan, names::POSITIONS, &[pos as i32])?;
        step.set_i32(&plan, names::CACHE_BASE, &[0])?;
        set_sampling(&mut step, (pos + 1) as u32)?;
        exec.run(program, &step)?;
        decode_steps += 1;
        pos += 1;
        next = read_token(exec)?;
    };
    Ok(Generated { tokens: out, stop, prefill_steps, decode_steps, prefill_seconds, decode_seconds: t1.elapsed().as_secs_f64() })
}
