//! Timed runs over any [`Executor`]: prefill sequences into their KV slots, then decode a batch
//! of them together; or time a prefill alone (time to first token). The step blocks follow the
//! field names of `lower::names`: sequence `s` of a batch owns KV rows from
//! `s x max_context`, and every sequence has its own positions.
//!
//! Owns: the timing loops and what they count. Never: decides a plan or touches a device
//! directly (the executor does), so the loops are tested on the CPU executor.

use crate::ir::Phase;
use crate::lower::names;
use crate::plan::Plan;
use crate::runtime::cpu::CpuExecutor;
use crate::runtime::cuda::counters::Snapshot;
use crate::runtime::cuda::CudaExecutor;
use crate::runtime::session::{loop_budget, stream_loop};
use crate::runtime::{Executor, StepBlock};
use anyhow::{ensure, Context, Result};
use std::time::Instant;

/// Executor counters, where the executor keeps them (CUDA), to report launches and host syncs
/// per step.
pub trait Probe {
    fn probe(&self) -> Option<Snapshot>;
}

impl Probe for CudaExecutor {
    fn probe(&self) -> Option<Snapshot> {
        Some(self.counters())
    }
}

impl Probe for CpuExecutor {
    fn probe(&self) -> Option<Snapshot> {
        None
    }
}

/// Greedy sampling for `rows` rows.
fn set_greedy(step: &mut StepBlock, plan: &Plan, rows: usize, counter: u32) -> Result<()> {
    step.set_f32(plan, names::TEMPERATURE, &vec![0.0; rows])?;
    step.set_i32(plan, names::TOP_K, &vec![0; rows])?;
    step.set_f32(plan, names::TOP_P, &vec![1.0; rows])?;
    step.set_u32(plan, names::SEED, &vec![0; rows])?;
    step.set_u32(plan, names::COUNTER, &vec![counter; rows])
}

fn read_tokens(exec: &mut dyn Executor, rows: usize) -> Result<Vec<u32>> {
    let vocab = exec.plan().config.vocab_size;
    let bytes = exec.read_tensor(names::TOKENS, rows * 4)?;
    bytes
        .chunks_exact(4)
        .map(|b| {
            let t = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            ensure!(t >= 0 && (t as usize) < vocab, "the executor sampled token {t}, outside the vocabulary of {vocab}");
            Ok(t as u32)
        })
        .collect()
}

/// Prefills `prompt` into the KV slot of sequence `seq` in chunks of the largest prefill bucket
/// (the last chunk in the smallest bucket that holds it), as `session::generate` does; returns
/// the greedy token after the prompt.
fn prefill(exec: &mut dyn Executor, plan: &Plan, prompt: &[u32], seq: usize) -> Result<u32> {
    ensure!(!prompt.is_empty(), "an empty prompt has nothing to prefill");
    let largest = plan
        .programs
        .iter()
        .filter(|p| p.phase == Phase::Prefill)
        .map(|p| p.bucket)
        .max()
        .context("the plan has no prefill bucket; plan with --prefill-buckets")?;
    let base = (seq * plan.options.max_context) as i32;
    let mut next = 0;
    for (k, part) in prompt.chunks(largest).enumerate() {
        let program = plan.bucket_for(Phase::Prefill, part.len()).expect("the largest bucket holds every chunk");
        let bucket = plan.programs[program].tokens;
        let start = k * largest;
        let mut ids = vec![0i32; bucket];
        let mut positions = vec![-1i32; bucket];
        for (i, &t) in part.iter().enumerate() {
            ids[i] = t as i32;
            positions[i] = (start + i) as i32;
        }
        let mut step = StepBlock::new(plan);
        step.set_i32(plan, names::TOKEN_IDS, &ids)?;
        step.set_i32(plan, names::POSITIONS, &positions)?;
        step.set_i32(plan, names::CACHE_BASE, &vec![base; bucket])?;
        step.set_i32(plan, names::LOGIT_ROWS, &[part.len() as i32 - 1])?;
        set_greedy(&mut step, plan, 1, (start + part.len()) as u32)?;
        exec.run(program, &step)?;
        next = read_tokens(exec, 1)?[0];
    }
    Ok(next)
}

