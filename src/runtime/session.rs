//! Generation over any [`Executor`]: prefill the prompt in planned buckets (chunked when it is
//! longer than the largest), then decode with on-device sampling: in bursts through the plan's
//! device loop (`loop.b1`, when planned with `--burst N`), else one token per step. Only the
//! step block changes between steps; the programs and their addresses never do.
//!
//! A burst: the host writes the step block as one-step decode would plus the loop control
//! (`[budget, 0, 0, max_context, 0]`, the budget from [`loop_budget`]: up to the burst, a
//! multiple of the loop body's copies while enough tokens are left) and the stop ids, starts the loop, and
//! hands each token to the caller as it appears in the ring; the next burst continues from the
//! last token and position. Every token, stop or not, goes through the same acceptance rule as
//! one-step decode (`Acceptor`), so both paths give the same tokens and the same stop reason.
//!
//! One sequence for now (slot 0, KV rows from 0). Batched serving comes with `kiln serve`.

use super::{Executor, StepBlock};
use crate::ir::Phase;
use crate::lower::{names, MAX_STOP_IDS};
use anyhow::{bail, ensure, Context, Result};

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

    /// Refuses values the sampling rule would silently reinterpret (`runtime::sampling`: a
    /// negative or non-finite temperature would mean greedy, a top-p outside (0, 1) or a
    /// negative top-k no cut), so that a typo is an error, not a different kind of decoding.
    pub fn check(&self) -> Result<()> {
        ensure!(
            self.temperature.is_finite() && self.temperature >= 0.0,
            "temperature {} is not allowed: use 0 for greedy decoding or a positive finite value",
            self.temperature
        );
        ensure!(self.top_k >= 0, "top-k {} is not allowed: use 0 for no top-k cut or a positive count", self.top_k);
        ensure!(
            self.top_p > 0.0 && self.top_p <= 1.0,
            "top-p {} is not allowed: it must be in (0, 1]; use 1 for no nucleus cut",
            self.top_p
        );
        Ok(())
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

/// The rule that turns sampled tokens into output, shared by one-step and burst decode:
/// checked in this order for each token, at the position it will occupy.
struct Acceptor<'a, F: FnMut(u32) -> bool> {
    out: Vec<u32>,
    max_tokens: usize,
    max_context: usize,
    stop_tokens: &'a [u32],
    on_token: F,
}

impl<F: FnMut(u32) -> bool> Acceptor<'_, F> {
    /// Takes token `t` (sampled for position `pos`); `Some` when generation ends here.
    fn accept(&mut self, t: u32, pos: usize) -> Option<Stop> {
        if self.out.len() >= self.max_tokens {
            return Some(Stop::MaxTokens);
        }
        if self.stop_tokens.contains(&t) {
            return Some(Stop::StopToken);
        }
        self.out.push(t);
        if !(self.on_token)(t) {
            return Some(Stop::Callback);
        }
        if self.out.len() >= self.max_tokens {
            return Some(Stop::MaxTokens);
        }
        if pos >= self.max_context {
            return Some(Stop::ContextFull);
        }
        None
    }
}

/// Runs one launch of device loop `program` (a `loop.b{rows}`) from `step`, whose loop control
/// the caller has set, and hands the tokens of each loop step (one per row; -1 for a padding
/// row) to `on_step` as soon as the ring shows them. Once `on_step` returns `false` it sees no
/// more steps, but the launch still runs to its own end before this returns. Returns the number
/// of loop steps the launch produced.
///
/// The host never blocks while the loop runs: it spins on the ring and asks the executor whether
/// the launch has finished (on a GPU an event query: a driver call, not a sync). It asks when
/// the tokens seen so far say the loop must be done (`LoopWatch`), and otherwise only every
/// [`LOOP_QUERY_FALLBACK`], which bounds the delay should the two ever disagree.
pub fn stream_loop(exec: &mut dyn Executor, program: usize, step: &StepBlock, mut on_step: impl FnMut(&[i32]) -> bool) -> Result<usize> {
    let plan = exec.plan();
    let p = plan.programs.get(program).with_context(|| format!("program {program} does not exist"))?;
    ensure!(p.phase == Phase::DecodeLoop, "{} is not a device loop", p.label());
    let (rows, burst) = (p.sample_rows, plan.options.burst);
    let mut watch = LoopWatch::new(plan, step, rows)?;
    let mut ring = vec![-1i32; burst * rows];
    exec.start(program, step)?;
    let mut seen = 0usize;
    let mut listening = true;
    let mut consume = |ring: &[i32], seen: &mut usize, watch: &mut LoopWatch| -> bool {
        let before = *seen;
        // With no row taking part nothing is ever written: only `finished` ends such a loop.
        while *seen < burst && watch.active.contains(&true) {
            let tokens = &ring[*seen * rows..(*seen + 1) * rows];
            if watch.active.iter().zip(tokens).any(|(&a, &t)| a && t < 0) {
                break;
            }
            watch.step(tokens);
            if listening {
                listening = on_step(tokens);
            }
            *seen += 1;
        }
        *seen > before
    };
    let mut last_query = std::time::Instant::now();
    loop {
        exec.poll_ring(&mut ring)?;
        if consume(&ring, &mut seen, &mut watch) {
            continue;
        }
        if watch.done(seen, burst) || last_query.elapsed() >= LOOP_QUERY_FALLBACK {
            last_query = std::time::Instant::now();
            if exec.finished()? {
                // Finished before this read, so the read holds every token.
                exec.poll_ring(&mut ring)?;
                consume(&ring, &mut seen, &mut watch);
                break;
            }
        }
        std::hint::spin_loop();
    }
    exec.wait()?;
    ensure!(seen > 0 || !watch.active.contains(&true), "the device loop {} produced no token", exec.plan().programs[program].label());
    Ok(seen)
}

