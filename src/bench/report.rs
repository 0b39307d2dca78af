//! The results of one `kiln bench` run: the JSON written to `bench/results/NAME.json` (format
//! [`FORMAT`]), the text tables printed last, a Markdown copy with the run's provenance, and an
//! SVG chart (no Python needed; `scripts/bench_chart.py` draws the PNG from the same JSON).
//!
//! Owns: the result types and every rendering of them. Never: measures.

use super::gpu::{Bandwidth, GpuInfo};
use super::runner::PerStep;
use super::torch::Gemm;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Version of the JSON layout; bump on any change a reader would notice.
pub const FORMAT: u32 = 1;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    pub format: u32,
    /// `decode` or `prefill`.
    pub kind: String,
    /// UTC, `2026-11-05T14:03:00Z`.
    pub date: String,
    pub commit: String,
    /// The commit the measuring binary was built from ([`crate::BUILD_COMMIT`]); empty in reports
    /// written before it was recorded.
    #[serde(default)]
    pub binary_commit: String,
    /// The command line as run.
    pub command: String,
    pub gpu: Option<GpuInfo>,
    pub bandwidth: Option<Bandwidth>,
    pub bandwidth_error: Option<String>,
    /// bf16 tensor-core rate measured by the PyTorch script (8192^3 matmul).
    pub gemm: Option<Gemm>,
    pub torch_versions: BTreeMap<String, String>,
    pub settings: Settings,
    /// Every `KILN_*` environment variable the run saw ([`kiln_environment`]); empty when none.
    #[serde(default)]
    pub environment: BTreeMap<String, String>,
    pub models: Vec<ModelReport>,
    pub seconds: f64,
}

/// `KILN_*` variables that say where things are or how much is logged, never what is planned,
/// compiled or run: a run with only these set measures the defaults. `KILN_CHECK_CACHE` is
/// `scripts/kernel_check.py`'s CUBIN cache, which kiln never reads (a device call that ran the
/// check first still exports it).
pub const NEUTRAL_ENVIRONMENT: [&str; 7] =
    ["KILN_CACHE_DIR", "KILN_CUDA_INCLUDE", "KILN_COMMIT", "KILN_LOG", "KILN_REQUIRE_NVRTC", "KILN_CUDA_DEVICE", "KILN_CHECK_CACHE"];

/// The `KILN_*` variables of `vars` (a process's environment), so that a report says which
/// measurement knobs (plan-time, compile-time, placement) its numbers were taken with.
pub fn kiln_environment(vars: impl IntoIterator<Item = (String, String)>) -> BTreeMap<String, String> {
    vars.into_iter().filter(|(k, _)| k.starts_with("KILN_")).collect()
}

