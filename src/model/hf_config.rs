//! Hugging Face `config.json` <-> [`ModelConfig`].
//!
//! Owns: which `config.json` fields kiln reads, which it knows to be harmless, and the JSON
//! that kiln writes for a model directory (`LlamaForCausalLM`, `Qwen2ForCausalLM`,
//! `Qwen3ForCausalLM`).
//! Never: ignores a field it does not know. A new field in a config may change the math
//! (sliding windows, biases, scaling), so every field is either read, checked to have its
//! harmless value, or on the allow-list of fields that cannot change what the model computes;
//! anything else is refused by name.

use super::{Arch, ModelConfig};
use crate::ir::{RopeScaling, RopeSpec, RopeStyle};
use anyhow::{bail, Context, Result};
use serde_json::{Map, Value};
use std::collections::BTreeSet;

/// Fields that never change what the model computes at inference (bookkeeping, training-only
/// settings, dtype hints: kiln converts to the plan's dtype anyway).
const HARMLESS_FIELDS: &[&str] = &[
    "_name_or_path",
    "architectures",
    "model_type",
    "torch_dtype",
    "dtype",
    "transformers_version",
    "transformers.js_config",
    "initializer_range",
    "use_cache",
    "pad_token_id",
    "unk_token_id",
    "sep_token_id",
    "attention_dropout",
    "hidden_dropout",
    "embd_pdrop",
    "resid_pdrop",
    "tokenizer_class",
    "output_attentions",
    "output_hidden_states",
    "return_dict",
    "use_return_dict",
    "torchscript",
    "is_llama_config",
    "max_window_layers",
    "_attn_implementation_autoset",
];

/// Values of `model_type` kiln accepts.
pub const SUPPORTED_MODEL_TYPES: &[&str] = &["llama", "qwen2", "qwen3", "mistral"];

/// Reads fields of a `config.json` object and remembers which were read.
struct Fields<'a> {
    obj: &'a Map<String, Value>,
    read: BTreeSet<&'a str>,
}

impl<'a> Fields<'a> {
    fn get(&mut self, key: &'a str) -> Option<&'a Value> {
        self.read.insert(key);
        self.obj.get(key).filter(|v| !v.is_null())
    }

    fn usize_opt(&mut self, key: &'a str) -> Result<Option<usize>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => match v.as_u64().and_then(|u| usize::try_from(u).ok()) {
                Some(u) => Ok(Some(u)),
                None => bail!("config.json field `{key}` must be a non-negative integer, found {v}"),
            },
        }
    }

    fn usize_req(&mut self, key: &'a str) -> Result<usize> {
        self.usize_opt(key)?.with_context(|| format!("config.json has no `{key}`"))
    }

    fn f64_opt(&mut self, key: &'a str) -> Result<Option<f64>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.as_f64().map(Some).with_context(|| format!("config.json field `{key}` must be a number, found {v}")),
        }
    }

    fn bool_opt(&mut self, key: &'a str) -> Result<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.as_bool().map(Some).with_context(|| format!("config.json field `{key}` must be true or false, found {v}")),
        }
    }

    fn str_opt(&mut self, key: &'a str) -> Result<Option<&'a str>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.as_str().map(Some).with_context(|| format!("config.json field `{key}` must be a string, found {v}")),
        }
    }

    /// Refuses `key` unless it is absent, null, or equal to `harmless`; `why` says what the
    /// other values would mean.
    fn require(&mut self, key: &'a str, harmless: &Value, why: &str) -> Result<()> {
        match self.get(key) {
            Some(v) if v != harmless => bail!("config.json field `{key}` = {v} is not supported by kiln: {why} (kiln needs {harmless})"),
            _ => Ok(()),
        }
    }
}

fn token_id(v: &Value, key: &str) -> Result<u32> {
    v.as_u64().and_then(|u| u32::try_from(u).ok()).with_context(|| format!("config.json field `{key}` must be a token id, found {v}"))
}