/// The budget of the next launch of device loop `program` for `left` more steps: up to the
/// plan's burst, rounded down to a multiple of the loop's body copies
/// ([`crate::plan::ProgramPlan::loop_copies`]) when at least that many are left, so that no
/// pass runs copies past the budget; the rest (fewer than the copies) then goes in a launch of
/// its own, which runs the first copy alone per pass.
pub fn loop_budget(plan: &crate::plan::Plan, program: usize, left: usize) -> usize {
    let budget = left.min(plan.options.burst);
    let copies = plan.programs[program].loop_copies();
    if budget >= copies {
        budget - budget % copies
    } else {
        budget
    }
}

/// How often [`stream_loop`] asks whether a loop has finished when the ring does not yet say
/// it must have.
pub const LOOP_QUERY_FALLBACK: std::time::Duration = std::time::Duration::from_millis(1);

/// The host's view of `advance`'s stop rule (`Op::Advance`), replayed on the tokens read from
/// the ring: it says when the loop must be done, so the host asks the device only then.
struct LoopWatch {
    budget: usize,
    max_position: i64,
    stop_ids: Vec<i32>,
    /// Rows that take part (position >= 0); padding rows count as finished.
    active: Vec<bool>,
    positions: Vec<i64>,
    finished: Vec<bool>,
    past_end: bool,
    /// The step block set the done flag already: the loop runs nothing.
    preset_done: bool,
}

