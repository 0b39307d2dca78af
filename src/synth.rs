//! `kiln synth`: seeded random weights in a Hugging Face directory (config.json +
//! model.safetensors) for the shape of a public model, loadable by both kiln and
//! transformers. Also the in-memory random models the gate and tests compare executors on.
//!
//! Values: linear and embedding weights ~ N(0, 0.02) (transformers' `initializer_range`),
//! norm weights 1 + N(0, 0.02), biases ~ N(0, 0.02). Every tensor is generated from its own
//! seed (the model seed hashed with the tensor name) in fixed chunks of elements, each chunk
//! from its own SplitMix64 stream: the bytes do not depend on the number of threads.
//!
//! Owns: the generator and the synth CLI. Never: names or lays out tensors in a file (that is
//! `model::write_hf_dir`'s).

use crate::model::{ModelConfig, SrcDType, TensorRef, TensorSpec, WeightSource};
use crate::runtime::sampling::splitmix64;
use anyhow::{bail, Context, Result};
use half::{bf16, f16};
use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(clap::Args, Debug, Clone)]
pub struct SynthArgs {
    /// Model shape: one of llama3.2-1b, llama3.1-8b, qwen2.5-0.5b, qwen3-0.6b.
    #[arg(long)]
    pub shape: String,
    /// Seed of the random weights; the same seed gives the same bytes.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Output directory (created; an existing model.safetensors is replaced).
    #[arg(long)]
    pub out: PathBuf,
    /// Storage dtype of the tensors: bf16, f16 or f32.
    #[arg(long, default_value = "bf16")]
    pub dtype: String,
}

/// Elements per independently seeded chunk (the unit of parallel work).
const CHUNK: usize = 1 << 20;

/// Standard deviation of weights and biases.
pub const WEIGHT_STD: f32 = 0.02;

fn name_hash(name: &str) -> u64 {
    // FNV-1a, then mixed: stable across platforms and Rust versions.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
    }
    splitmix64(h)
}

/// Fills `out` (f32 values) with N(mean, std) numbers of stream `(seed, chunk)` by Box-Muller.
fn normals(seed: u64, chunk: u64, mean: f32, std: f32, out: &mut [f32]) {
    let mut state = splitmix64(seed ^ chunk.wrapping_mul(0xD1B5_4A32_D192_ED03));
    let mut i = 0;
    while i < out.len() {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let bits = splitmix64(state);
        // Two 24-bit uniforms; u1 in (0, 1] so ln is finite.
        let u1 = ((bits >> 40) as f32 + 1.0) * (1.0 / 16_777_216.0);
        let u2 = ((bits >> 8) & 0xFF_FFFF) as f32 * (1.0 / 16_777_216.0);
        let r = (-2.0 * u1.ln()).sqrt() * std;
        let (s, c) = (std::f32::consts::TAU * u2).sin_cos();
        out[i] = mean + r * c;
        if i + 1 < out.len() {
            out[i + 1] = mean + r * s;
        }
        i += 2;
    }
}

/// Mean and standard deviation of tensor `name`'s values.
fn init_of(name: &str) -> (f32, f32) {
    if name.ends_with("norm.weight") {
        (1.0, WEIGHT_STD)
    } else {
        (0.0, WEIGHT_STD)
    }
}

fn store(vals: &[f32], dtype: SrcDType, out: &mut [u8]) {
    match dtype {
        SrcDType::F32 => out.iter_mut().zip(vals.iter().flat_map(|v| v.to_le_bytes())).for_each(|(o, b)| *o = b),
        SrcDType::BF16 => out.chunks_exact_mut(2).zip(vals).for_each(|(o, v)| o.copy_from_slice(&bf16::from_f32(*v).to_le_bytes())),
        SrcDType::F16 => out.chunks_exact_mut(2).zip(vals).for_each(|(o, v)| o.copy_from_slice(&f16::from_f32(*v).to_le_bytes())),
    }
}

/// The bytes of tensor `spec` of a model seeded `seed`, generated on `threads` threads.
/// Deterministic in (seed, name, shape, dtype) whatever `threads` is.
pub fn random_tensor(spec: &TensorSpec, seed: u64, dtype: SrcDType, threads: usize) -> Vec<u8> {
    let n: usize = spec.shape.iter().product();
    let mut out = vec![0u8; n * dtype.size()];
    let tensor_seed = splitmix64(seed ^ name_hash(&spec.name));
    let (mean, std) = init_of(&spec.name);
    let chunk_bytes = CHUNK * dtype.size();
    let threads = threads.max(1).min(n.div_ceil(CHUNK).max(1));
    // Chunks dealt round-robin: every chunk costs the same, so static shares balance.
    let mut shares: Vec<Vec<(usize, &mut [u8])>> = (0..threads).map(|_| Vec::new()).collect();
    for (i, c) in out.chunks_mut(chunk_bytes).enumerate() {
        shares[i % threads].push((i, c));
    }
    std::thread::scope(|s| {
        for share in shares {
            s.spawn(move || {
                let mut vals = vec![0f32; CHUNK];
                for (chunk, dst) in share {
                    let vals = &mut vals[..dst.len() / dtype.size()];
                    normals(tensor_seed, chunk as u64, mean, std, vals);
                    store(vals, dtype, dst);
                }
            });
        }
    });
    out
}