/// The variables of `env` that are knobs (not in [`NEUTRAL_ENVIRONMENT`]), as `K=V` in name order.
/// A variable set to the empty string is left out: every knob reads it as unset (`plan::knob`), so
/// the numbers are the defaults' (`scripts/device_prep.sh` exports `KILN_NVRTC_DEFINES=` so).
pub fn knobs(env: &BTreeMap<String, String>) -> Vec<String> {
    env.iter().filter(|(k, v)| !v.is_empty() && !NEUTRAL_ENVIRONMENT.contains(&k.as_str())).map(|(k, v)| format!("{k}={v}")).collect()
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Settings {
    pub prompt: usize,
    pub new_tokens: usize,
    pub repeats: usize,
    pub batches: Vec<usize>,
    pub contexts: Vec<usize>,
    pub prefill_prompts: Vec<usize>,
    pub torch_modes: Vec<String>,
    pub executor: String,
    pub dtype: String,
    pub seed: u64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PlanInfo {
    pub decode_buckets: Vec<usize>,
    pub prefill_buckets: Vec<usize>,
    pub max_context: usize,
    pub dtype: String,
    pub total_bytes: u64,
    pub weight_region_bytes: u64,
    /// (decode bucket, launch records per step).
    pub decode_launches: Vec<(usize, usize)>,
}

/// Graph build at load: every program's graph built from its launch records (GEMMs recorded
/// into child graphs) and instantiated.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct GraphBuild {
    pub graphs: usize,
    pub seconds: f64,
    /// Programmatic (PDL) edges in all graphs; `None` when PDL was off (`KILN_PDL=0`, eager
    /// mode, or a GPU before sm_90).
    #[serde(default)]
    pub programmatic_edges: Option<usize>,
    /// Programs whose graph the driver refused with programmatic edges (built with full edges).
    #[serde(default)]
    pub pdl_refused: Vec<String>,
    /// Each thread-block-cluster launch against the clusters the GPU holds at once
    /// (`runtime::cuda::exec::ClusterFit::describe`).
    #[serde(default)]
    pub cluster_fits: Vec<String>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ModelReport {
    /// Shape name (`qwen2.5-0.5b`) or the directory's name.
    pub name: String,
    pub source: String,
    pub params: u64,
    pub plan: Option<PlanInfo>,
    /// Executor load: allocation, weight upload, kernels, graph build and instantiation.
    pub load_seconds: Option<f64>,
    /// The part of the load that built and instantiated the graphs (one per program).
    #[serde(default)]
    pub graph_build: Option<GraphBuild>,
    /// Why kiln measured nothing for this model (open, plan or load failed).
    pub error: Option<String>,
    pub torch_error: Option<String>,
    /// How each torch mode was realised, as the script reports it.
    pub torch_paths: BTreeMap<String, String>,
    pub decode: Vec<DecodeRow>,
    pub prefill: Vec<PrefillRow>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct DecodeRow {
    pub batch: usize,
    /// Prompt tokens per sequence before decoding starts.
    pub context: usize,
    pub new_tokens: usize,
    /// Timed decode steps per run (`new_tokens - 1`).
    pub decode_steps: usize,
    /// Bytes one decode step reads: weights (once for the batch) and KV at the mean live length.
    pub weight_bytes: u64,
    pub kv_bytes: f64,
    pub bytes_per_token: f64,
    pub roofline_tok_s: Option<f64>,
    /// Median tokens per second (all sequences), and the samples it is the median of.
    pub kiln_tok_s: Option<f64>,
    /// Milliseconds per decode step: the latency of one token of each sequence.
    pub kiln_ms_per_token: Option<f64>,
    pub kiln_samples_tok_s: Vec<f64>,
    pub fraction_of_roofline: Option<f64>,
    pub kiln_per_step: Option<PerStep>,
    pub kiln_error: Option<String>,
    pub torch_eager_tok_s: Option<f64>,
    pub torch_compile_tok_s: Option<f64>,
    pub torch_eager_samples_tok_s: Vec<f64>,
    pub torch_compile_samples_tok_s: Vec<f64>,
    pub torch_eager_error: Option<String>,
    pub torch_compile_error: Option<String>,
    pub kiln_over_eager: Option<f64>,
    pub kiln_over_compile: Option<f64>,
    /// Leading greedy tokens of sequence 0 identical in kiln and transformers eager (out of
    /// `new_tokens`; random bf16 weights have near-ties, so a short prefix is not a bug).
    pub tokens_agree_with_torch: Option<usize>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PrefillRow {
    pub n: usize,
    /// Useful FLOPs of the prefill (see `traffic::prefill_flops`).
    pub flops: f64,
    pub chunks: usize,
    /// Median time to first token, ms, and the samples.
    pub kiln_ttft_ms: Option<f64>,
    pub kiln_samples_ms: Vec<f64>,
    pub kiln_tok_s: Option<f64>,
    pub kiln_tflops: Option<f64>,
    /// Of the measured bf16 matmul rate.
    pub fraction_of_gemm: Option<f64>,
    pub kiln_error: Option<String>,
    pub torch_eager_ttft_ms: Option<f64>,
    pub torch_compile_ttft_ms: Option<f64>,
    pub torch_eager_error: Option<String>,
    pub torch_compile_error: Option<String>,
    /// torch TTFT / kiln TTFT (> 1: kiln is faster).
    pub speedup_vs_eager: Option<f64>,
    pub speedup_vs_compile: Option<f64>,
    pub first_token_agrees_with_torch: Option<bool>,
}

fn opt(x: Option<f64>, decimals: usize) -> String {
    match x {
        Some(v) if v.is_finite() => format!("{v:.decimals$}"),
        _ => "-".to_string(),
    }
}

fn gb(bytes: f64) -> String {
    format!("{:.3} GB", bytes / 1e9)
}

/// A fixed-width table: a header row and rows, right-aligned except the first column.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.len());
        }
    }
    let line = |cells: Vec<String>| -> String {
        let mut s = String::new();
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            if i == 0 {
                let _ = write!(s, "{c:<w$}");
            } else {
                let _ = write!(s, "  {c:>w$}");
            }
        }
        s.trim_end().to_string() + "\n"
    };
    let mut out = line(header.iter().map(|h| h.to_string()).collect());
    out.push_str(&line(widths.iter().map(|w| "-".repeat(*w)).collect()));
    for r in rows {
        out.push_str(&line(r.clone()));
    }
    out
}

