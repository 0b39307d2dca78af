//! `kiln bench`: how fast kiln decodes and prefills on this GPU, against the two numbers that
//! bound it and the engine most people would use instead, all measured in one run.
//!
//! 1. The GPU's read bandwidth, with kiln's own probe kernel (`kernels/bench_read.cu`).
//! 2. Bytes read per decode token, from the plan's launch records (weights once, the embedding
//!    gather's rows, KV at the live length): the roofline is bandwidth / bytes per token.
//! 3. kiln decode: medians of `--repeats` greedy runs of `--new-tokens` after a `--prompt`-token
//!    prompt, decode steps only, on the CUDA graph executor; per batch bucket and per context.
//! 4. PyTorch/transformers on the same Hugging Face directory and prompts
//!    (`scripts/bench_torch.py`): eager with a static cache, and torch.compile
//!    (reduce-overhead) with a static cache.
//! 5. `--prefill`: time to first token and prefill tok/s per prompt size, kiln and torch, and
//!    the fraction of the bf16 tensor-core rate torch measures with an 8192^3 matmul.
//!
//! Writes `--out NAME`: NAME.json (all numbers, see `report`), NAME.md (provenance + tables),
//! NAME.svg and, where matplotlib is installed, NAME.png (`scripts/bench_chart.py`). Prints the
//! tables last.
//!
//! Owns: the bench's orchestration and its outputs. Never: changes a plan or an executor to
//! make a number look better; a failed measurement is reported as an error, not dropped.

pub mod gpu;
pub mod report;
pub mod runner;
pub mod torch;
pub mod traffic;

use crate::ir::Phase;
use crate::model::ModelConfig;
use crate::plan::{build_plan, Plan, PlanOptions, RegionKind};
use crate::runtime::cpu::CpuExecutor;
use crate::runtime::cuda::{CudaExecutor, Mode};
use crate::runtime::sampling::splitmix64;
use crate::runtime::Executor;
use anyhow::{ensure, Context, Result};
use report::{DecodeRow, GraphBuild, ModelReport, PlanInfo, PrefillRow, Report, Settings};
use runner::Probe;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug, Clone)]
pub struct BenchArgs {
    /// Models to bench, comma-separated: Hugging Face directories (e.g. from `kiln synth`; the
    /// torch competitor needs these), or any model `kiln run --model` opens.
    #[arg(long, value_delimiter = ',')]
    pub models: Vec<PathBuf>,
    /// Shapes to bench, comma-separated (llama3.2-1b, llama3.1-8b, qwen2.5-0.5b, qwen3-0.6b):
    /// `kiln synth` directories under --synth-root, written first when absent.
    #[arg(long, value_delimiter = ',')]
    pub shapes: Vec<String>,
    /// Where --shapes directories live (`SHAPE-seedN`).
    #[arg(long, default_value = "/tmp/kiln-synth")]
    pub synth_root: PathBuf,
    /// Seed of synth weights and of the random prompts.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Prompt tokens before decoding (the context of the main table).
    #[arg(long, default_value_t = 128)]
    pub prompt: usize,
    /// Greedy tokens generated per run (the first from the prefill; the rest are timed steps).
    #[arg(long, default_value_t = 256)]
    pub new_tokens: usize,
    /// Timed runs per number (after one warm-up); the median is reported.
    #[arg(long, default_value_t = 5)]
    pub repeats: usize,
    /// Plan with the fusion pass (`kiln plan --fuse`): norm prologues, gated MLP, residual
    /// epilogues, packed Q/K/V with RoPE and the KV write in the decode programs.
    #[arg(long)]
    pub fuse: bool,
    /// Which decode rows the torch competitor runs: `all`, or `first` (batch 1 at --prompt, the
    /// row the acceptance targets name; transformers eager takes ~20 s per run of 256 tokens).
    #[arg(long, default_value = "all")]
    pub torch_rows: String,
    /// Timed runs per torch number [default: --repeats].
    #[arg(long)]
    pub torch_repeats: Option<usize>,
    /// Decode tokens per graph launch: the plan's device loops (`loop.b{B}`) run the timed
    /// decode in bursts of this many steps (0: one graph launch per decode step).
    #[arg(long, default_value_t = 64)]
    pub burst: usize,
    /// Decode batch buckets (sequences stepped together) for the batch table, at context --prompt.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    pub batches: Vec<usize>,
    /// Prompt lengths for the context table, at batch 1 (prefilled in chunks of the largest
    /// prefill bucket, then decoded).
    #[arg(long, value_delimiter = ',', default_value = "128,4096")]
    pub contexts: Vec<usize>,
    /// Prefill mode: time to first token and prefill tok/s at --prefill-prompts instead of decode.
    #[arg(long)]
    pub prefill: bool,
    /// Prompt sizes of --prefill.
    #[arg(long, value_delimiter = ',', default_value = "128,512,2048")]
    pub prefill_prompts: Vec<usize>,
    /// Prefill buckets of the plan [default: decode --prompt and --prefill-prompts; with
    /// --prefill, the powers of two from 16 to the largest prompt, with decode buckets 1-8, so
    /// that the load reports the graph build of a full bucket set].
    #[arg(long, value_delimiter = ',')]
    pub prefill_buckets: Vec<usize>,
    /// Storage dtype of the plan.
    #[arg(long, default_value = "bf16")]
    pub dtype: String,
    /// kiln's executor: cuda (graphs), cuda-eager, or cpu (no GPU: no roofline; for testing).
    #[arg(long, default_value = "cuda")]
    pub device: String,
    /// Skip kiln's own runs (bandwidth, roofline and torch only).
    #[arg(long)]
    pub skip_kiln: bool,
    /// Run the PyTorch/transformers competitor in the same run.
    #[arg(long)]
    pub torch: bool,
    /// Torch modes: eager (static cache), compile (torch.compile reduce-overhead, static cache).
    #[arg(long, value_delimiter = ',', default_value = "eager,compile")]
    pub torch_modes: Vec<String>,
    #[arg(long, default_value = "python3")]
    pub python: String,
    #[arg(long, default_value = "scripts/bench_torch.py")]
    pub torch_script: PathBuf,
    /// Seconds each model's torch run may take (compiling included); what it finished is kept.
    #[arg(long, default_value_t = 1800)]
    pub torch_timeout: u64,
    /// Draws NAME.png from NAME.json (needs matplotlib); NAME.svg is always written.
    #[arg(long, default_value = "scripts/bench_chart.py")]
    pub chart_script: PathBuf,
    /// Output prefix: writes NAME.json, NAME.md, NAME.svg, NAME.png [default:
    /// target/bench/latest-decode or -prefill].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Commit measured [default: $KILN_COMMIT, else the commit the binary is built from].
    #[arg(long)]
    pub commit: Option<String>,
    /// Bytes the bandwidth probe reads per run.
    #[arg(long, default_value = "4GiB")]
    pub bw_bytes: String,
    /// Timed runs of the bandwidth probe.
    #[arg(long, default_value_t = 20)]
    pub bw_runs: usize,
}