impl LoopWatch {
    fn new(plan: &crate::plan::Plan, step: &StepBlock, rows: usize) -> Result<LoopWatch> {
        let word = |name: &str, i: usize| -> Result<i32> {
            let o = plan.tensor(name).with_context(|| format!("the plan has no `{name}`"))?.offset as usize + 4 * i;
            let b = step.bytes.get(o..o + 4).with_context(|| format!("`{name}` lies outside the step block"))?;
            Ok(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        };
        let positions: Vec<i64> = (0..rows).map(|r| word(names::POSITIONS, r).map(i64::from)).collect::<Result<_>>()?;
        let active: Vec<bool> = positions.iter().map(|&p| p >= 0).collect();
        Ok(LoopWatch {
            budget: word(names::LOOP_CONTROL, 0)? as u32 as usize,
            max_position: word(names::LOOP_CONTROL, 3)? as u32 as i64,
            stop_ids: (0..MAX_STOP_IDS).map(|i| word(names::LOOP_STOP_IDS, i)).collect::<Result<_>>()?,
            finished: (0..rows).map(|r| word(names::LOOP_CONTROL, 4 + r).map(|f| f != 0 || !active[r])).collect::<Result<_>>()?,
            preset_done: word(names::LOOP_CONTROL, 2)? != 0,
            active,
            positions,
            past_end: false,
        })
    }

    /// One loop step's tokens, as `advance` saw them.
    fn step(&mut self, tokens: &[i32]) {
        for (r, &t) in tokens.iter().enumerate() {
            if !self.active[r] {
                continue;
            }
            self.positions[r] += 1;
            self.finished[r] |= self.stop_ids.iter().any(|&s| s >= 0 && s == t);
            self.past_end |= self.positions[r] >= self.max_position;
        }
    }

    /// Whether the loop must be done after `seen` steps.
    fn done(&self, seen: usize, burst: usize) -> bool {
        let no_rows = !self.active.contains(&true);
        self.preset_done
            || no_rows
            || seen >= self.budget
            || seen >= burst
            || (seen > 0 && (self.finished.iter().all(|&f| f) || self.past_end))
    }
}

/// Runs the prompt and then up to `max_tokens` new tokens. `on_token` sees each new token and
/// may return `false` to stop. Generation stops at any token in `stop_tokens`.
pub fn generate(
    exec: &mut dyn Executor,
    prompt: &[u32],
    max_tokens: usize,
    sampling: Sampling,
    stop_tokens: &[u32],
    on_token: impl FnMut(u32) -> bool,
) -> Result<Generated> {
    ensure!(!prompt.is_empty(), "the prompt has no tokens (not even BOS); give --prompt text or use a model with a BOS token");
    sampling.check()?;
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
    let burst_loop = if plan.options.burst > 0 { plan.program(Phase::DecodeLoop, 1) } else { None };
    // Refused before the prompt runs, not after its first token is out.
    ensure!(
        max_tokens <= 1 || decode.is_some() || burst_loop.is_some(),
        "the plan has no decode bucket of 1, so it cannot generate more than the prompt's first token; re-plan with --decode-buckets 1 (or a list that includes 1)"
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
    exec.trace_begin()?;

    let t1 = std::time::Instant::now();
    let mut stop_ids = vec![-1i32; MAX_STOP_IDS];
    for (slot, &t) in stop_ids.iter_mut().zip(stop_tokens) {
        // More stop tokens than slots: the loop runs past the others and the host stops there.
        *slot = t as i32;
    }
    let mut acceptor = Acceptor { out: Vec::new(), max_tokens, max_context, stop_tokens, on_token };
    let mut decode_steps = 0;
    let mut stop = acceptor.accept(next, pos);
    while stop.is_none() {
        step.set_i32(&plan, names::TOKEN_IDS, &[next as i32])?;
        step.set_i32(&plan, names::POSITIONS, &[pos as i32])?;
        step.set_i32(&plan, names::CACHE_BASE, &[0])?;
        set_sampling(&mut step, (pos + 1) as u32)?;
        if let Some(program) = burst_loop {
            let budget = loop_budget(&plan, program, max_tokens - acceptor.out.len());
            step.set_u32(&plan, names::LOOP_CONTROL, &[budget as u32, 0, 0, max_context as u32, 0])?;
            step.set_i32(&plan, names::LOOP_STOP_IDS, &stop_ids)?;
            let mut bad = None;
            let produced = stream_loop(exec, program, &step, |tokens| {
                let t = tokens[0];
                if t < 0 || t as u32 >= vocab {
                    bad = Some(t);
                    return false;
                }
                next = t as u32;
                pos += 1;
                stop = acceptor.accept(next, pos);
                stop.is_none()
            })?;
            if let Some(t) = bad {
                bail!("the device loop sampled token {t}, outside the vocabulary");
            }
            decode_steps += produced;
            continue;
        }
        let Some(program) = decode else {
            bail!("the plan has no decode bucket of 1; re-plan with --decode-buckets 1");
        };
        exec.run(program, &step)?;
        decode_steps += 1;
        pos += 1;
        next = read_token(exec)?;
        stop = acceptor.accept(next, pos);
    }
    let stop = stop.expect("the loop ends with a stop reason");
    let decode_seconds = t1.elapsed().as_secs_f64();
    exec.trace_end()?;
    let out = acceptor.out;
    Ok(Generated { tokens: out, stop, prefill_steps, decode_steps, prefill_seconds, decode_seconds })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::DType;
    use crate::plan::{build_plan, PlanOptions};

    /// The host's replay of `advance`'s stop rule says "done" exactly where the CPU loop stops.
    #[test]
    fn loop_watch_predicts_where_the_loop_stops() {
        let cfg = crate::gate::random_config("llama").unwrap();
        let opts = PlanOptions {
            decode_buckets: vec![2],
            prefill_buckets: vec![],
            max_context: 64,
            dtype: DType::F32,
            memory_budget: None,
            burst: 8,
            fuse: false,
        };
        let plan = build_plan(&cfg, &opts).unwrap();
        let watch = |pos: [i32; 2], budget: u32, stops: &[i32]| {
            let mut step = StepBlock::new(&plan);
            step.set_i32(&plan, names::POSITIONS, &pos).unwrap();
            step.set_u32(&plan, names::LOOP_CONTROL, &[budget, 0, 0, 64, 0, 0]).unwrap();
            let mut ids = vec![-1; MAX_STOP_IDS];
            ids[..stops.len()].copy_from_slice(stops);
            step.set_i32(&plan, names::LOOP_STOP_IDS, &ids).unwrap();
            LoopWatch::new(&plan, &step, 2).unwrap()
        };
        // Budget and ring length.
        let w = watch([0, 0], 3, &[]);
        assert!(!w.done(2, 8) && w.done(3, 8) && w.done(8, 8));
        assert!(watch([0, 0], 0, &[]).done(0, 8));
        // A stop token finishes its row; the loop is done when every row has finished.
        let mut w = watch([0, 0], 8, &[7]);
        w.step(&[7, 1]);
        assert!(!w.done(1, 8));
        w.step(&[2, 7]);
        assert!(w.done(2, 8));
        // A padding row counts as finished; the context end stops every row.
        let mut w = watch([5, -1], 8, &[7]);
        w.step(&[7, -1]);
        assert!(w.done(1, 8));
        let mut w = watch([62, 3], 8, &[]);
        w.step(&[1, 1]);
        assert!(!w.done(1, 8));
        w.step(&[1, 1]);
        assert!(w.done(2, 8));
    }
}
