//! Helpers shared by `tests/cpu_numerics.rs` and `tests/planner_invariants.rs`: a seeded
//! generator (no `rand` crate, so every run sees the same numbers on every machine) and a
//! compact way to spell a small model config.
#![allow(dead_code)]

use kiln::ir::{RopeScaling, RopeSpec, RopeStyle};
use kiln::model::{Arch, ModelConfig};

/// SplitMix64: tiny, seeded, good enough to draw test weights and configs.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Uniform in `[-1, 1)`.
    pub fn signed(&mut self) -> f32 {
        (2.0 * self.unit() - 1.0) as f32
    }
    /// Uniform integer in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next_u64() % (hi - lo + 1) as u64) as usize
    }
    pub fn coin(&mut self) -> bool {
        self.next_u64() & 1 == 1
    }
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.range(0, items.len() - 1)]
    }
}

/// The shape of a small test model; `build` fills in the rest consistently.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub vocab: usize,
    pub hidden: usize,
    pub ffn: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub rotary_dim: usize,
    pub style: RopeStyle,
    pub scaling: RopeScaling,
    pub tied: bool,
    pub qkv_bias: bool,
    pub qk_norm: bool,
}

impl Shape {
    pub fn build(self) -> ModelConfig {
        let arch = if self.qk_norm {
            Arch::Qwen3
        } else if self.qkv_bias {
            Arch::Qwen2
        } else {
            Arch::Llama
        };
        let cfg = ModelConfig {
            arch,
            vocab_size: self.vocab,
            hidden_size: self.hidden,
            intermediate_size: self.ffn,
            n_layers: self.layers,
            n_heads: self.heads,
            n_kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            rms_norm_eps: 1e-5,
            rope: RopeSpec { style: self.style, theta: 10000.0, rotary_dim: self.rotary_dim as u32, scaling: self.scaling },
            tie_word_embeddings: self.tied,
            qkv_bias: self.qkv_bias,
            qk_norm: self.qk_norm,
            max_position_embeddings: 256,
            bos_token_id: Some(1),
            eos_token_ids: vec![2],
        };
        cfg.validate().expect("test config is valid");
        cfg
    }
}

/// Llama 3.1-style scaling tuned so that, with theta 10000 and head dims of 8..16, some pairs
/// keep their frequency (wavelength < 256), some are smoothed, and some are divided by 8
/// (wavelength > 1024).
pub fn llama3_scaling() -> RopeScaling {
    RopeScaling::Llama3 { factor: 8.0, low_freq_factor: 1.0, high_freq_factor: 4.0, original_max_position: 1024 }
}