const DECODE_HEADER: [&str; 11] = [
    "shape",
    "batch",
    "context",
    "kiln tok/s",
    "ms/token",
    "roofline tok/s",
    "fraction",
    "torch eager",
    "torch.compile",
    "kiln/eager",
    "kiln/compile",
];

fn decode_rows(report: &Report, keep: impl Fn(&DecodeRow) -> bool) -> Vec<(&ModelReport, &DecodeRow)> {
    report.models.iter().flat_map(|m| m.decode.iter().filter(|r| keep(r)).map(move |r| (m, r))).collect()
}

fn decode_table(rows: &[(&ModelReport, &DecodeRow)]) -> String {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|(m, r)| {
            vec![
                m.name.clone(),
                r.batch.to_string(),
                r.context.to_string(),
                opt(r.kiln_tok_s, 1),
                opt(r.kiln_ms_per_token, 3),
                opt(r.roofline_tok_s, 1),
                opt(r.fraction_of_roofline, 3),
                opt(r.torch_eager_tok_s, 1),
                opt(r.torch_compile_tok_s, 1),
                opt(r.kiln_over_eager, 1),
                opt(r.kiln_over_compile, 2),
            ]
        })
        .collect();
    table(&DECODE_HEADER, &cells)
}

fn prefill_table(report: &Report) -> String {
    let header = [
        "shape",
        "prompt",
        "kiln TTFT ms",
        "kiln tok/s",
        "kiln TFLOP/s",
        "of GEMM",
        "torch eager ms",
        "torch.compile ms",
        "vs eager",
        "vs compile",
    ];
    let cells: Vec<Vec<String>> = report
        .models
        .iter()
        .flat_map(|m| {
            m.prefill.iter().map(move |r| {
                vec![
                    m.name.clone(),
                    r.n.to_string(),
                    opt(r.kiln_ttft_ms, 3),
                    opt(r.kiln_tok_s, 0),
                    opt(r.kiln_tflops, 1),
                    opt(r.fraction_of_gemm, 3),
                    opt(r.torch_eager_ttft_ms, 3),
                    opt(r.torch_compile_ttft_ms, 3),
                    opt(r.speedup_vs_eager, 2),
                    opt(r.speedup_vs_compile, 2),
                ]
            })
        })
        .collect();
    table(&header, &cells)
}

/// Whether a commit named for a run and the binary's build commit are the same commit: one hex
/// prefix of the other (short and long forms), neither dirty nor unknown.
pub fn commits_agree(named: &str, built: &str) -> bool {
    let clean = |c: &str| !c.is_empty() && c.len() >= 7 && c.chars().all(|ch| ch.is_ascii_hexdigit());
    clean(named) && clean(built) && (named.starts_with(built) || built.starts_with(named))
}