impl ModelConfig {
    /// Reads a Hugging Face `config.json` (as written by transformers 4.x and 5.x) for the
    /// architectures kiln supports. Unknown fields are refused by name.
    pub fn from_hf_json(text: &str) -> Result<ModelConfig> {
        let value: Value = serde_json::from_str(text).context("config.json is not valid JSON")?;
        let obj = value.as_object().context("config.json is not a JSON object")?;
        let mut f = Fields { obj, read: BTreeSet::new() };

        let model_type = f.str_opt("model_type")?.context("config.json has no `model_type`")?;
        let (arch, expected_class) = match model_type {
            "llama" => (Arch::Llama, "LlamaForCausalLM"),
            "qwen2" => (Arch::Qwen2, "Qwen2ForCausalLM"),
            "qwen3" => (Arch::Qwen3, "Qwen3ForCausalLM"),
            "mistral" => (Arch::Llama, "MistralForCausalLM"),
            other => bail!("config.json `model_type` `{other}` is not supported by kiln (supported: {})", SUPPORTED_MODEL_TYPES.join(", ")),
        };
        if let Some(archs) = f.get("architectures") {
            let archs = archs.as_array().with_context(|| format!("config.json field `architectures` must be a list, found {archs}"))?;
            for a in archs {
                if a.as_str() != Some(expected_class) {
                    bail!("config.json `architectures` lists {a}, but kiln runs `model_type` `{model_type}` only as `{expected_class}`");
                }
            }
        }

        let hidden_size = f.usize_req("hidden_size")?;
        let intermediate_size = f.usize_req("intermediate_size")?;
        let n_layers = f.usize_req("num_hidden_layers")?;
        let n_heads = f.usize_req("num_attention_heads")?;
        if n_heads == 0 {
            bail!("config.json `num_attention_heads` is 0");
        }
        let n_kv_heads = f.usize_opt("num_key_value_heads")?.unwrap_or(n_heads);
        let head_dim = f.usize_opt("head_dim")?.unwrap_or(hidden_size / n_heads);
        let vocab_size = f.usize_req("vocab_size")?;
        let max_position_embeddings = f.usize_req("max_position_embeddings")?;
        let rms_norm_eps = f.f64_opt("rms_norm_eps")?.unwrap_or(1e-6) as f32;
        let tie_word_embeddings = f.bool_opt("tie_word_embeddings")?.unwrap_or(false);

        match f.str_opt("hidden_act")?.unwrap_or("silu") {
            "silu" | "swish" => {}
            other => bail!("config.json `hidden_act` `{other}` is not supported by kiln (it implements SwiGLU with silu)"),
        }
        if let Some(p) = f.f64_opt("partial_rotary_factor")? {
            if p != 1.0 {
                bail!("config.json `partial_rotary_factor` = {p} is not supported by kiln (it rotates whole heads)");
            }
        }
        f.require("pretraining_tp", &Value::from(1), "tensor-parallel slicing of the MLP changes its rounding")?;
        f.require("mlp_bias", &Value::Bool(false), "kiln's MLP has no biases")?;
        f.require("use_mrope", &Value::Bool(false), "multimodal RoPE is not implemented")?;
        f.require("rope_interleaved", &Value::Bool(false), "Hugging Face checkpoints use half-split RoPE")?;
        f.require("is_encoder_decoder", &Value::Bool(false), "kiln runs decoder-only models")?;
        if let Some(q) = f.get("quantization_config") {
            let method = q.get("quant_method").and_then(Value::as_str).unwrap_or("unknown");
            bail!("config.json has `quantization_config` (method `{method}`): kiln loads only unquantized F32/F16/BF16 weights");
        }

        // Bias on the attention projections. Qwen2 always has q/k/v biases (transformers
        // hard-codes them). For Llama and Qwen3 `attention_bias` adds biases to q, k, v *and*
        // o_proj, and kiln has no o_proj bias.
        let attention_bias = f.bool_opt("attention_bias")?.unwrap_or(false);
        let qkv_bias = match arch {
            Arch::Qwen2 => {
                if attention_bias {
                    bail!("config.json `attention_bias` = true is not supported for qwen2 by kiln");
                }
                true
            }
            Arch::Llama | Arch::Qwen3 => {
                if attention_bias {
                    bail!(
                        "config.json `attention_bias` = true is not supported by kiln: for `{model_type}` it adds a bias to \
                         o_proj as well as q/k/v, and kiln has no output-projection bias"
                    );
                }
                false
            }
        };

        // Sliding-window attention.
        let use_sliding_window = f.bool_opt("use_sliding_window")?;
        let sliding_window = f.get("sliding_window");
        match (arch, use_sliding_window, sliding_window) {
            (_, Some(true), _) => bail!("config.json `use_sliding_window` = true: sliding-window attention is not supported yet by kiln"),
            // Qwen configs carry a window size that applies only when use_sliding_window is true.
            (Arch::Qwen2 | Arch::Qwen3, _, _) => {}
            (Arch::Llama, _, Some(w)) => bail!("config.json `sliding_window` = {w}: sliding-window attention is not supported yet by kiln"),
            (Arch::Llama, _, None) => {}
        }
        if let Some(types) = f.get("layer_types") {
            let all_full = types.as_array().is_some_and(|t| t.iter().all(|x| x.as_str() == Some("full_attention")));
            if !all_full {
                bail!("config.json `layer_types` = {types} is not supported by kiln: only `full_attention` layers are implemented");
            }
        }

        let rope = read_rope(&mut f, head_dim)?;

        let bos_token_id = f.get("bos_token_id").map(|v| token_id(v, "bos_token_id")).transpose()?;
        let eos_token_ids = match f.get("eos_token_id") {
            None => Vec::new(),
            Some(Value::Array(ids)) => ids.iter().map(|v| token_id(v, "eos_token_id")).collect::<Result<Vec<_>>>()?,
            Some(v) => vec![token_id(v, "eos_token_id")?],
        };

        let unknown: Vec<&str> = obj.keys().map(String::as_str).filter(|k| !f.read.contains(k) && !HARMLESS_FIELDS.contains(k)).collect();
        match unknown.as_slice() {
            [] => {}
            [one] => bail!(
                "config.json field `{one}` is not supported by kiln: kiln refuses fields it does not understand, \
                 because they may change what the model computes"
            ),
            many => bail!(
                "config.json fields {} are not supported by kiln: kiln refuses fields it does not understand, \
                 because they may change what the model computes",
                many.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ")
            ),
        }

        let config = ModelConfig {
            arch,
            vocab_size,
            hidden_size,
            intermediate_size,
            n_layers,
            n_heads,
            n_kv_heads,
            head_dim,
            rms_norm_eps,
            rope,
            tie_word_embeddings,
            qkv_bias,
            qk_norm: arch == Arch::Qwen3,
            max_position_embeddings,
            bos_token_id,
            eos_token_ids,
        };
        config.validate().context("config.json describes an inconsistent model")?;
        super::ensure_addressable(&config).context("config.json")?;
        Ok(config)
    }