/// One model to bench.
struct Target {
    name: String,
    path: PathBuf,
}

pub fn main(args: &BenchArgs) -> Result<()> {
    let started = Instant::now();
    check_args(args)?;
    let kind = if args.prefill { "prefill" } else { "decode" };
    let out = args.out.clone().unwrap_or_else(|| PathBuf::from(format!("target/bench/latest-{kind}")));
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let cuda = args.device != "cpu";
    if cuda {
        // Before any synthetic model is written (gigabytes, seconds each).
        if let Err(e) = crate::runtime::cuda::cuda_available() {
            anyhow::bail!(
                "kiln bench measures a GPU: {} (`--device cpu` runs the bench on the CPU executor, to test the bench itself)",
                crate::runtime::cuda::driver::without_cpu_hint(&e)
            );
        }
    }
    let targets = targets(args)?;
    let mut report = Report {
        format: report::FORMAT,
        kind: kind.into(),
        date: utc_now(),
        commit: commit(args),
        binary_commit: crate::BUILD_COMMIT.to_string(),
        command: command_line(),
        environment: report::kiln_environment(std::env::vars()),
        gpu: None,
        bandwidth: None,
        bandwidth_error: None,
        gemm: None,
        torch_versions: Default::default(),
        settings: Settings {
            prompt: args.prompt,
            new_tokens: args.new_tokens,
            repeats: args.repeats,
            batches: sorted(&args.batches),
            contexts: sorted(&args.contexts),
            prefill_prompts: sorted(&args.prefill_prompts),
            torch_modes: if args.torch { args.torch_modes.clone() } else { Vec::new() },
            executor: args.device.clone(),
            dtype: args.dtype.clone(),
            seed: args.seed,
        },
        models: Vec::new(),
        seconds: 0.0,
    };
    if cuda {
        report.gpu = Some(gpu::gpu_info().context("kiln bench measures a GPU (use --device cpu to test the bench without one)")?);
        let bytes = crate::cli::parse_bytes(&args.bw_bytes)?;
        match gpu::read_bandwidth(bytes, args.bw_runs) {
            Ok(b) => {
                eprintln!(
                    "[bench] read bandwidth {:.1} GB/s (median of {}, grid {}x{})",
                    b.bytes_per_s / 1e9,
                    b.samples_gbs.len(),
                    b.grid,
                    b.block
                );
                report.bandwidth = Some(b);
            }
            Err(e) => {
                eprintln!("[bench] read bandwidth not measured: {e:#}");
                report.bandwidth_error = Some(format!("{e:#}"));
            }
        }
    } else {
        report.bandwidth_error = Some("--device cpu: no GPU measured".into());
    }

    for (i, t) in targets.iter().enumerate() {
        eprintln!("[bench] {} ({})", t.name, t.path.display());
        let m = bench_model(args, t, &report, &out, i == 0);
        let (m, torch) = m;
        if let Some(tr) = torch {
            if report.gemm.is_none() {
                report.gemm = tr.gemm.clone();
            }
            if report.torch_versions.is_empty() {
                report.torch_versions = tr.versions.clone();
            }
        }
        report.models.push(m);
        finish_prefill_fractions(&mut report);
        report.seconds = started.elapsed().as_secs_f64();
        // After every model (and, with --torch, before its competitor runs: see bench_model), so
        // that a run cut short keeps what it measured.
        write_outputs(&report, &out, None)?;
    }
    write_outputs(&report, &out, Some((&args.python, &args.chart_script)))?;
    println!();
    print!("{}", report::text(&report));
    println!("wrote {}.json, {}.md, {}.svg", out.display(), out.display(), out.display());
    Ok(())
}

