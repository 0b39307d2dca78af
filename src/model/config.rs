//! The model configuration kiln lowers from, whatever file it came from (Hugging Face
//! `config.json`, GGUF metadata, llama2.c header), and the canonical tensor table it implies.
//!
//! Canonical tensor names follow GGUF (`token_embd.weight`, `blk.{i}.attn_q.weight`, ...);
//! shapes are row-major `[out_features, in_features]` (Hugging Face layout). Loaders map their
//! file's names and layouts onto this table.

use crate::ir::{RopeScaling, RopeSpec, RopeStyle};
use serde::{Deserialize, Serialize};

/// Architecture families kiln lowers. SmolLM2 and llama2.c models are `Llama`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Arch {
    Llama,
    Qwen2,
    Qwen3,
}

impl Arch {
    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelConfig {
    pub arch: Arch,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub rms_norm_eps: f32,
    pub rope: RopeSpec,
    /// Output projection shares the token embedding (no `output.weight`).
    pub tie_word_embeddings: bool,
    /// Q, K and V projections carry a bias (Qwen2).
    pub qkv_bias: bool,
    /// Per-head RMSNorm on Q and K before RoPE (Qwen3).
    pub qk_norm: bool,
    /// Longest context the model was trained for; plans may not exceed it.
    pub max_position_embeddings: usize,
    pub bos_token_id: Option<u32>,
    pub eos_token_ids: Vec<u32>,
}

/// One expected tensor: canonical name and shape.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorSpec {
    pub name: String,
    pub shape: Vec<usize>,
}

