//! The `kiln` command line: argument types and the commands that only glue library pieces
//! together (`run`, `plan`, `inspect`, `diff`, `kernels`). `gate` and `synth` live with the runtime.

pub mod diff;
pub mod kernels;
pub mod plan_cmd;
pub mod run;

use crate::ir::DType;
use anyhow::{bail, Context, Result};

/// Ok for no error or a closed pipe (`kiln run | head`: the reader has what it wanted); the
/// error otherwise.
fn finish_write(err: Option<std::io::Error>) -> Result<()> {
    match err {
        Some(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

/// Writes `text` to stdout; a closed stdout (`kiln inspect plan | head`) ends the command
/// quietly, as `run` does (`finish_write`).
pub fn print_out(text: &str) -> Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    finish_write(out.write_all(text.as_bytes()).and_then(|()| out.flush()).err())
}

/// Parses `1,2,4,8` into ascending buckets.
pub fn parse_buckets(s: &str) -> Result<Vec<usize>> {
    if s.trim().is_empty() || s.trim() == "none" {
        return Ok(Vec::new());
    }
    let mut v = Vec::new();
    for part in s.split(',') {
        let n: usize = part.trim().parse().with_context(|| format!("bucket `{part}` is not a positive integer (expected e.g. 1,2,4,8)"))?;
        if n == 0 {
            bail!("bucket sizes must be positive");
        }
        v.push(n);
    }
    v.sort_unstable();
    v.dedup();
    Ok(v)
}

/// Parses `24GiB`, `512MiB`, `1.5GB`, `1000000` into bytes.
pub fn parse_bytes(s: &str) -> Result<u64> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let x: f64 = num.parse().with_context(|| format!("`{s}` is not a size (expected e.g. 24GiB, 512MiB, 2GB)"))?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "m" | "mb" => 1e6,
        "g" | "gb" => 1e9,
        "t" | "tb" => 1e12,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "tib" => 1024.0f64.powi(4),
        other => bail!("unknown size unit `{other}` in `{s}` (use B, KiB, MiB, GiB, KB, MB, GB)"),
    };
    Ok((x * mult) as u64)
}

/// `auto` picks f32 for models stored in f32 (tiny models, exact references), bf16 otherwise.
pub fn resolve_dtype(arg: &str, source_dtype: Option<crate::model::SrcDType>) -> Result<DType> {
    if arg == "auto" {
        return Ok(match source_dtype {
            Some(crate::model::SrcDType::F32) => DType::F32,
            Some(crate::model::SrcDType::F16) => DType::F16,
            _ => DType::BF16,
        });
    }
    let d = DType::parse(arg)?;
    if !d.is_float() {
        bail!("--dtype must be f32, f16, bf16 or auto");
    }
    Ok(d)
}