/// One decode measurement: `repeats` timed runs of `new_tokens - 1` batched decode steps.
#[derive(Clone, Debug, Default)]
pub struct DecodeRun {
    /// Seconds of each timed run (decode steps only).
    pub seconds: Vec<f64>,
    /// Decode steps per run (`new_tokens - 1`: the prefill yields the first token).
    pub steps: usize,
    /// The `new_tokens` greedy tokens of sequence 0 (the same in every run).
    pub tokens: Vec<u32>,
    /// Executor counters over the timed runs, per decode step (CUDA only).
    pub per_step: Option<PerStep>,
}

/// Counters divided by decode steps.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PerStep {
    pub graph_launches: f64,
    pub kernel_launches: f64,
    pub host_syncs: f64,
    pub uploads: f64,
    pub downloads: f64,
}

impl PerStep {
    fn between(before: &Snapshot, after: &Snapshot, steps: usize) -> PerStep {
        let per = |a: u64, b: u64| (b - a) as f64 / steps.max(1) as f64;
        PerStep {
            graph_launches: per(before.graph_launches, after.graph_launches),
            kernel_launches: per(before.kernel_launches, after.kernel_launches),
            host_syncs: per(before.host_syncs, after.host_syncs),
            uploads: per(before.uploads_pinned + before.uploads_pageable, after.uploads_pinned + after.uploads_pageable),
            downloads: per(before.downloads, after.downloads),
        }
    }
}

/// Prefills each of `prompts` (one per sequence, all the same length) into its own KV slot, then
/// decodes all of them together with the decode program of bucket `prompts.len()`: one warm-up
/// run and `repeats` timed runs, each of `new_tokens - 1` steps from the same starting state
/// (each run rewrites the KV rows it reads, so every run computes the same tokens). When the
/// plan has a device loop for the bucket (`loop.b{B}`, plan burst > 0), the steps run in
/// bursts of up to `burst` tokens per launch, tokens streamed through the ring
/// ([`stream_loop`]) exactly as `kiln run` does; otherwise one launch per step.
pub fn time_decode<E: Executor + Probe>(exec: &mut E, prompts: &[Vec<u32>], new_tokens: usize, repeats: usize) -> Result<DecodeRun> {
    let plan = exec.plan().clone();
    let batch = prompts.len();
    ensure!(batch > 0, "no sequences to decode");
    ensure!(new_tokens >= 2, "--new-tokens must be at least 2 (the first token comes from the prefill)");
    let context = prompts[0].len();
    ensure!(prompts.iter().all(|p| p.len() == context), "every sequence of a batch must have the same prompt length");
    ensure!(
        context + new_tokens <= plan.options.max_context,
        "a {context}-token prompt and {new_tokens} new tokens do not fit the plan's context of {}",
        plan.options.max_context
    );
    let program = plan.program(Phase::Decode, batch).with_context(|| format!("the plan has no decode bucket of {batch}"))?;
    let looped = if plan.options.burst > 0 { plan.program(Phase::DecodeLoop, batch) } else { None };
    let mut first = Vec::with_capacity(batch);
    for (seq, prompt) in prompts.iter().enumerate() {
        first.push(prefill(exec, &plan, prompt, seq)?);
    }
    let bases: Vec<i32> = (0..batch).map(|s| (s * plan.options.max_context) as i32).collect();
    let mut step = StepBlock::new(&plan);
    step.set_i32(&plan, names::CACHE_BASE, &bases)?;
    let steps = new_tokens - 1;
    let mut run = DecodeRun { steps, ..DecodeRun::default() };
    let mut before = None;
    for r in 0..=repeats {
        if r == 1 {
            before = exec.probe();
        }
        let mut tokens = first.clone();
        let mut seq0 = vec![tokens[0]];
        let t0 = Instant::now();
        // One launch per step, or one per burst of up to `burst` steps through the device loop
        // (a multiple of its body's copies where it can be: `session::loop_budget`).
        let mut done = 0usize;
        while done < steps {
            // Step j feeds token j + 1 of each sequence at position context + j.
            let n = match looped {
                Some(lp) => loop_budget(&plan, lp, steps - done),
                None => 1,
            };
            let pos = (context + done) as i32;
            step.set_i32(&plan, names::TOKEN_IDS, &tokens.iter().map(|&t| t as i32).collect::<Vec<_>>())?;
            step.set_i32(&plan, names::POSITIONS, &vec![pos; batch])?;
            set_greedy(&mut step, &plan, batch, pos as u32 + 1)?;
            match looped {
                Some(lp) => {
                    let mut control = vec![n as u32, 0, 0, plan.options.max_context as u32];
                    control.extend(std::iter::repeat_n(0u32, batch));
                    step.set_u32(&plan, names::LOOP_CONTROL, &control)?;
                    step.set_i32(&plan, names::LOOP_STOP_IDS, &[-1; crate::lower::MAX_STOP_IDS])?;
                    let mut got = 0usize;
                    stream_loop(exec, lp, &step, |t| {
                        tokens = t.iter().map(|&x| x as u32).collect();
                        seq0.push(tokens[0]);
                        got += 1;
                        true
                    })?;
                    ensure!(got == n, "the device loop made {got} of {n} tokens");
                }
                None => {
                    exec.run(program, &step)?;
                    tokens = read_tokens(exec, batch)?;
                    seq0.push(tokens[0]);
                }
            }
            done += n;
        }
        let secs = t0.elapsed().as_secs_f64();
        if r == 0 {
            run.tokens = seq0;
        } else {
            ensure!(seq0 == run.tokens, "decode run {r} made different tokens from the warm-up (greedy decode must repeat exactly)");
            run.seconds.push(secs);
        }
    }
    if let (Some(b), Some(a)) = (before, exec.probe()) {
        run.per_step = Some(PerStep::between(&b, &a, steps * repeats));
    }
    Ok(run)
}