    /// The `config.json` of a Hugging Face directory holding this model, for transformers
    /// (`LlamaForCausalLM`, `Qwen2ForCausalLM` or `Qwen3ForCausalLM`), with `torch_dtype`
    /// `bfloat16`.
    ///
    /// Hugging Face checkpoints use half-split RoPE; a config with interleaved RoPE (GGUF
    /// `llama`, llama2.c) is refused here, and [`super::hf::write_hf_dir`] converts it.
    pub fn to_hf_json(&self) -> Result<String> {
        self.to_hf_json_with_dtype("bfloat16")
    }

    /// [`ModelConfig::to_hf_json`] with another `torch_dtype` (`float16`, `float32`).
    pub fn to_hf_json_with_dtype(&self, torch_dtype: &str) -> Result<String> {
        let v = self.hf_json_value(torch_dtype)?;
        let mut s = serde_json::to_string_pretty(&v)?;
        s.push('\n');
        Ok(s)
    }

    fn hf_json_value(&self, torch_dtype: &str) -> Result<Value> {
        self.validate()?;
        if self.rope.style != RopeStyle::HalfSplit {
            bail!(
                "Hugging Face checkpoints use half-split RoPE but this config has {:?}; write it with `write_hf_dir`, \
                 which permutes Q and K to match",
                self.rope.style
            );
        }
        if self.rope.rotary_dim as usize != self.head_dim {
            bail!(
                "rotary dim {} differs from head_dim {}; transformers' Llama and Qwen rotate whole heads",
                self.rope.rotary_dim,
                self.head_dim
            );
        }
        let (model_type, class) = match self.arch {
            Arch::Llama => ("llama", "LlamaForCausalLM"),
            Arch::Qwen2 => ("qwen2", "Qwen2ForCausalLM"),
            Arch::Qwen3 => ("qwen3", "Qwen3ForCausalLM"),
        };
        match (self.arch, self.qkv_bias) {
            (Arch::Qwen2, false) => bail!("Qwen2ForCausalLM always has q/k/v biases; this qwen2 config has none"),
            (Arch::Llama | Arch::Qwen3, true) => {
                bail!("{class} has q/k/v biases only together with an o_proj bias, which kiln does not model")
            }
            _ => {}
        }
        if self.qk_norm != (self.arch == Arch::Qwen3) {
            bail!(
                "{class} {} Q/K norm, but this config says qk_norm = {}",
                if self.qk_norm { "has no" } else { "always has" },
                self.qk_norm
            );
        }
        let num = |x: f32| -> Value {
            // Print the f32's shortest decimal, not the f64 widening (1e-5, not 9.99999974e-6).
            x.to_string().parse::<f64>().ok().and_then(serde_json::Number::from_f64).map(Value::Number).unwrap_or(Value::Null)
        };
        let mut m = Map::new();
        m.insert("architectures".into(), Value::from(vec![class]));
        m.insert("model_type".into(), model_type.into());
        m.insert("attention_dropout".into(), Value::from(0.0));
        m.insert("bos_token_id".into(), self.bos_token_id.map(Value::from).unwrap_or(Value::Null));
        m.insert(
            "eos_token_id".into(),
            match self.eos_token_ids.as_slice() {
                [] => Value::Null,
                [one] => Value::from(*one),
                many => Value::from(many.to_vec()),
            },
        );
        m.insert("head_dim".into(), self.head_dim.into());
        m.insert("hidden_act".into(), "silu".into());
        m.insert("hidden_size".into(), self.hidden_size.into());
        m.insert("initializer_range".into(), Value::from(0.02));
        m.insert("intermediate_size".into(), self.intermediate_size.into());
        m.insert("max_position_embeddings".into(), self.max_position_embeddings.into());
        m.insert("num_attention_heads".into(), self.n_heads.into());
        m.insert("num_hidden_layers".into(), self.n_layers.into());
        m.insert("num_key_value_heads".into(), self.n_kv_heads.into());
        m.insert("rms_norm_eps".into(), num(self.rms_norm_eps));
        m.insert("rope_theta".into(), num(self.rope.theta));
        m.insert(
            "rope_scaling".into(),
            match self.rope.scaling {
                RopeScaling::None => Value::Null,
                RopeScaling::Linear { factor } => {
                    serde_json::json!({ "rope_type": "linear", "factor": num(factor) })
                }
                RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_max_position } => serde_json::json!({
                    "rope_type": "llama3",
                    "factor": num(factor),
                    "low_freq_factor": num(low_freq_factor),
                    "high_freq_factor": num(high_freq_factor),
                    "original_max_position_embeddings": original_max_position,
                }),
            },
        );
        m.insert("tie_word_embeddings".into(), self.tie_word_embeddings.into());
        m.insert("torch_dtype".into(), torch_dtype.into());
        m.insert("use_cache".into(), true.into());
        m.insert("vocab_size".into(), self.vocab_size.into());
        match self.arch {
            Arch::Llama => {
                m.insert("attention_bias".into(), false.into());
                m.insert("mlp_bias".into(), false.into());
                m.insert("pretraining_tp".into(), 1.into());
            }
            Arch::Qwen2 | Arch::Qwen3 => {
                if self.arch == Arch::Qwen3 {
                    m.insert("attention_bias".into(), false.into());
                }
                m.insert("use_sliding_window".into(), false.into());
                m.insert("sliding_window".into(), Value::Null);
                m.insert("max_window_layers".into(), self.n_layers.into());
            }
        }
        Ok(Value::Object(m))
    }
}