impl ModelConfig {
    pub fn q_dim(&self) -> usize {
        self.n_heads * self.head_dim
    }
    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }

    /// Every tensor the model must provide, in canonical order (embedding, blocks, final norm,
    /// output). This is the tensor table that the plan's fingerprint covers.
    pub fn tensors(&self) -> Vec<TensorSpec> {
        let (d, f, v) = (self.hidden_size, self.intermediate_size, self.vocab_size);
        let (qd, kvd, hd) = (self.q_dim(), self.kv_dim(), self.head_dim);
        let mut t = vec![TensorSpec { name: "token_embd.weight".into(), shape: vec![v, d] }];
        for i in 0..self.n_layers {
            let mut push = |n: &str, shape: Vec<usize>| t.push(TensorSpec { name: format!("blk.{i}.{n}"), shape });
            push("attn_norm.weight", vec![d]);
            push("attn_q.weight", vec![qd, d]);
            if self.qkv_bias {
                push("attn_q.bias", vec![qd]);
            }
            push("attn_k.weight", vec![kvd, d]);
            if self.qkv_bias {
                push("attn_k.bias", vec![kvd]);
            }
            push("attn_v.weight", vec![kvd, d]);
            if self.qkv_bias {
                push("attn_v.bias", vec![kvd]);
            }
            if self.qk_norm {
                push("attn_q_norm.weight", vec![hd]);
                push("attn_k_norm.weight", vec![hd]);
            }
            push("attn_output.weight", vec![d, qd]);
            push("ffn_norm.weight", vec![d]);
            push("ffn_gate.weight", vec![f, d]);
            push("ffn_up.weight", vec![f, d]);
            push("ffn_down.weight", vec![d, f]);
        }
        t.push(TensorSpec { name: "output_norm.weight".into(), shape: vec![d] });
        if !self.tie_word_embeddings {
            t.push(TensorSpec { name: "output.weight".into(), shape: vec![v, d] });
        }
        t
    }

    /// Parameter count implied by the tensor table.
    pub fn n_params(&self) -> u64 {
        self.tensors().iter().map(|t| t.shape.iter().product::<usize>() as u64).sum()
    }

    /// Checks internal consistency; every constructor calls it.
    pub fn validate(&self) -> anyhow::Result<()> {
        use anyhow::ensure;
        ensure!(self.vocab_size > 0 && self.hidden_size > 0 && self.n_layers > 0, "config has a zero vocab, hidden size or layer count");
        ensure!(self.n_heads > 0 && self.n_kv_heads > 0, "config has zero attention heads");
        ensure!(
            self.n_heads.is_multiple_of(self.n_kv_heads),
            "num_attention_heads {} is not a multiple of num_key_value_heads {}",
            self.n_heads,
            self.n_kv_heads
        );
        ensure!(self.head_dim > 0 && self.rope.rotary_dim as usize <= self.head_dim, "rotary dim exceeds head_dim");
        ensure!(self.rope.rotary_dim.is_multiple_of(2), "rotary dim {} is odd", self.rope.rotary_dim);
        Ok(())
    }

    /// Shapes of well-known public models, for `kiln synth` and the committed plans.
    /// Values are those of each model's published `config.json`.
    pub fn preset(name: &str) -> anyhow::Result<ModelConfig> {
        let llama3_rope = |factor: f32| RopeSpec {
            style: RopeStyle::HalfSplit,
            theta: 500000.0,
            rotary_dim: 0,
            scaling: RopeScaling::Llama3 { factor, low_freq_factor: 1.0, high_freq_factor: 4.0, original_max_position: 8192 },
        };
        let qwen_rope = RopeSpec { style: RopeStyle::HalfSplit, theta: 1000000.0, rotary_dim: 0, scaling: RopeScaling::None };
        let mut c = match name {
            "llama3.2-1b" => ModelConfig {
                arch: Arch::Llama,
                vocab_size: 128256,
                hidden_size: 2048,
                intermediate_size: 8192,
                n_layers: 16,
                n_heads: 32,
                n_kv_heads: 8,
                head_dim: 64,
                rms_norm_eps: 1e-5,
                rope: llama3_rope(32.0),
                tie_word_embeddings: true,
                qkv_bias: false,
                qk_norm: false,
                max_position_embeddings: 131072,
                bos_token_id: Some(128000),
                eos_token_ids: vec![128001],
            },
            "llama3.1-8b" => ModelConfig {
                arch: Arch::Llama,
                vocab_size: 128256,
                hidden_size: 4096,
                intermediate_size: 14336,
                n_layers: 32,
                n_heads: 32,
                n_kv_heads: 8,
                head_dim: 128,
                rms_norm_eps: 1e-5,
                rope: llama3_rope(8.0),
                tie_word_embeddings: false,
                qkv_bias: false,
                qk_norm: false,
                max_position_embeddings: 131072,
                bos_token_id: Some(128000),
                eos_token_ids: vec![128001],
            },
            "qwen2.5-0.5b" => ModelConfig {
                arch: Arch::Qwen2,
                vocab_size: 151936,
                hidden_size: 896,
                intermediate_size: 4864,
                n_layers: 24,
                n_heads: 14,
                n_kv_heads: 2,
                head_dim: 64,
                rms_norm_eps: 1e-6,
                rope: qwen_rope,
                tie_word_embeddings: true,
                qkv_bias: true,
                qk_norm: false,
                max_position_embeddings: 32768,
                bos_token_id: Some(151643),
                eos_token_ids: vec![151643],
            },
            "qwen3-0.6b" => ModelConfig {
                arch: Arch::Qwen3,
                vocab_size: 151936,
                hidden_size: 1024,
                intermediate_size: 3072,
                n_layers: 28,
                n_heads: 16,
                n_kv_heads: 8,
                head_dim: 128,
                rms_norm_eps: 1e-6,
                rope: qwen_rope,
                tie_word_embeddings: true,
                qkv_bias: false,
                qk_norm: true,
                max_position_embeddings: 40960,
                bos_token_id: Some(151643),
                eos_token_ids: vec![151645],
            },
            other => anyhow::bail!("unknown model shape `{other}`: known shapes are {}", PRESETS.join(", ")),
        };
        c.rope.rotary_dim = c.head_dim as u32;
        c.validate()?;
        Ok(c)
    }
}

/// Names accepted by [`ModelConfig::preset`].
pub const PRESETS: &[&str] = &["llama3.2-1b", "llama3.1-8b", "qwen2.5-0.5b", "qwen3-0.6b"];