/// Time to first token: `repeats` timed prefills of `prompt` (after one warm-up), each from the
/// step blocks to the sampled token on the host.
#[derive(Clone, Debug, Default)]
pub struct PrefillRun {
    pub seconds: Vec<f64>,
    pub first_token: u32,
    /// Prefill launches (chunks) per prompt.
    pub chunks: usize,
}

pub fn time_prefill(exec: &mut dyn Executor, prompt: &[u32], repeats: usize) -> Result<PrefillRun> {
    let plan = exec.plan().clone();
    ensure!(prompt.len() <= plan.options.max_context, "a {}-token prompt does not fit the plan's context", prompt.len());
    let largest = plan.programs.iter().filter(|p| p.phase == Phase::Prefill).map(|p| p.bucket).max().unwrap_or(1);
    let mut run = PrefillRun { chunks: prompt.len().div_ceil(largest), ..PrefillRun::default() };
    for r in 0..=repeats {
        let t0 = Instant::now();
        let token = prefill(exec, &plan, prompt, 0)?;
        let secs = t0.elapsed().as_secs_f64();
        if r == 0 {
            run.first_token = token;
        } else {
            ensure!(token == run.first_token, "prefill run {r} sampled a different first token");
            run.seconds.push(secs);
        }
    }
    Ok(run)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::DType;
    use crate::plan::{build_plan, PlanOptions};
    use crate::runtime::session::{generate, Sampling};
    use crate::synth::MemWeights;

    fn cpu(decode: Vec<usize>, prefill: Vec<usize>, max_context: usize) -> (CpuExecutor, MemWeights) {
        cpu_burst(decode, prefill, max_context, 0)
    }

    fn cpu_burst(decode: Vec<usize>, prefill: Vec<usize>, max_context: usize, burst: usize) -> (CpuExecutor, MemWeights) {
        let cfg = crate::gate::random_config("qwen2").unwrap();
        let weights = MemWeights::random(&cfg, 3, crate::model::SrcDType::F32);
        let opts = PlanOptions {
            decode_buckets: decode,
            prefill_buckets: prefill,
            max_context,
            dtype: DType::F32,
            memory_budget: None,
            burst,
            fuse: false,
        };
        let plan = build_plan(&cfg, &opts).unwrap();
        (CpuExecutor::new(plan, &weights).unwrap(), weights)
    }

    fn prompt(seed: u64, n: usize) -> Vec<u32> {
        (0..n as u64).map(|i| (crate::runtime::sampling::splitmix64(seed * 1000 + i) % 384) as u32).collect()
    }

    #[test]
    fn batch_1_decode_makes_the_tokens_of_the_generation_loop() {
        let (mut exec, _w) = cpu(vec![1], vec![8], 48);
        let p = prompt(1, 20); // three chunks of the 8-token bucket
        let run = time_decode(&mut exec, std::slice::from_ref(&p), 12, 2).unwrap();
        assert_eq!((run.seconds.len(), run.steps, run.tokens.len()), (2, 11, 12));
        let g = generate(&mut exec, &p, 12, Sampling::greedy(), &[], |_| true).unwrap();
        assert_eq!(run.tokens, g.tokens);
    }

    #[test]
    fn each_sequence_of_a_batch_decodes_as_it_would_alone() {
        let (mut exec, _w) = cpu(vec![1, 4], vec![8], 32);
        let prompts: Vec<Vec<u32>> = (0..4).map(|s| prompt(10 + s, 9)).collect();
        let batched = time_decode(&mut exec, &prompts, 8, 1).unwrap();
        // Sequence 0 of the batch is compared; the others must not disturb it, and each alone
        // matches the generation loop (their slots differ, their tokens need not).
        let alone = time_decode(&mut exec, &prompts[..1], 8, 1).unwrap();
        assert_eq!(batched.tokens, alone.tokens);
        for p in &prompts[1..] {
            let g = generate(&mut exec, p, 8, Sampling::greedy(), &[], |_| true).unwrap();
            // A batch whose sequence 0 is `p` makes `p`'s tokens.
            let mut order = vec![p.clone()];
            order.extend(prompts.iter().filter(|q| *q != p).cloned());
            assert_eq!(time_decode(&mut exec, &order, 8, 1).unwrap().tokens, g.tokens);
        }
        assert!(time_decode(&mut exec, &prompts[..3], 8, 1).is_err(), "no decode bucket of 3");
    }

    #[test]
    fn device_loop_bursts_make_the_tokens_of_one_step_decode() {
        let prompts: Vec<Vec<u32>> = (0..2).map(|s| prompt(20 + s, 9)).collect();
        let (mut one, _w) = cpu(vec![2], vec![8], 48);
        // Bursts of 5: 11 steps take two full bursts and a partial one.
        let (mut looped, _w2) = cpu_burst(vec![2], vec![8], 48, 5);
        let a = time_decode(&mut one, &prompts, 12, 1).unwrap();
        let b = time_decode(&mut looped, &prompts, 12, 1).unwrap();
        assert_eq!(a.tokens, b.tokens);
        assert_eq!(b.tokens.len(), 12);
    }

    #[test]
    fn prefill_timing_samples_the_first_generated_token() {
        let (mut exec, _w) = cpu(vec![1], vec![4, 16], 32);
        let p = prompt(7, 16);
        let run = time_prefill(&mut exec, &p, 3).unwrap();
        assert_eq!((run.seconds.len(), run.chunks), (3, 1));
        let g = generate(&mut exec, &p, 1, Sampling::greedy(), &[], |_| true).unwrap();
        assert_eq!(run.first_token, g.tokens[0]);
    }
}