pub fn threads() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(4)
}

/// A model held in memory: the random models of the gate and the tests.
pub struct MemWeights {
    pub what: String,
    tensors: BTreeMap<String, (SrcDType, Vec<usize>, Vec<u8>)>,
}

impl MemWeights {
    /// Every tensor of `config` at random (see the module doc), stored as `dtype`.
    pub fn random(config: &ModelConfig, seed: u64, dtype: SrcDType) -> MemWeights {
        let t = threads();
        let tensors = config.tensors().into_iter().map(|s| {
            let bytes = random_tensor(&s, seed, dtype, t);
            (s.name, (dtype, s.shape, bytes))
        });
        MemWeights { what: format!("random weights (seed {seed}, {})", dtype.name()), tensors: tensors.collect() }
    }
}

impl WeightSource for MemWeights {
    fn tensor(&self, name: &str) -> Result<TensorRef<'_>> {
        let (dtype, shape, data) = self.tensors.get(name).with_context(|| format!("{}: no tensor `{name}`", self.what))?;
        Ok(TensorRef { dtype: *dtype, shape: shape.clone(), data })
    }
    fn describe(&self) -> String {
        self.what.clone()
    }
}

fn parse_src_dtype(s: &str) -> Result<SrcDType> {
    Ok(match s.to_ascii_lowercase().as_str() {
        "bf16" | "bfloat16" => SrcDType::BF16,
        "f16" | "float16" => SrcDType::F16,
        "f32" | "float32" => SrcDType::F32,
        other => bail!("unknown --dtype `{other}`: use bf16, f16 or f32"),
    })
}

/// Writes the synth directory for preset `shape` (see [`SynthArgs`]).
pub fn write(shape: &str, seed: u64, dtype: &str, out: &std::path::Path) -> Result<()> {
    let config = ModelConfig::preset(shape)?;
    write_config(&config, shape, seed, parse_src_dtype(dtype)?, out)
}

/// Writes a Hugging Face directory of `config` with the random weights of `seed`: the same
/// bytes as [`MemWeights::random`] gives for that config and seed.
pub fn write_config(config: &ModelConfig, shape: &str, seed: u64, dtype: SrcDType, out: &std::path::Path) -> Result<()> {
    let config = config.clone();
    let specs = config.tensors();
    let total: u64 = specs.iter().map(|s| s.shape.iter().product::<usize>() as u64 * dtype.size() as u64).sum();
    let t0 = std::time::Instant::now();
    // One thread generates the next tensor (itself on all cores) while the writer writes the
    // current one; at most two tensors wait in the channel.
    let (tx, rx) = std::sync::mpsc::sync_channel::<(String, SrcDType, Vec<usize>, Vec<u8>)>(1);
    let threads = threads();
    let result = std::thread::scope(|s| {
        s.spawn(move || {
            for spec in specs {
                let bytes = random_tensor(&spec, seed, dtype, threads);
                if tx.send((spec.name, dtype, spec.shape, bytes)).is_err() {
                    break; // the writer failed and hung up
                }
            }
        });
        crate::model::write_hf_dir(out, &config, rx)
    });
    result.with_context(|| format!("writing the {shape} synth model to `{}`", out.display()))?;
    let secs = t0.elapsed().as_secs_f64();
    eprintln!(
        "wrote {} ({} parameters, {}, seed {seed}) to {} in {secs:.1} s ({:.2} GB/s)",
        shape,
        config.n_params(),
        crate::plan::planner::fmt_bytes(total),
        out.display(),
        total as f64 / secs / 1e9
    );
    Ok(())
}

pub fn main(args: &SynthArgs) -> Result<()> {
    write(&args.shape, args.seed, &args.dtype, &args.out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_tensor_is_deterministic_across_thread_counts() {
        let spec = TensorSpec { name: "blk.0.attn_q.weight".into(), shape: vec![3, CHUNK / 2 + 7] };
        let a = random_tensor(&spec, 7, SrcDType::BF16, 1);
        let b = random_tensor(&spec, 7, SrcDType::BF16, 5);
        assert_eq!(a, b);
        let c = random_tensor(&spec, 8, SrcDType::BF16, 5);
        assert_ne!(a, c);
    }

    #[test]
    fn random_tensor_has_the_intended_moments() {
        let spec = TensorSpec { name: "blk.0.ffn_up.weight".into(), shape: vec![1000, 1000] };
        let v: Vec<f32> =
            random_tensor(&spec, 1, SrcDType::F32, 4).chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        let n = v.len() as f64;
        let mean = v.iter().map(|&x| x as f64).sum::<f64>() / n;
        let std = (v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n).sqrt();
        assert!(mean.abs() < 1e-4, "mean {mean}");
        assert!((std - 0.02).abs() < 2e-4, "std {std}");
        let norm = TensorSpec { name: "blk.0.attn_norm.weight".into(), shape: vec![4096] };
        let w: Vec<f32> =
            random_tensor(&norm, 1, SrcDType::F32, 1).chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        let m = w.iter().sum::<f32>() / w.len() as f32;
        assert!((m - 1.0).abs() < 0.01, "norm mean {m}");
    }
}
