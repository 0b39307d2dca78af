//! The PyTorch/transformers competitor: `scripts/bench_torch.py` run as a subprocess on the
//! same Hugging Face directory, the same prompts (passed as token ids) and the same token
//! counts. The job goes in a JSON file; the script writes its results to another, after every
//! measurement, so a run cut off by `--torch-timeout` still reports what it finished.
//!
//! Owns: the job format and reading the results. Never: measures anything itself.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// One decode case: `prompts.len()` sequences decoded together after their prompts.
#[derive(Clone, Debug, Serialize)]
pub struct DecodeJob {
    pub batch: usize,
    pub context: usize,
    pub prompts: Vec<Vec<u32>>,
}

#[derive(Clone, Debug, Serialize)]
pub struct PrefillJob {
    pub n: usize,
    pub prompt: Vec<u32>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Job {
    pub name: String,
    pub dir: PathBuf,
    pub new_tokens: usize,
    pub repeats: usize,
    /// `eager` (static cache, no compile), `compile` (torch.compile reduce-overhead, static cache).
    pub modes: Vec<String>,
    pub decode: Vec<DecodeJob>,
    pub prefill: Vec<PrefillJob>,
    /// Also time an 8192^3 bf16 matmul (the tensor-core ceiling).
    pub gemm: bool,
    pub out: PathBuf,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Gemm {
    pub n: usize,
    /// Median, 1e12 FLOP/s.
    pub tflops: f64,
    #[serde(default)]
    pub samples_ms: Vec<f64>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct TorchDecode {
    pub batch: usize,
    pub context: usize,
    /// Median tokens per second over decode steps (all sequences).
    #[serde(default)]
    pub tok_s: Option<f64>,
    #[serde(default)]
    pub samples_tok_s: Vec<f64>,
    /// Greedy tokens of sequence 0 (eager mode), for agreement with kiln.
    #[serde(default)]
    pub tokens: Vec<u32>,
    #[serde(default)]
    pub method: Option<String>,
    #[serde(default)]
    pub error: Option<String>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct TorchPrefill {
    pub n: usize,
    /// Median time to first token, seconds.
    #[serde(default)]
    pub ttft_s: Option<f64>,
    #[serde(default)]
    pub samples_s: Vec<f64>,
    #[serde(default)]
    pub first_token: Option<u32>,
    #[serde(default)]
    pub error: Option<String>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct TorchMode {
    /// How the mode was realised (e.g. which compile path worked).
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub decode: Vec<TorchDecode>,
    #[serde(default)]
    pub prefill: Vec<TorchPrefill>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct TorchResult {
    #[serde(default)]
    pub versions: BTreeMap<String, String>,
    #[serde(default)]
    pub gemm: Option<Gemm>,
    #[serde(default)]
    pub modes: BTreeMap<String, TorchMode>,
    #[serde(default)]
    pub error: Option<String>,
    /// Set by kiln: the script did not finish (timeout, crash); what it wrote is still here.
    #[serde(default)]
    pub incomplete: Option<String>,
}

impl TorchResult {
    pub fn decode(&self, mode: &str, batch: usize, context: usize) -> Option<&TorchDecode> {
        self.modes.get(mode)?.decode.iter().find(|d| d.batch == batch && d.context == context)
    }
    pub fn prefill(&self, mode: &str, n: usize) -> Option<&TorchPrefill> {
        self.modes.get(mode)?.prefill.iter().find(|p| p.n == n)
    }
}

/// Runs `python script --job JOB` with `job`, waiting at most `timeout`; the results it wrote
/// (possibly partial) or an error when it wrote none.
pub fn run(python: &str, script: &Path, job: &Job, timeout: Duration) -> Result<TorchResult> {
    let job_path = job.out.with_extension("job.json");
    std::fs::write(&job_path, serde_json::to_vec(job)?).with_context(|| format!("writing {}", job_path.display()))?;
    let _ = std::fs::remove_file(&job.out);
    let t0 = Instant::now();
    use std::os::unix::process::CommandExt;
    // Its own process group, so that a timeout also stops the compile workers torch starts.
    let mut child = std::process::Command::new(python)
        .arg(script)
        .arg("--job")
        .arg(&job_path)
        .env("PYTHONUNBUFFERED", "1")
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting `{python} {}`", script.display()))?;
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break Some(s);
        }
        if t0.elapsed() > timeout {
            // Our own child's process group (its id is the child's), then the child itself.
            let _ = std::process::Command::new("kill").args(["-KILL", "--", &format!("-{}", child.id())]).status();
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let written = std::fs::read(&job.out).ok().map(|b| serde_json::from_slice::<TorchResult>(&b));
    let incomplete = match status {
        Some(s) if s.success() => None,
        Some(s) => Some(format!("`{python} {} --job {}` exited with {s}", script.display(), job_path.display())),
        None => Some(format!("`{python} {}` was stopped after --torch-timeout {} s", script.display(), timeout.as_secs())),
    };
    match written {
        Some(Ok(mut r)) => {
            r.incomplete = incomplete;
            Ok(r)
        }
        Some(Err(e)) => bail!("{} is not the results file bench_torch.py writes: {e}", job.out.display()),
        None => bail!("{}; it wrote no results", incomplete.unwrap_or_else(|| "bench_torch.py finished".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_with_missing_fields_still_parse() {
        let text = r#"{"versions": {"torch": "2.11.0"}, "modes": {"eager": {"decode": [{"batch": 1, "context": 128, "tok_s": 12.5}],
            "prefill": [{"n": 128, "error": "boom"}]}}, "unknown_field": 3}"#;
        let r: TorchResult = serde_json::from_str(text).unwrap();
        assert_eq!(r.decode("eager", 1, 128).unwrap().tok_s, Some(12.5));
        assert!(r.decode("compile", 1, 128).is_none());
        assert_eq!(r.prefill("eager", 128).unwrap().error.as_deref(), Some("boom"));
        assert!(r.gemm.is_none());
    }

    #[test]
    fn a_script_that_fails_before_writing_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let job = Job {
            name: "x".into(),
            dir: dir.path().into(),
            new_tokens: 2,
            repeats: 1,
            modes: vec!["eager".into()],
            decode: vec![],
            prefill: vec![],
            gemm: false,
            out: dir.path().join("x.torch.json"),
        };
        let script = dir.path().join("fail.sh");
        std::fs::write(&script, "exit 3\n").unwrap();
        let e = run("sh", &script, &job, Duration::from_secs(30)).unwrap_err().to_string();
        assert!(e.contains("exited with") && e.contains("wrote no results"), "{e}");
        // A script that writes results and then dies still reports them, marked incomplete.
        std::fs::write(&script, format!("echo '{{\"modes\": {{}}}}' > {}\nexit 1\n", job.out.display())).unwrap();
        let r = run("sh", &script, &job, Duration::from_secs(30)).unwrap();
        assert!(r.incomplete.is_some());
        // A script past its timeout is stopped, with what it wrote kept.
        std::fs::write(&script, format!("echo '{{\"modes\": {{}}}}' > {}\nsleep 30\n", job.out.display())).unwrap();
        let t0 = Instant::now();
        let r = run("sh", &script, &job, Duration::from_secs(1)).unwrap();
        assert!(r.incomplete.unwrap().contains("--torch-timeout"));
        assert!(t0.elapsed() < Duration::from_secs(10));
    }
}