fn check_args(args: &BenchArgs) -> Result<()> {
    ensure!(
        !args.models.is_empty() || !args.shapes.is_empty(),
        "say what to bench: --models DIR1,DIR2 or --shapes qwen2.5-0.5b,llama3.2-1b"
    );
    ensure!(args.repeats >= 1, "--repeats must be at least 1");
    ensure!(args.new_tokens >= 2, "--new-tokens must be at least 2 (the first token comes from the prefill)");
    ensure!(args.prompt >= 1, "--prompt must be at least 1");
    ensure!(args.batches.iter().all(|&b| b >= 1) && args.contexts.iter().all(|&c| c >= 1), "batches and contexts must be positive");
    ensure!(args.prefill_prompts.iter().all(|&n| n >= 1), "--prefill-prompts must be positive");
    ensure!(["cuda", "cuda-graph", "cuda-eager", "cpu"].contains(&args.device.as_str()), "--device must be cuda, cuda-eager or cpu");
    ensure!(["all", "first"].contains(&args.torch_rows.as_str()), "--torch-rows must be all or first");
    for m in &args.torch_modes {
        ensure!(m == "eager" || m == "compile", "unknown --torch-modes `{m}`: use eager, compile");
    }
    Ok(())
}

fn sorted(v: &[usize]) -> Vec<usize> {
    let mut v = v.to_vec();
    v.sort_unstable();
    v.dedup();
    v
}

/// --models as given, then --shapes (synthesised when absent).
fn targets(args: &BenchArgs) -> Result<Vec<Target>> {
    let mut out = Vec::new();
    for p in &args.models {
        let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| p.display().to_string());
        out.push(Target { name, path: p.clone() });
    }
    for shape in &args.shapes {
        ModelConfig::preset(shape)?;
        let dir = args.synth_root.join(format!("{shape}-seed{}", args.seed));
        if !dir.join("config.json").is_file() || !dir.join("model.safetensors").is_file() {
            eprintln!("[bench] writing the {shape} synth model to {}", dir.display());
            crate::synth::write(shape, args.seed, "bf16", &dir)?;
        }
        out.push(Target { name: shape.clone(), path: dir });
    }
    Ok(out)
}