/// RoPE from `rope_theta` + `rope_scaling` (transformers 4) or `rope_parameters`
/// (transformers 5). When both are present they must agree.
fn read_rope<'a>(f: &mut Fields<'a>, head_dim: usize) -> Result<RopeSpec> {
    let theta_field = f.f64_opt("rope_theta")?;
    let scaling_field = f.get("rope_scaling");
    let params = f.get("rope_parameters");
    let rotary_dim = u32::try_from(head_dim).context("head_dim too large")?;

    let mut theta = theta_field.unwrap_or(10000.0) as f32;
    let mut scaling = match scaling_field {
        None => RopeScaling::None,
        Some(s) => parse_rope_scaling(s, "rope_scaling")?.0,
    };
    if let Some(p) = params {
        let (from_params, params_theta) = parse_rope_scaling(p, "rope_parameters")?;
        if scaling_field.is_some() && from_params != scaling {
            bail!("config.json `rope_scaling` and `rope_parameters` disagree; kiln cannot tell which applies");
        }
        if let Some(t) = params_theta {
            if theta_field.is_some_and(|x| x as f32 != t) {
                bail!("config.json `rope_theta` and `rope_parameters.rope_theta` disagree");
            }
            theta = t;
        }
        scaling = from_params;
    }
    Ok(RopeSpec { style: RopeStyle::HalfSplit, theta, rotary_dim, scaling })
}