/// Provenance and ceilings: what every number below is measured against.
pub fn preamble(report: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "kiln bench ({}) {} commit {}", report.kind, report.date, report.commit);
    if !report.binary_commit.is_empty() {
        let agree = commits_agree(&report.commit, &report.binary_commit);
        let _ = writeln!(
            s,
            "binary: built from {}{}",
            report.binary_commit,
            if agree { "" } else { " (not the commit named above: the numbers are this binary's)" }
        );
    }
    let _ = writeln!(s, "command: {}", report.command);
    let knobs = knobs(&report.environment);
    if knobs.is_empty() {
        s.push_str("knobs: none (no KILN_* measurement variable set: the default plans and kernels)\n");
    } else {
        let _ = writeln!(s, "knobs: {} (measurement settings, not the defaults)", knobs.join(" "));
    }
    match &report.gpu {
        Some(g) => {
            let _ = writeln!(
                s,
                "GPU: {} (cc {}, {} SMs, {:.1} GiB), driver {} (CUDA {})",
                g.name,
                g.compute_capability,
                g.multiprocessors,
                g.memory_bytes as f64 / (1u64 << 30) as f64,
                g.driver_version.as_deref().unwrap_or("?"),
                g.driver_cuda
            );
        }
        None => s.push_str("GPU: none (executor on the CPU: no roofline)\n"),
    }
    if let Some(b) = &report.bandwidth {
        let _ = writeln!(
            s,
            "read bandwidth: {:.1} GB/s median of {} runs over {} (min {:.1}, max {:.1}; grid {}x{})",
            b.bytes_per_s / 1e9,
            b.samples_gbs.len(),
            gb(b.buffer_bytes as f64),
            b.min_bytes_per_s / 1e9,
            b.max_bytes_per_s / 1e9,
            b.grid,
            b.block
        );
    }
    if let Some(e) = &report.bandwidth_error {
        let _ = writeln!(s, "read bandwidth: not measured: {e}");
    }
    if let Some(g) = &report.gemm {
        let _ = writeln!(s, "bf16 GEMM ({0}x{0}x{0}, torch): {1:.1} TFLOP/s median", g.n, g.tflops);
    }
    if !report.torch_versions.is_empty() {
        let v: Vec<String> = report.torch_versions.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let _ = writeln!(s, "competitor: {}", v.join(", "));
    }
    let st = &report.settings;
    let _ = writeln!(
        s,
        "settings: executor {}, dtype {}, {} repeats (medians), seed {}{}",
        st.executor,
        st.dtype,
        st.repeats,
        st.seed,
        if report.kind == "decode" {
            format!(", prompt {} + {} new tokens (greedy; decode steps timed)", st.prompt, st.new_tokens)
        } else {
            String::new()
        }
    );
    s
}

/// Per-model facts and every error, before the tables.
pub fn notes(report: &Report) -> String {
    let mut s = String::new();
    for m in &report.models {
        let mut facts = vec![format!("{} parameters", m.params)];
        if let Some(p) = &m.plan {
            facts.push(format!(
                "plan {} ({} weights), max context {}",
                gb(p.total_bytes as f64),
                gb(p.weight_region_bytes as f64),
                p.max_context
            ));
            if let Some((b, n)) = p.decode_launches.first() {
                facts.push(format!("{n} launches per decode.b{b} step"));
            }
        }
        if let Some(l) = m.load_seconds {
            facts.push(format!("load {l:.2} s"));
        }
        if let Some(gb) = &m.graph_build {
            let buckets = m
                .plan
                .as_ref()
                .map(|p| format!(" (decode buckets {:?}, prefill buckets {:?})", p.decode_buckets, p.prefill_buckets))
                .unwrap_or_default();
            facts.push(format!("{} graphs built and instantiated at load in {:.3} s{buckets}", gb.graphs, gb.seconds));
            facts.push(match gb.programmatic_edges {
                Some(n) if gb.pdl_refused.is_empty() => format!("programmatic dependent launch: {n} edges"),
                Some(n) => {
                    format!("programmatic dependent launch: {n} edges; refused (built with full edges): {}", gb.pdl_refused.join("; "))
                }
                None => "programmatic dependent launch: off".to_string(),
            });
            if !gb.cluster_fits.is_empty() {
                facts.push(format!("cluster launches: {}", gb.cluster_fits.join("; ")));
            }
        }
        if let Some(r) = m.decode.iter().find(|r| r.batch == 1) {
            facts.push(format!("reads {} per batch-1 token at context {}", gb(r.bytes_per_token), r.context));
            if let Some(p) = &r.kiln_per_step {
                facts.push(format!(
                    "per step: {} graph launches, {} kernel launches, {} host syncs",
                    p.graph_launches, p.kernel_launches, p.host_syncs
                ));
            }
            if let Some(a) = r.tokens_agree_with_torch {
                facts.push(format!("first {a}/{} greedy tokens identical to transformers", r.new_tokens));
            }
        }
        let _ = writeln!(s, "{} ({}): {}", m.name, m.source, facts.join("; "));
        for (mode, path) in &m.torch_paths {
            let _ = writeln!(s, "  torch {mode}: {path}");
        }
        let mut errors: Vec<String> = Vec::new();
        errors.extend(m.error.iter().map(|e| format!("kiln: {e}")));
        errors.extend(m.torch_error.iter().map(|e| format!("torch: {e}")));
        for r in &m.decode {
            let at = format!("batch {} context {}", r.batch, r.context);
            errors.extend(r.kiln_error.iter().map(|e| format!("kiln {at}: {e}")));
            errors.extend(r.torch_eager_error.iter().map(|e| format!("torch eager {at}: {e}")));
            errors.extend(r.torch_compile_error.iter().map(|e| format!("torch.compile {at}: {e}")));
        }
        for r in &m.prefill {
            let at = format!("prompt {}", r.n);
            errors.extend(r.kiln_error.iter().map(|e| format!("kiln {at}: {e}")));
            errors.extend(r.torch_eager_error.iter().map(|e| format!("torch eager {at}: {e}")));
            errors.extend(r.torch_compile_error.iter().map(|e| format!("torch.compile {at}: {e}")));
        }
        errors.dedup();
        for e in errors {
            let first_line = e.lines().next().unwrap_or_default();
            let _ = writeln!(s, "  ERROR {first_line}");
        }
    }
    s
}