/// `count` seeded random token ids below `vocab`: sequence `seq`'s prompt. The same for every
/// case of a run, so that sequence 0 of batch 4 is the prompt of batch 1.
fn prompt_tokens(seed: u64, seq: usize, count: usize, vocab: usize) -> Vec<u32> {
    let key = splitmix64(seed ^ 0x6b69_6c6e ^ (seq as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    (0..count as u64).map(|i| (splitmix64(key.wrapping_add(i)) % vocab as u64) as u32).collect()
}

/// (batch, context) decode cases: batch 1 at --prompt (the main table), every batch at --prompt,
/// every context at batch 1.
fn decode_cases(args: &BenchArgs) -> Vec<(usize, usize)> {
    let mut cases = vec![(1, args.prompt)];
    cases.extend(sorted(&args.batches).into_iter().map(|b| (b, args.prompt)));
    cases.extend(sorted(&args.contexts).into_iter().map(|c| (1, c)));
    let mut seen = std::collections::BTreeSet::new();
    cases.retain(|c| seen.insert(*c));
    cases
}

fn plan_options(args: &BenchArgs, cfg: &ModelConfig, source_dtype: Option<crate::model::SrcDType>) -> Result<PlanOptions> {
    let dtype = crate::cli::resolve_dtype(&args.dtype, source_dtype)?;
    let (decode_buckets, max_context, mut prefill) = if args.prefill {
        let prompts = sorted(&args.prefill_prompts);
        let largest = *prompts.last().expect("checked");
        // A serving bucket set: 8 decode and the power-of-two prefill buckets up to the
        // largest prompt (8 of them for 2048), plus the prompts themselves.
        let mut buckets: Vec<usize> = (4..=20).map(|s| 1usize << s).filter(|&b| b <= largest).collect();
        buckets.extend(&prompts);
        ((1..=8).collect(), largest, sorted(&buckets))
    } else {
        let cases = decode_cases(args);
        let longest = cases.iter().map(|c| c.1).max().unwrap_or(args.prompt);
        let mut buckets: Vec<usize> = cases.iter().map(|c| c.0).collect();
        buckets = sorted(&buckets);
        let mut prefill = sorted(&args.prefill_prompts);
        prefill.push(args.prompt);
        (buckets, longest + args.new_tokens, prefill)
    };
    if !args.prefill_buckets.is_empty() {
        prefill = args.prefill_buckets.clone();
    }
    prefill.retain(|&b| b <= max_context);
    ensure!(
        max_context <= cfg.max_position_embeddings,
        "the bench needs {max_context} tokens of context, more than this model's {}; lower --contexts or --new-tokens",
        cfg.max_position_embeddings
    );
    let burst = if args.prefill { 0 } else { args.burst };
    Ok(PlanOptions { decode_buckets, prefill_buckets: sorted(&prefill), max_context, dtype, memory_budget: None, burst, fuse: args.fuse })
}

fn plan_info(plan: &Plan) -> PlanInfo {
    PlanInfo {
        decode_buckets: plan.options.decode_buckets.clone(),
        prefill_buckets: plan.options.prefill_buckets.clone(),
        max_context: plan.options.max_context,
        dtype: plan.options.dtype.name().into(),
        total_bytes: plan.total_bytes(),
        weight_region_bytes: plan.region_bytes[RegionKind::Weights.index()],
        decode_launches: plan.programs.iter().filter(|p| p.phase == Phase::Decode).map(|p| (p.bucket, p.launches.len())).collect(),
    }
}

/// Everything measured for one model; never fails (errors are recorded in the report). Also
/// returns the torch results (for the run-wide GEMM rate and versions).
fn bench_model(args: &BenchArgs, t: &Target, report: &Report, out: &Path, first: bool) -> (ModelReport, Option<torch::TorchResult>) {
    let mut m = ModelReport { name: t.name.clone(), source: t.path.display().to_string(), ..ModelReport::default() };
    let model = match crate::model::open(&t.path, None) {
        Ok(model) => model,
        Err(e) => {
            m.error = Some(format!("{e:#}"));
            return (m, None);
        }
    };
    m.params = model.config.n_params();
    let src_dtype = model.weights.tensor("token_embd.weight").ok().map(|t| t.dtype);
    let plan = match plan_options(args, &model.config, src_dtype).and_then(|o| build_plan(&model.config, &o)) {
        Ok(p) => p,
        Err(e) => {
            m.error = Some(format!("planning: {e:#}"));
            return (m, None);
        }
    };
    m.plan = Some(plan_info(&plan));
    let vocab = model.config.vocab_size;
    let bandwidth = report.bandwidth.as_ref().map(|b| b.bytes_per_s);

    // Rows with the byte counts filled in; measurements land in them below.
    if args.prefill {
        for &n in &sorted(&args.prefill_prompts) {
            let flops = traffic::prefill_flops(&plan, n).unwrap_or(f64::NAN);
            m.prefill.push(PrefillRow { n, flops, ..PrefillRow::default() });
        }
    } else {
        for (batch, context) in decode_cases(args) {
            let mut row =
                DecodeRow { batch, context, new_tokens: args.new_tokens, decode_steps: args.new_tokens - 1, ..DecodeRow::default() };
            match traffic::DecodeTraffic::of(&plan, batch, context, args.new_tokens) {
                Ok(tr) => {
                    row.weight_bytes = tr.weight_bytes;
                    row.kv_bytes = tr.kv_bytes;
                    row.bytes_per_token = tr.bytes_per_token();
                    row.roofline_tok_s = bandwidth.map(|bw| tr.roofline_tok_s(bw));
                }
                Err(e) => row.kiln_error = Some(format!("{e:#}")),
            }
            m.decode.push(row);
        }
    }

    let mut kiln_tokens: Vec<Vec<u32>> = vec![Vec::new(); m.decode.len()];
    let mut kiln_first: Vec<Option<u32>> = vec![None; m.prefill.len()];
    if !args.skip_kiln {
        let t0 = Instant::now();
        let loaded: Result<()> = match args.device.as_str() {
            "cpu" => CpuExecutor::new(plan.clone(), model.weights.as_ref()).map(|mut e| {
                m.load_seconds = Some(t0.elapsed().as_secs_f64());
                kiln_runs(args, &mut e, vocab, &mut m, &mut kiln_tokens, &mut kiln_first);
            }),
            device => {
                let mode = if device == "cuda-eager" { Mode::Eager } else { Mode::Graph };
                CudaExecutor::load(plan.clone(), model.weights.as_ref(), mode).map(|mut e| {
                    m.load_seconds = Some(e.load_seconds());
                    let pdl = e.pdl();
                    m.graph_build = Some(GraphBuild {
                        graphs: e.graph_count(),
                        seconds: e.graph_seconds(),
                        programmatic_edges: pdl.wanted.then_some(pdl.programmatic_edges),
                        pdl_refused: pdl.refused.clone(),
                        cluster_fits: e.cluster_fits().iter().map(|c| c.describe()).collect(),
                    });
                    eprintln!(
                        "[bench]   load {:.2} s, of which {} graphs built and instantiated in {:.3} s",
                        e.load_seconds(),
                        e.graph_count(),
                        e.graph_seconds()
                    );
                    kiln_runs(args, &mut e, vocab, &mut m, &mut kiln_tokens, &mut kiln_first);
                })
            }
        };
        if let Err(e) = loaded {
            m.error = Some(format!("loading the {} executor: {e:#}", args.device));
        }
    }
    drop(model);

    if args.torch {
        // Before the competitor (minutes for torch.compile on a large shape): a run cut short
        // there still leaves kiln's numbers for this model in the files.
        let mut partial = report.clone();
        partial.models.push(m.clone());
        finish_prefill_fractions(&mut partial);
        if let Err(e) = write_outputs(&partial, out, None) {
            eprintln!("[bench]   could not write the partial results: {e:#}");
        }
    }
    let torch = if args.torch { run_torch(args, t, &plan, out, first, &mut m) } else { None };
    if let Some(tr) = &torch {
        fill_torch(&mut m, tr, &kiln_tokens, &kiln_first);
    }
    (m, torch)
}

/// kiln's measurements for every row of `m`, on `exec`. Errors go into the rows.
fn kiln_runs<E: Executor + Probe>(
    args: &BenchArgs,
    exec: &mut E,
    vocab: usize,
    m: &mut ModelReport,
    tokens: &mut [Vec<u32>],
    first: &mut [Option<u32>],
) {
    for (i, row) in m.decode.iter_mut().enumerate() {
        if row.kiln_error.is_some() {
            continue;
        }
        let prompts: Vec<Vec<u32>> = (0..row.batch).map(|s| prompt_tokens(args.seed, s, row.context, vocab)).collect();
        match runner::time_decode(exec, &prompts, args.new_tokens, args.repeats) {
            Ok(run) => {
                let samples: Vec<f64> = run.seconds.iter().map(|s| (row.batch * run.steps) as f64 / s).collect();
                let tok_s = gpu::median(&samples);
                row.kiln_tok_s = Some(tok_s);
                row.kiln_ms_per_token = Some(1e3 * row.batch as f64 / tok_s);
                row.kiln_samples_tok_s = samples;
                row.fraction_of_roofline = row.roofline_tok_s.map(|r| tok_s / r);
                row.kiln_per_step = run.per_step;
                tokens[i] = run.tokens;
                eprintln!("[bench]   kiln decode batch {} context {}: {:.1} tok/s", row.batch, row.context, tok_s);
            }
            Err(e) => row.kiln_error = Some(format!("{e:#}")),
        }
    }
    for (i, row) in m.prefill.iter_mut().enumerate() {
        let prompt = prompt_tokens(args.seed, 0, row.n, vocab);
        match runner::time_prefill(exec, &prompt, args.repeats) {
            Ok(run) => {
                let ms: Vec<f64> = run.seconds.iter().map(|s| s * 1e3).collect();
                let ttft = gpu::median(&ms);
                row.kiln_ttft_ms = Some(ttft);
                row.kiln_samples_ms = ms;
                row.kiln_tok_s = Some(row.n as f64 / (ttft / 1e3));
                row.kiln_tflops = Some(row.flops / (ttft / 1e3) / 1e12);
                row.chunks = run.chunks;
                first[i] = Some(run.first_token);
                eprintln!("[bench]   kiln prefill {}: {:.3} ms to first token", row.n, ttft);
            }
            Err(e) => row.kiln_error = Some(format!("{e:#}")),
        }
    }
}

fn run_torch(args: &BenchArgs, t: &Target, plan: &Plan, out: &Path, first: bool, m: &mut ModelReport) -> Option<torch::TorchResult> {
    if !t.path.is_dir() {
        m.torch_error = Some("the torch competitor needs a Hugging Face directory".into());
        return None;
    }
    let vocab = plan.config.vocab_size;
    let scratch = std::env::temp_dir().join("kiln-bench");
    if let Err(e) = std::fs::create_dir_all(&scratch) {
        m.torch_error = Some(format!("creating {}: {e}", scratch.display()));
        return None;
    }
    let stem = out.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "bench".into());
    let job = torch::Job {
        name: t.name.clone(),
        dir: std::fs::canonicalize(&t.path).unwrap_or_else(|_| t.path.clone()),
        new_tokens: args.new_tokens,
        repeats: args.torch_repeats.unwrap_or(args.repeats).max(1),
        modes: args.torch_modes.clone(),
        decode: m
            .decode
            .iter()
            .filter(|r| args.torch_rows != "first" || (r.batch == 1 && r.context == args.prompt))
            .map(|r| torch::DecodeJob {
                batch: r.batch,
                context: r.context,
                prompts: (0..r.batch).map(|s| prompt_tokens(args.seed, s, r.context, vocab)).collect(),
            })
            .collect(),
        prefill: m.prefill.iter().map(|r| torch::PrefillJob { n: r.n, prompt: prompt_tokens(args.seed, 0, r.n, vocab) }).collect(),
        gemm: first,
        out: scratch.join(format!("{stem}.{}.torch.json", t.name)),
    };
    eprintln!("[bench]   torch ({}) on {}", args.torch_modes.join(", "), job.dir.display());
    match torch::run(&args.python, &args.torch_script, &job, Duration::from_secs(args.torch_timeout)) {
        Ok(r) => {
            m.torch_error = r.error.clone().or(r.incomplete.clone());
            Some(r)
        }
        Err(e) => {
            m.torch_error = Some(format!("{e:#}"));
            None
        }
    }
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

fn fill_torch(m: &mut ModelReport, tr: &torch::TorchResult, kiln_tokens: &[Vec<u32>], kiln_first: &[Option<u32>]) {
    for (mode, r) in &tr.modes {
        if let Some(p) = &r.path {
            m.torch_paths.insert(mode.clone(), p.clone());
        }
    }
    let mode_error = |mode: &str| tr.modes.get(mode).and_then(|r| r.error.clone());
    for (i, row) in m.decode.iter_mut().enumerate() {
        for mode in ["eager", "compile"] {
            let d = tr.decode(mode, row.batch, row.context);
            let (tok, samples, err) = match d {
                Some(d) => (d.tok_s, d.samples_tok_s.clone(), d.error.clone()),
                None => (None, Vec::new(), mode_error(mode)),
            };
            if mode == "eager" {
                (row.torch_eager_tok_s, row.torch_eager_samples_tok_s, row.torch_eager_error) = (tok, samples, err);
                if let Some(d) = d.filter(|d| !d.tokens.is_empty() && !kiln_tokens[i].is_empty()) {
                    row.tokens_agree_with_torch = Some(kiln_tokens[i].iter().zip(&d.tokens).take_while(|(a, b)| a == b).count());
                }
            } else {
                (row.torch_compile_tok_s, row.torch_compile_samples_tok_s, row.torch_compile_error) = (tok, samples, err);
            }
        }
        row.kiln_over_eager = ratio(row.kiln_tok_s, row.torch_eager_tok_s);
        row.kiln_over_compile = ratio(row.kiln_tok_s, row.torch_compile_tok_s);
    }
    for (i, row) in m.prefill.iter_mut().enumerate() {
        for mode in ["eager", "compile"] {
            let p = tr.prefill(mode, row.n);
            let ms = p.and_then(|p| p.ttft_s).map(|s| s * 1e3);
            let err = p.map_or_else(|| mode_error(mode), |p| p.error.clone());
            if mode == "eager" {
                (row.torch_eager_ttft_ms, row.torch_eager_error) = (ms, err);
                if let (Some(k), Some(t)) = (kiln_first[i], p.and_then(|p| p.first_token)) {
                    row.first_token_agrees_with_torch = Some(k == t);
                }
            } else {
                (row.torch_compile_ttft_ms, row.torch_compile_error) = (ms, err);
            }
        }
        row.speedup_vs_eager = ratio(row.torch_eager_ttft_ms, row.kiln_ttft_ms);
        row.speedup_vs_compile = ratio(row.torch_compile_ttft_ms, row.kiln_ttft_ms);
    }
}

/// The tensor-core fraction needs the GEMM rate, which may arrive with a later model's torch run.
fn finish_prefill_fractions(report: &mut Report) {
    let Some(g) = report.gemm.as_ref().map(|g| g.tflops) else { return };
    for m in &mut report.models {
        for r in &mut m.prefill {
            r.fraction_of_gemm = r.kiln_tflops.map(|t| t / g);
        }
    }
}

/// NAME.json, NAME.md, NAME.svg; and NAME.png when `chart` (python, script) is given and works.
fn write_outputs(report: &Report, out: &Path, chart: Option<(&str, &Path)>) -> Result<()> {
    let with = |ext: &str| {
        let mut s = out.as_os_str().to_owned();
        s.push(format!(".{ext}"));
        PathBuf::from(s)
    };
    std::fs::write(with("json"), serde_json::to_vec_pretty(report)?).with_context(|| format!("writing {}", with("json").display()))?;
    std::fs::write(with("md"), report::markdown(report))?;
    std::fs::write(with("svg"), report::svg(report))?;
    if let Some((python, script)) = chart {
        let status =
            std::process::Command::new(python).arg(script).arg(with("json")).arg(with("png")).stdout(std::process::Stdio::null()).status();
        match status {
            Ok(s) if s.success() => {}
            Ok(s) => eprintln!("[bench] no PNG chart ({} exited with {s}); the SVG has the same numbers", script.display()),
            Err(e) => eprintln!("[bench] no PNG chart ({e}); the SVG has the same numbers"),
        }
    }
    Ok(())
}

/// --commit, else $KILN_COMMIT, else the commit the binary is built from ([`crate::BUILD_COMMIT`]:
/// `unknown` for a binary built outside a git checkout; the working directory's checkout need not
/// be the binary's, so it is not asked).
fn commit(args: &BenchArgs) -> String {
    if let Some(c) = &args.commit {
        return c.clone();
    }
    match std::env::var("KILN_COMMIT") {
        Ok(c) if !c.trim().is_empty() => c.trim().to_string(),
        _ => crate::BUILD_COMMIT.to_string(),
    }
}

/// The command line, each argument quoted for a POSIX shell where it needs it.
fn command_line() -> String {
    std::env::args()
        .map(|a| {
            if !a.is_empty() && a.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=,:@+".contains(c)) {
                a
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Now, UTC, as `YYYY-MM-DDTHH:MM:SSZ`.
fn utc_now() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    utc(secs)
}

fn utc(secs: u64) -> String {
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }

    fn args(line: &str) -> BenchArgs {
        Cli::parse_from(std::iter::once("bench").chain(line.split_whitespace())).bench
    }

    #[test]
    fn dates_are_civil_utc() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc(1_767_225_599), "2025-12-31T23:59:59Z");
    }

    #[test]
    fn cases_cover_the_three_tables_once_each() {
        let a = args("--shapes qwen2.5-0.5b --batches 1,2,4,8 --contexts 128,4096");
        assert_eq!(decode_cases(&a), vec![(1, 128), (2, 128), (4, 128), (8, 128), (1, 4096)]);
        let cfg = ModelConfig::preset("qwen2.5-0.5b").unwrap();
        let o = plan_options(&a, &cfg, None).unwrap();
        assert_eq!(o.decode_buckets, vec![1, 2, 4, 8]);
        assert_eq!(o.max_context, 4096 + 256);
        assert_eq!(o.prefill_buckets, vec![128, 512, 2048]);
        let p = args("--shapes llama3.2-1b --prefill --prefill-prompts 2048,128,512");
        let o = plan_options(&p, &cfg, None).unwrap();
        // A serving bucket set: 8 decode buckets, 8 prefill buckets 16..2048.
        assert_eq!(
            (o.decode_buckets, o.prefill_buckets, o.max_context, o.burst),
            ((1..=8).collect(), vec![16, 32, 64, 128, 256, 512, 1024, 2048], 2048, 0)
        );
    }

    #[test]
    fn prompts_are_deterministic_and_shared_across_batches() {
        let a = prompt_tokens(1, 0, 64, 1000);
        assert_eq!(a, prompt_tokens(1, 0, 64, 1000));
        assert_ne!(a, prompt_tokens(1, 1, 64, 1000));
        assert_eq!(&prompt_tokens(1, 0, 128, 1000)[..64], &a[..]);
        assert!(a.iter().all(|&t| t < 1000));
    }

    /// The whole command on the CPU executor with a tiny synth-style model: every row measured,
    /// every output written, the table printed.
    #[test]
    fn a_cpu_run_fills_every_row_and_writes_its_outputs() {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = crate::gate::random_config("qwen2").unwrap();
        cfg.max_position_embeddings = 512;
        let model_dir = dir.path().join("tiny-qwen2");
        crate::synth::write_config(&cfg, "tiny", 5, crate::model::SrcDType::BF16, &model_dir).unwrap();
        let out = dir.path().join("res/run");
        let line = format!(
            "--device cpu --models {} --prompt 12 --new-tokens 6 --repeats 2 --batches 1,2 --contexts 12,40 --prefill-prompts 8,16 --out {} --commit test",
            model_dir.display(),
            out.display()
        );
        main(&args(&line)).unwrap();
        let r: Report = serde_json::from_slice(&std::fs::read(out.with_extension("json")).unwrap()).unwrap();
        assert_eq!(r.commit, "test");
        assert_eq!(r.binary_commit, crate::BUILD_COMMIT, "the report names the binary's own commit");
        let m = &r.models[0];
        assert!(m.error.is_none(), "{:?}", m.error);
        assert_eq!(m.decode.len(), 3);
        for row in &m.decode {
            assert!(row.kiln_tok_s.is_some() && row.kiln_error.is_none(), "{row:?}");
            assert!(row.roofline_tok_s.is_none(), "no bandwidth on the CPU");
            assert!(row.bytes_per_token > 0.0);
        }
        assert!(std::fs::read_to_string(out.with_extension("md")).unwrap().contains("commit: test"));
        assert!(std::fs::read_to_string(out.with_extension("svg")).unwrap().contains("tiny-qwen2"));

        let line = format!(
            "--device cpu --prefill --models {} --prefill-prompts 8,16,20 --prefill-buckets 8,16 --repeats 1 --out {}",
            model_dir.display(),
            out.display()
        );
        main(&args(&line)).unwrap();
        let r: Report = serde_json::from_slice(&std::fs::read(out.with_extension("json")).unwrap()).unwrap();
        let rows = &r.models[0].prefill;
        assert_eq!(rows.iter().map(|p| (p.n, p.chunks)).collect::<Vec<_>>(), vec![(8, 1), (16, 1), (20, 2)]);
        assert!(rows.iter().all(|p| p.kiln_ttft_ms.is_some() && p.flops > 0.0));
    }
}