/// Parses a `rope_scaling` / `rope_parameters` object: the scaling, and `rope_theta` if it
/// holds one. Unknown keys and unsupported types are refused by name.
fn parse_rope_scaling(v: &Value, field: &str) -> Result<(RopeScaling, Option<f32>)> {
    let obj = v.as_object().with_context(|| format!("config.json `{field}` must be an object, found {v}"))?;
    let ty = obj
        .get("rope_type")
        .or_else(|| obj.get("type"))
        .map(|t| t.as_str().with_context(|| format!("config.json `{field}.rope_type` must be a string, found {t}")))
        .transpose()?
        .unwrap_or("default");
    let num = |key: &str| -> Result<Option<f32>> {
        match obj.get(key).filter(|x| !x.is_null()) {
            None => Ok(None),
            Some(x) => {
                x.as_f64().map(|f| Some(f as f32)).with_context(|| format!("config.json `{field}.{key}` must be a number, found {x}"))
            }
        }
    };
    let need = |key: &str| -> Result<f32> { num(key)?.with_context(|| format!("config.json `{field}` of type `{ty}` needs `{key}`")) };
    let theta = num("rope_theta")?;
    let (scaling, allowed): (RopeScaling, &[&str]) = match ty {
        "default" => (RopeScaling::None, &[]),
        "linear" => (RopeScaling::Linear { factor: need("factor")? }, &["factor"]),
        "llama3" => {
            let orig = obj
                .get("original_max_position_embeddings")
                .and_then(Value::as_u64)
                .and_then(|u| u32::try_from(u).ok())
                .with_context(|| format!("config.json `{field}` of type llama3 needs an integer `original_max_position_embeddings`"))?;
            (
                RopeScaling::Llama3 {
                    factor: need("factor")?,
                    low_freq_factor: need("low_freq_factor")?,
                    high_freq_factor: need("high_freq_factor")?,
                    original_max_position: orig,
                },
                &["factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"],
            )
        }
        other => bail!("config.json `{field}` type `{other}` is not supported by kiln (supported: default, linear, llama3)"),
    };
    for key in obj.keys() {
        if !matches!(key.as_str(), "rope_type" | "type" | "rope_theta") && !allowed.contains(&key.as_str()) {
            bail!("config.json field `{field}.{key}` is not supported by kiln for RoPE type `{ty}`");
        }
    }
    Ok((scaling, theta))
}