/// The tables, the main one last: decode batch 1 at the prompt length (or the prefill table).
pub fn tables(report: &Report) -> String {
    let mut s = String::new();
    if report.kind == "prefill" {
        let _ = writeln!(s, "\nprefill: time to first token (prefill + first sampled token), medians");
        s.push_str(&prefill_table(report));
        return s;
    }
    let st = &report.settings;
    let batches = decode_rows(report, |r| r.context == st.prompt && (r.batch > 1 || st.batches.len() > 1));
    if batches.iter().any(|(_, r)| r.batch > 1) {
        let _ = writeln!(s, "\ndecode by batch bucket (context {}); tok/s counts every sequence, ms/token is per step", st.prompt);
        s.push_str(&decode_table(&batches));
    }
    let contexts = decode_rows(report, |r| r.batch == 1 && r.context != st.prompt);
    if !contexts.is_empty() {
        let mut all = decode_rows(report, |r| r.batch == 1);
        all.sort_by_key(|(m, r)| (m.name.clone(), r.context));
        let _ = writeln!(s, "\ndecode by context (batch 1; the roofline counts KV at the mean live length)");
        s.push_str(&decode_table(&all));
    }
    let main = decode_rows(report, |r| r.batch == 1 && r.context == st.prompt);
    let _ = writeln!(
        s,
        "\ndecode, batch 1, context {} (+{} new tokens); roofline = read bandwidth / bytes per token",
        st.prompt, st.new_tokens
    );
    s.push_str(&decode_table(&main));
    s
}

/// The whole text report: what `kiln bench` prints last and writes to NAME.md.
pub fn text(report: &Report) -> String {
    format!("{}{}{}", preamble(report), notes(report), tables(report))
}

