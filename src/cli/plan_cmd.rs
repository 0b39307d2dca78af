//! `kiln plan` and `kiln inspect`.

use super::{parse_buckets, parse_bytes, resolve_dtype};
use crate::model::ModelConfig;
use crate::plan::{build_plan, dump, file, PlanOptions};
use anyhow::{bail, Context, Result};
use clap::Args;
use std::path::{Path, PathBuf};

/// `--prefill-buckets` when not given.
pub const DEFAULT_PREFILL_BUCKETS: &str = "16,64,256";

/// Options that shape a plan; shared by `kiln plan` and `kiln run`.
#[derive(Args, Debug, Clone)]
pub struct PlanArgs {
    /// Decode batch buckets (sequences stepped together), comma-separated
    /// [default: 1,2,4,8 for `plan`, 1 for `run`].
    #[arg(long)]
    pub decode_buckets: Option<String>,
    /// Prefill token buckets, comma-separated; longer prompts are chunked [default: 16,64,256,
    /// without those larger than the max context].
    #[arg(long)]
    pub prefill_buckets: Option<String>,
    /// Tokens of context per sequence [default: the model's, capped at 4096].
    #[arg(long)]
    pub max_context: Option<usize>,
    /// Storage dtype: f32, f16, bf16, or auto (the model file's float type; bf16 for --config).
    #[arg(long, default_value = "auto")]
    pub dtype: String,
    /// Fail if the plan needs more device memory than this (e.g. 24GiB); a plan over it leaves
    /// out the tile-packed copy of the GEMV weights first [default: none; `kiln run` on a GPU:
    /// the GPU's free memory less 512 MiB].
    #[arg(long)]
    pub memory_budget: Option<String>,
    /// Tokens per row one device-loop launch may generate (0: no device loops; decode then
    /// takes one launch per token). Each pass of a loop runs its body's copies: 2 steps, or
    /// KILN_LOOP_UNROLL=<n> (1-16) at plan time.
    #[arg(long, default_value_t = 64)]
    pub burst: usize,
    /// Run the fusion pass (norms folded into the linears after them, gated MLP, residual
    /// epilogues, packed Q/K/V, RoPE with the KV write, in decode inside the Q/K/V projection, and
    /// in one-row bf16 decode at head_dim 64 (Qwen2.5-0.5B) inside the attention; a one-row device
    /// loop's sampler and advance in one launch, its greedy argmax carried by the logits GEMV):
    /// fewer launches; on the CPU reference the same results bit for bit, but that a folded
    /// norm over bf16 / f32 activations is applied after the dot product (within rounding;
    /// `ir::NormOrder`); checked in `kiln gate`. The H200 numbers in bench/results are measured
    /// with fused plans.
    #[arg(long)]
    pub fuse: bool,
}

impl PlanArgs {
    pub fn options(&self, cfg: &ModelConfig, source_dtype: Option<crate::model::SrcDType>) -> Result<PlanOptions> {
        let max_context = self.max_context.unwrap_or(cfg.max_position_embeddings.min(4096));
        let prefill = match &self.prefill_buckets {
            Some(given) => parse_buckets(given)?,
            // Default buckets larger than the context are dropped, not an error; buckets the user
            // gave are kept, and the planner refuses one that no prompt could fill.
            None => parse_buckets(DEFAULT_PREFILL_BUCKETS)?.into_iter().filter(|&b| b <= max_context).collect(),
        };
        Ok(PlanOptions {
            decode_buckets: parse_buckets(self.decode_buckets.as_deref().unwrap_or("1,2,4,8"))?,
            prefill_buckets: prefill,
            max_context,
            dtype: resolve_dtype(&self.dtype, source_dtype)?,
            memory_budget: self.memory_budget.as_deref().map(parse_bytes).transpose()?,
            burst: self.burst,
            fuse: self.fuse,
        })
    }
}

#[derive(Args, Debug)]
pub struct PlanCmd {
    /// A model: .gguf file, llama2.c .bin, or Hugging Face directory (weights are not read).
    #[arg(long, conflicts_with_all = ["config", "shape"])]
    pub model: Option<PathBuf>,
    /// A Hugging Face config.json (plans need no weights).
    #[arg(long, conflicts_with = "shape")]
    pub config: Option<PathBuf>,
    /// A known model shape: llama3.2-1b, llama3.1-8b, qwen2.5-0.5b, qwen3-0.6b.
    #[arg(long)]
    pub shape: Option<String>,
    #[command(flatten)]
    pub plan: PlanArgs,
    /// Output plan file; the canonical dump goes next to it as NAME.plan.txt.
    #[arg(short = 'o', long, default_value = "model.plan")]
    pub output: PathBuf,
}

pub fn plan_main(cmd: &PlanCmd) -> Result<()> {
    let (cfg, src_dtype, what) = if let Some(path) = &cmd.config {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read config file `{}`", path.display()))?;
        let cfg = ModelConfig::from_hf_json(&text).with_context(|| format!("in `{}`", path.display()))?;
        (cfg, None, path.display().to_string())
    } else if let Some(shape) = &cmd.shape {
        (ModelConfig::preset(shape)?, None, format!("shape {shape}"))
    } else if let Some(path) = &cmd.model {
        let m = crate::model::open(path, None)?;
        let dt = m.weights.tensor("token_embd.weight").ok().map(|t| t.dtype);
        (m.config, dt, m.source)
    } else {
        bail!("say what to plan: --model PATH, --config config.json, or --shape NAME");
    };
    let opts = cmd.plan.options(&cfg, src_dtype)?;
    let t = std::time::Instant::now();
    let plan = build_plan(&cfg, &opts)?;
    let secs = t.elapsed().as_secs_f64();
    write_plan(&plan, &cmd.output)?;
    print!("{}", dump::summary(&plan));
    println!("planned {what} in {:.1} ms; plan checker passed", secs * 1e3);
    println!("wrote {} and {}", cmd.output.display(), dump_path(&cmd.output).display());
    Ok(())
}

pub fn dump_path(plan_path: &Path) -> PathBuf {
    let mut s = plan_path.as_os_str().to_owned();
    s.push(".txt");
    PathBuf::from(s)
}

pub fn write_plan(plan: &crate::plan::Plan, path: &Path) -> Result<()> {
    file::save(plan, path)?;
    std::fs::write(dump_path(path), dump::dump(plan)).with_context(|| format!("writing {}", dump_path(path).display()))
}

#[derive(Args, Debug)]
pub struct InspectCmd {
    /// A plan file written by `kiln plan`.
    pub plan: PathBuf,
    /// Print only the summary, not every launch.
    #[arg(long)]
    pub summary: bool,
}

pub fn inspect_main(cmd: &InspectCmd) -> Result<()> {
    let plan = file::load(&cmd.plan)?;
    super::print_out(&if cmd.summary { dump::summary(&plan) } else { dump::dump(&plan) })
}
