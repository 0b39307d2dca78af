//! `kiln run`: load a model, plan it (or load a plan file; on a GPU within its free memory), pick an
//! executor, stream text.

use super::plan_cmd::PlanArgs;
use crate::model::LoadedModel;
use crate::plan::{build_plan, file, Plan};
use crate::runtime::cpu::CpuExecutor;
use crate::runtime::session::{generate, Sampling, Stop};
use crate::runtime::Executor;
use anyhow::{bail, Context, Result};
use clap::Args;
use std::io::Write;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct RunCmd {
    /// Model: .gguf, llama2.c .bin (tokenizer next to it or --tokenizer), or a Hugging Face
    /// directory. Default: the bundled stories260K.
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Tokenizer file for llama2.c checkpoints (tok512.bin style).
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// A plan file from `kiln plan` (must match the model); otherwise the model is planned now.
    #[arg(long)]
    pub plan: Option<PathBuf>,
    /// Prompt text (a BOS token is prepended when the model has one).
    #[arg(long, default_value = "")]
    pub prompt: String,
    /// Prompt as comma-separated token ids instead of text (models without a tokenizer, such
    /// as `kiln synth` directories, print token ids).
    #[arg(long, conflicts_with = "prompt")]
    pub prompt_ids: Option<String>,
    /// Most new tokens to generate.
    #[arg(long, default_value_t = 256)]
    pub max_tokens: usize,
    /// 0 = greedy; otherwise a positive finite value.
    #[arg(long, default_value_t = 0.8)]
    pub temperature: f32,
    /// Keep only the K most likely tokens (0 = off).
    #[arg(long, default_value_t = 0)]
    pub top_k: i32,
    /// Nucleus sampling mass, in (0, 1] (1 = off).
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    /// Sampling seed; the same seed gives the same text [default: from the clock].
    #[arg(long)]
    pub seed: Option<u32>,
    /// cpu, cuda, cuda-eager, or auto (cuda when a GPU is present).
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// Print timing and executor counters to stderr at the end.
    #[arg(long)]
    pub stats: bool,
    #[command(flatten)]
    pub plan_args: PlanArgs,
}

pub fn open_model(model: Option<&PathBuf>, tokenizer: Option<&PathBuf>) -> Result<LoadedModel> {
    match model {
        Some(p) => crate::model::open(p, tokenizer.map(|t| t.as_path())),
        None => crate::bundled::open_default(),
    }
}

/// Device memory a plan built for a GPU leaves free beside itself, for what the driver allocates
/// at load outside the plan (kernel modules, instantiated graphs, library handles).
pub const GPU_HEADROOM: u64 = 512 << 20;

/// The plan for `m`: loaded from `plan_path` (checked against the model) or built now. A plan
/// built now for a GPU with `gpu_free` bytes free (and no `--memory-budget`) is planned within
/// them less [`GPU_HEADROOM`]: the tile-packed second copy of the GEMV weights is left out when
/// it would not fit (`plan::build_plan`), and a model too large for the GPU fails here, before
/// anything is allocated, with the error saying so.
pub fn plan_for(
    m: &LoadedModel,
    plan_path: Option<&PathBuf>,
    args: &PlanArgs,
    default_decode: &str,
    gpu_free: Option<u64>,
) -> Result<Plan> {
    if let Some(p) = plan_path {
        let plan = file::load(p)?;
        file::check_model(&plan, &m.config, &m.source)?;
        return Ok(plan);
    }
    let src_dtype = m.weights.tensor("token_embd.weight").ok().map(|t| t.dtype);
    let mut args = args.clone();
    if args.decode_buckets.is_none() {
        args.decode_buckets = Some(default_decode.to_string());
    }
    let mut opts = args.options(&m.config, src_dtype)?;
    match gpu_free {
        Some(free) if opts.memory_budget.is_none() => {
            opts.memory_budget = Some(free.saturating_sub(GPU_HEADROOM));
            build_plan(&m.config, &opts).with_context(|| {
                format!(
                    "planning within the GPU's {} of free memory (less {} for the driver; --memory-budget sets another limit)",
                    crate::plan::planner::fmt_bytes(free),
                    crate::plan::planner::fmt_bytes(GPU_HEADROOM)
                )
            })
        }
        _ => build_plan(&m.config, &opts),
    }
}

/// `auto` as the executor it picks: `cuda` when a GPU is present, else `cpu`.
pub fn resolve_device(device: &str) -> &str {
    if device == "auto" {
        if crate::runtime::cuda::cuda_available().is_ok() {
            "cuda"
        } else {
            "cpu"
        }
    } else {
        device
    }
}

pub fn make_executor(device: &str, plan: Plan, m: &LoadedModel) -> Result<Box<dyn Executor>> {
    let device = resolve_device(device);
    Ok(match device {
        "cpu" => Box::new(CpuExecutor::new(plan, m.weights.as_ref())?),
        "cuda" | "cuda-graph" => {
            Box::new(crate::runtime::cuda::CudaExecutor::load(plan, m.weights.as_ref(), crate::runtime::cuda::Mode::Graph)?)
        }
        "cuda-eager" => Box::new(crate::runtime::cuda::CudaExecutor::load(plan, m.weights.as_ref(), crate::runtime::cuda::Mode::Eager)?),
        other => bail!("unknown --device `{other}`: use cpu, cuda, cuda-eager or auto"),
    })
}