pub fn markdown(report: &Report) -> String {
    format!(
        "# kiln bench ({}), {}\n\n- date: {}\n- commit: {}\n- GPU: {}\n- command: `{}`\n\n```text\n{}```\n",
        report.kind,
        report.gpu.as_ref().map(|g| g.name.as_str()).unwrap_or("no GPU"),
        report.date,
        report.commit,
        report.gpu.as_ref().map(|g| format!("{}, driver {}", g.name, g.driver_version.as_deref().unwrap_or("?"))).unwrap_or_default(),
        report.command,
        text(report)
    )
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// Grouped bars per model: kiln, torch eager, torch.compile and the roofline (tok/s at batch
/// 1, context = prompt for decode; prefill tok/s for the prefill report), each bar labelled.
pub fn svg(report: &Report) -> String {
    let series = ["kiln", "torch eager", "torch.compile", "roofline"];
    let colors = ["#d9480f", "#868e96", "#1c7ed6", "#2b8a3e"];
    let mut groups: Vec<(String, [Option<f64>; 4])> = Vec::new();
    if report.kind == "prefill" {
        for m in &report.models {
            for r in &m.prefill {
                let tps = |ms: Option<f64>| ms.map(|ms| r.n as f64 / (ms / 1e3));
                groups.push((
                    format!("{} n={}", m.name, r.n),
                    [r.kiln_tok_s, tps(r.torch_eager_ttft_ms), tps(r.torch_compile_ttft_ms), None],
                ));
            }
        }
    } else {
        for (m, r) in decode_rows(report, |r| r.batch == 1 && r.context == report.settings.prompt) {
            groups.push((m.name.clone(), [r.kiln_tok_s, r.torch_eager_tok_s, r.torch_compile_tok_s, r.roofline_tok_s]));
        }
    }
    let (w, h, left, top, bottom) = (260.0 * groups.len().max(1) as f64 + 120.0, 460.0, 80.0, 60.0, 70.0);
    let plot_h = h - top - bottom;
    let max = groups.iter().flat_map(|g| g.1.iter().flatten().cloned()).fold(1.0f64, f64::max) * 1.12;
    let mut s = String::new();
    let _ = writeln!(s, r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#);
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let title = if report.kind == "prefill" {
        "prefill tok/s (prompt / time to first token)".to_string()
    } else {
        format!("decode tok/s, batch 1, prompt {} + {} new tokens", report.settings.prompt, report.settings.new_tokens)
    };
    let gpu = report.gpu.as_ref().map(|g| g.name.as_str()).unwrap_or("CPU");
    let _ = writeln!(
        s,
        r#"<text x="{left}" y="22" font-size="15">kiln bench: {} — {} — {} — {}</text>"#,
        escape(&title),
        escape(gpu),
        report.date,
        escape(&report.commit)
    );
    for k in 0..=5 {
        let v = max * k as f64 / 5.0;
        let y = top + plot_h - plot_h * k as f64 / 5.0;
        let _ = writeln!(s, r##"<line x1="{left}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#dee2e6"/>"##, w - 20.0);
        let _ = writeln!(s, r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{v:.0}</text>"#, left - 6.0, y + 4.0);
    }
    let group_w = (w - left - 40.0) / groups.len().max(1) as f64;
    let bar_w = group_w * 0.8 / series.len() as f64;
    for (gi, (name, vals)) in groups.iter().enumerate() {
        let x0 = left + gi as f64 * group_w + group_w * 0.1;
        for (si, v) in vals.iter().enumerate() {
            let x = x0 + si as f64 * bar_w;
            if let Some(v) = v.filter(|v| v.is_finite()) {
                let bh = plot_h * v / max;
                let y = top + plot_h - bh;
                let _ = writeln!(s, r#"<rect x="{x:.1}" y="{y:.1}" width="{:.1}" height="{bh:.1}" fill="{}"/>"#, bar_w - 2.0, colors[si]);
                let _ =
                    writeln!(s, r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="10">{v:.0}</text>"#, x + bar_w / 2.0, y - 3.0);
            } else {
                let _ = writeln!(
                    s,
                    r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="10">n/a</text>"#,
                    x + bar_w / 2.0,
                    top + plot_h - 3.0
                );
            }
        }
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            x0 + group_w * 0.4,
            top + plot_h + 18.0,
            escape(name)
        );
    }
    for (si, name) in series.iter().enumerate() {
        let x = left + si as f64 * 130.0;
        let y = h - 22.0;
        let _ = writeln!(s, r#"<rect x="{x:.1}" y="{:.1}" width="12" height="12" fill="{}"/>"#, y - 10.0, colors[si]);
        let _ = writeln!(s, r#"<text x="{:.1}" y="{y:.1}">{name}</text>"#, x + 16.0);
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> Report {
        let row = |batch, context, kiln: Option<f64>| DecodeRow {
            batch,
            context,
            new_tokens: 256,
            decode_steps: 255,
            weight_bytes: 990_000_000,
            bytes_per_token: 1e9,
            roofline_tok_s: Some(4000.0),
            kiln_tok_s: kiln,
            kiln_ms_per_token: kiln.map(|t| 1e3 * batch as f64 / t),
            fraction_of_roofline: kiln.map(|t| t / 4000.0),
            torch_compile_tok_s: Some(650.0),
            kiln_over_compile: kiln.map(|t| t / 650.0),
            kiln_error: kiln.is_none().then(|| "the NVRTC module is not built yet\nsecond line".to_string()),
            ..DecodeRow::default()
        };
        Report {
            format: FORMAT,
            kind: "decode".into(),
            date: "2026-11-05T00:00:00Z".into(),
            commit: "abc".into(),
            binary_commit: String::new(),
            command: "kiln bench".into(),
            gpu: None,
            bandwidth: None,
            bandwidth_error: Some("no GPU".into()),
            gemm: None,
            torch_versions: BTreeMap::new(),
            settings: Settings {
                prompt: 128,
                new_tokens: 256,
                repeats: 5,
                batches: vec![1, 2],
                contexts: vec![128, 4096],
                prefill_prompts: vec![],
                torch_modes: vec![],
                executor: "cuda".into(),
                dtype: "bf16".into(),
                seed: 1,
            },
            environment: BTreeMap::new(),
            models: vec![ModelReport {
                name: "qwen2.5-0.5b".into(),
                decode: vec![row(1, 128, Some(1000.0)), row(2, 128, Some(1800.0)), row(1, 4096, None)],
                ..ModelReport::default()
            }],
            seconds: 1.0,
        }
    }

    #[test]
    fn the_batch_1_table_comes_last_and_errors_are_listed_once() {
        let r = report();
        let t = text(&r);
        let last = t.rsplit("\ndecode, batch 1, context 128").next().unwrap();
        assert!(last.contains("qwen2.5-0.5b      1      128") || last.contains("1000.0"), "{t}");
        assert!(!last.contains("1800.0"), "batch 2 is not in the main table:\n{t}");
        assert_eq!(t.matches("ERROR kiln batch 1 context 4096").count(), 1, "{t}");
        assert!(!t.contains("second line"));
        assert!(t.contains("decode by batch bucket") && t.contains("decode by context"));
        let back: Report = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back.models[0].decode.len(), 3);
    }

    #[test]
    fn the_report_says_which_knobs_its_numbers_were_taken_with() {
        let mut r = report();
        assert!(text(&r).contains("knobs: none"), "{}", text(&r));
        // Set but empty: read as unset, the default.
        r.environment = kiln_environment([("KILN_NVRTC_DEFINES".to_string(), String::new())]);
        assert!(text(&r).contains("knobs: none"), "{}", text(&r));
        let vars = [
            ("KILN_CACHE_DIR", "/c"),
            ("PATH", "/bin"),
            ("KILN_LOOP_UNROLL", "4"),
            ("KILN_ALLOC_PAD_MB", "64"),
            ("KILN_CHECK_CACHE", "/k"),
        ];
        r.environment = kiln_environment(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        assert_eq!(r.environment.len(), 4, "only KILN_* variables: {:?}", r.environment);
        let t = text(&r);
        assert!(t.contains("knobs: KILN_ALLOC_PAD_MB=64 KILN_LOOP_UNROLL=4 (measurement settings"), "{t}");
        assert!(!t.contains("KILN_CACHE_DIR=/c"), "a cache path is not a knob:\n{t}");
        assert!(!t.contains("KILN_CHECK_CACHE"), "kernel_check's cache is not a knob:\n{t}");
        let back: Report = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back.environment, r.environment);
        // A report written before the field existed still reads.
        let mut old = serde_json::to_value(&r).unwrap();
        old.as_object_mut().unwrap().remove("environment");
        assert!(serde_json::from_value::<Report>(old).unwrap().environment.is_empty());
    }

    #[test]
    fn the_report_names_the_binary_s_commit_and_says_when_it_is_not_the_named_one() {
        let mut r = report();
        assert!(!text(&r).contains("binary:"), "an old report has no binary line:\n{}", text(&r));
        r.commit = "60dedc0".into();
        r.binary_commit = "60dedc0a1b2c".into();
        let t = text(&r);
        assert!(t.contains("binary: built from 60dedc0a1b2c\n"), "{t}");
        r.binary_commit = "e1cbcc3f0000".into();
        assert!(text(&r).contains("binary: built from e1cbcc3f0000 (not the commit named above"), "{}", text(&r));
        for (named, built, agree) in [
            ("60dedc0", "60dedc0a1b2c", true),
            ("60dedc0a1b2c3d4e", "60dedc0a1b2c", true),
            ("60dedc0", "60dedc0a1b2c-dirty", false),
            ("unknown", "unknown", false),
            ("test", "60dedc0a1b2c", false),
            ("60de", "60dedc0a1b2c", false),
        ] {
            assert_eq!(commits_agree(named, built), agree, "{named} vs {built}");
        }
        let mut old = serde_json::to_value(&r).unwrap();
        old.as_object_mut().unwrap().remove("binary_commit");
        assert!(serde_json::from_value::<Report>(old).unwrap().binary_commit.is_empty());
    }

    #[test]
    fn the_chart_has_a_bar_or_a_gap_for_every_series() {
        let s = svg(&report());
        assert!(s.starts_with("<svg") && s.trim_end().ends_with("</svg>"));
        assert_eq!(s.matches("<rect x=").count(), 4 + 3, "kiln, compile, roofline bars + 4 legend keys:\n{s}");
        assert_eq!(s.matches(">n/a<").count(), 1, "torch eager missing");
    }
}