pub fn run_main(cmd: &RunCmd) -> Result<()> {
    let m = open_model(cmd.model.as_ref(), cmd.tokenizer.as_ref())?;
    let tok = m.tokenizer.as_deref();
    let device = resolve_device(&cmd.device);
    let gpu_free = match device {
        "cuda" | "cuda-graph" | "cuda-eager" if cmd.plan.is_none() && cmd.plan_args.memory_budget.is_none() => {
            Some(crate::runtime::cuda::free_memory()?)
        }
        _ => None,
    };
    let plan = plan_for(&m, cmd.plan.as_ref(), &cmd.plan_args, "1", gpu_free)?;
    let prompt: Vec<u32> = match (&cmd.prompt_ids, tok) {
        (Some(ids), _) => ids
            .split(',')
            .map(|s| s.trim().parse::<u32>().with_context(|| format!("--prompt-ids: `{s}` is not a token id")))
            .collect::<Result<_>>()?,
        (None, Some(tok)) => tok.encode(&cmd.prompt, true).context("tokenizing the prompt")?,
        (None, None) => match m.config.bos_token_id {
            Some(bos) if cmd.prompt.is_empty() => vec![bos],
            _ => bail!(
                "{} has no tokenizer, so --prompt text cannot be encoded; give --prompt-ids 1,2,3 (or --tokenizer for llama2.c models)",
                m.source
            ),
        },
    };
    if prompt.len() > plan.options.max_context {
        bail!(
            "the prompt is {} tokens but the plan's context holds {}; shorten the prompt or plan with a larger --max-context (this model allows {})",
            prompt.len(),
            plan.options.max_context,
            plan.config.max_position_embeddings
        );
    }
    let seed = cmd.seed.unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos() ^ d.as_secs() as u32).unwrap_or(0)
    });
    let sampling = Sampling { temperature: cmd.temperature, top_k: cmd.top_k, top_p: cmd.top_p, seed };
    // Before the executor loads (seconds on a GPU): a bad value fails at once.
    sampling.check().context("check --temperature, --top-k and --top-p")?;
    let t_load = std::time::Instant::now();
    let mut exec = make_executor(device, plan, &m)?;
    let load_secs = t_load.elapsed().as_secs_f64();
    let mut stop_tokens: Vec<u32> = m.config.eos_token_ids.clone();
    if let Some(tok) = tok {
        stop_tokens.extend(tok.eos());
        stop_tokens.extend(tok.bos());
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    // Echo the prompt as the model sees it (token ids when there is no tokenizer).
    let piece = |prev: Option<u32>, t: u32| -> Vec<u8> {
        match tok {
            Some(tok) => tok.decode_piece(prev, t),
            None => format!("{t} ").into_bytes(),
        }
    };
    // A closed stdout (`kiln run | head`) ends generation quietly; other write errors are errors.
    let mut write_err: Option<std::io::Error> = None;
    let mut prev: Option<u32> = None;
    for &t in &prompt {
        if tok.is_none() || Some(t) != tok.and_then(|k| k.bos()) {
            if let Err(e) = out.write_all(&piece(prev, t)) {
                write_err.get_or_insert(e);
            }
        }
        prev = Some(t);
    }
    if write_err.is_some() {
        return super::finish_write(write_err);
    }
    let g = generate(exec.as_mut(), &prompt, cmd.max_tokens, sampling, &stop_tokens, |t| {
        let bytes = piece(prev, t);
        prev = Some(t);
        if let Err(e) = out.write_all(&bytes).and_then(|_| out.flush()) {
            write_err = Some(e);
            return false;
        }
        true
    })?;
    if write_err.is_none() {
        if let Err(e) = writeln!(out).and_then(|_| out.flush()) {
            write_err = Some(e);
        }
    }
    super::finish_write(write_err)?;
    if cmd.stats {
        let p = exec.plan();
        eprintln!(
            "[kiln] model {} | executor {} | dtype {} | load {:.2}s | prompt {} tokens in {} step(s), {:.1} ms | {} tokens in {} decode steps, {:.1} tok/s | stop: {}",
            m.source,
            exec.name(),
            p.options.dtype,
            load_secs,
            prompt.len(),
            g.prefill_steps,
            g.prefill_seconds * 1e3,
            g.tokens.len(),
            g.decode_steps,
            if g.decode_seconds > 0.0 { g.decode_steps as f64 / g.decode_seconds } else { 0.0 },
            match g.stop {
                Stop::StopToken => "stop token",
                Stop::MaxTokens => "max tokens",
                Stop::ContextFull => "context full",
                Stop::Callback => "output closed",
            }
        );
        if let Some(s) = exec.stats() {
            eprintln!("{s}");
        }
    } else if g.stop == Stop::ContextFull {
        eprintln!("[kiln] stopped: the plan's context of {} tokens is full", exec.plan().options.max_context);
    }
    Ok(())
}
