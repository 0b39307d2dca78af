//! Hugging Face directories: real `config.json` files parse to the published shapes, unknown
//! or unsupported fields are refused by name, and `write_hf_dir` output reads back
//! bit-identical (single file and sharded).

use kiln::ir::{RopeScaling, RopeSpec, RopeStyle};
use kiln::model::hf::{half_split_to_interleaved, interleaved_to_half_split};
use kiln::model::{self, Arch, ModelConfig, SrcDType};
use safetensors::tensor::{Dtype, SafeTensors, TensorView};
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/hf_configs").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn err_of<T>(r: anyhow::Result<T>) -> String {
    match r {
        Ok(_) => panic!("expected an error"),
        Err(e) => format!("{e:#}"),
    }
}

/// The fixture `name` with `edit` applied to its JSON object.
fn edited(name: &str, edit: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>)) -> String {
    let mut v: serde_json::Value = serde_json::from_str(&fixture(name)).unwrap();
    edit(v.as_object_mut().unwrap());
    v.to_string()
}

#[test]
fn real_configs_match_published_shapes() {
    for (file, preset) in [
        ("llama3.2-1b.json", "llama3.2-1b"),
        ("llama3.1-8b.json", "llama3.1-8b"),
        ("qwen2.5-0.5b.json", "qwen2.5-0.5b"),
        ("qwen3-0.6b.json", "qwen3-0.6b"),
        ("qwen3-0.6b-transformers5.json", "qwen3-0.6b"),
    ] {
        let c = ModelConfig::from_hf_json(&fixture(file)).unwrap_or_else(|e| panic!("{file}: {e:#}"));
        assert_eq!(c, ModelConfig::preset(preset).unwrap(), "{file}");
    }
    let smol = ModelConfig::from_hf_json(&fixture("smollm2-135m-instruct.json")).unwrap();
    assert_eq!(smol.arch, Arch::Llama);
    assert_eq!((smol.hidden_size, smol.intermediate_size, smol.n_layers), (576, 1536, 30));
    assert_eq!((smol.n_heads, smol.n_kv_heads, smol.head_dim, smol.vocab_size), (9, 3, 64, 49152));
    assert_eq!(smol.rope, RopeSpec { style: RopeStyle::HalfSplit, theta: 100000.0, rotary_dim: 64, scaling: RopeScaling::None });
    assert!(smol.tie_word_embeddings && !smol.qkv_bias && !smol.qk_norm);
    assert_eq!((smol.bos_token_id, smol.eos_token_ids.clone(), smol.max_position_embeddings), (Some(1), vec![2], 8192));
}

#[test]
fn to_hf_json_round_trips_every_preset() {
    for name in model::config::PRESETS {
        let c = ModelConfig::preset(name).unwrap();
        let json = c.to_hf_json().unwrap();
        assert_eq!(ModelConfig::from_hf_json(&json).unwrap(), c, "{name}:\n{json}");
        assert!(json.contains("\"torch_dtype\": \"bfloat16\""));
    }
    let json = ModelConfig::preset("llama3.2-1b").unwrap().to_hf_json().unwrap();
    // The f32's shortest decimal, not its f64 widening (9.999999747378752e-6).
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["rms_norm_eps"].as_f64(), Some(1e-5), "{json}");
}

#[test]
fn unknown_field_is_refused_by_name() {
    let text = edited("llama3.2-1b.json", |o| {
        o.insert("foo".into(), 1.into());
    });
    let e = err_of(ModelConfig::from_hf_json(&text));
    assert!(e.contains("config.json field `foo` is not supported by kiln"), "{e}");
    let text = edited("qwen3-0.6b.json", |o| {
        o.insert("foo".into(), 1.into());
        o.insert("bar".into(), serde_json::Value::Null);
    });
    let e = err_of(ModelConfig::from_hf_json(&text));
    assert!(e.contains("config.json fields `bar`, `foo` are not supported by kiln"), "{e}");
}

#[test]
fn unsupported_features_are_refused_with_reasons() {
    use serde_json::json;
    let cases: Vec<(&str, serde_json::Value, &str)> = vec![
        ("qwen2.5-0.5b.json", json!({"use_sliding_window": true}), "sliding-window attention is not supported yet"),
        ("qwen3-0.6b.json", json!({"attention_bias": true}), "no output-projection bias"),
        ("llama3.2-1b.json", json!({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}), "type `yarn` is not supported"),
        ("llama3.2-1b.json", json!({"rope_scaling": {"type": "dynamic", "factor": 2.0}}), "type `dynamic` is not supported"),
        ("llama3.2-1b.json", json!({"hidden_act": "gelu"}), "`hidden_act` `gelu` is not supported"),
        ("llama3.2-1b.json", json!({"partial_rotary_factor": 0.5}), "`partial_rotary_factor` = 0.5"),
        ("llama3.2-1b.json", json!({"mlp_bias": true}), "`mlp_bias` = true is not supported"),
        ("llama3.2-1b.json", json!({"pretraining_tp": 2}), "`pretraining_tp` = 2"),
        ("llama3.2-1b.json", json!({"quantization_config": {"quant_method": "awq"}}), "method `awq`"),
        ("llama3.2-1b.json", json!({"model_type": "gemma2"}), "`model_type` `gemma2` is not supported"),
        ("llama3.2-1b.json", json!({"architectures": ["LlamaForSequenceClassification"]}), "LlamaForSequenceClassification"),
        ("qwen3-0.6b.json", json!({"layer_types": ["full_attention", "sliding_attention"]}), "`layer_types`"),
        ("qwen3-0.6b.json", json!({"hidden_size": "1024"}), "`hidden_size` must be a non-negative integer"),
        ("qwen3-0.6b.json", json!({"num_key_value_heads": 5}), "not a multiple of num_key_value_heads 5"),
        (
            "llama3.2-1b.json",
            json!({"model_type": "mistral", "architectures": ["MistralForCausalLM"], "sliding_window": 4096}),
            "`sliding_window` = 4096: sliding-window attention is not supported yet",
        ),
    ];
    for (file, patch, expect) in cases {
        let text = edited(file, |o| {
            for (k, v) in patch.as_object().unwrap() {
                o.insert(k.clone(), v.clone());
            }
        });
        let e = err_of(ModelConfig::from_hf_json(&text));
        assert!(e.contains(expect), "{file} + {patch}: {e}");
    }
    assert!(err_of(ModelConfig::from_hf_json("[1]")).contains("not a JSON object"));
    assert!(err_of(ModelConfig::from_hf_json("{")).contains("not valid JSON"));
}

#[test]
fn mistral_without_sliding_window_is_llama() {
    let text = edited("llama3.2-1b.json", |o| {
        o.insert("model_type".into(), "mistral".into());
        o.insert("architectures".into(), serde_json::json!(["MistralForCausalLM"]));
        o.insert("sliding_window".into(), serde_json::Value::Null);
    });
    let c = ModelConfig::from_hf_json(&text).unwrap();
    assert_eq!(c, ModelConfig::preset("llama3.2-1b").unwrap());
}

fn tiny(arch: Arch, tied: bool) -> ModelConfig {
    let c = ModelConfig {
        arch,
        vocab_size: 48,
        hidden_size: 32,
        intermediate_size: 40,
        n_layers: 3,
        n_heads: 4,
        n_kv_heads: 2,
        head_dim: 8,
        rms_norm_eps: 1e-6,
        rope: RopeSpec { style: RopeStyle::HalfSplit, theta: 1e6, rotary_dim: 8, scaling: RopeScaling::Linear { factor: 2.0 } },
        tie_word_embeddings: tied,
        qkv_bias: arch == Arch::Qwen2,
        qk_norm: arch == Arch::Qwen3,
        max_position_embeddings: 256,
        bos_token_id: Some(1),
        eos_token_ids: vec![2, 3],
    };
    c.validate().unwrap();
    c
}

/// Deterministic pseudo-random bytes of `spec`'s tensors, in bf16.
fn random_tensors(c: &ModelConfig) -> Vec<(String, SrcDType, Vec<usize>, Vec<u8>)> {
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    c.tensors()
        .into_iter()
        .map(|t| {
            let n: usize = t.shape.iter().product();
            let data = (0..n)
                .flat_map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    half::bf16::from_f32((state % 2000) as f32 / 1000.0 - 1.0).to_le_bytes()
                })
                .collect();
            (t.name, SrcDType::BF16, t.shape, data)
        })
        .collect()
}

fn assert_same_tensors(c: &ModelConfig, expected: &[(String, SrcDType, Vec<usize>, Vec<u8>)], m: &model::LoadedModel) {
    for (name, dtype, shape, data) in expected {
        let t = m.weights.tensor(name).unwrap();
        assert_eq!((&t.dtype, &t.shape), (dtype, shape), "{name}");
        assert!(t.data == data.as_slice(), "{name} differs after the round trip");
    }
    assert_eq!(expected.len(), c.tensors().len());
}

#[test]
fn write_then_open_round_trips_every_arch() {
    for (arch, tied) in [(Arch::Llama, false), (Arch::Llama, true), (Arch::Qwen2, true), (Arch::Qwen3, false)] {
        let c = tiny(arch, tied);
        let tensors = random_tensors(&c);
        let dir = tempfile::tempdir().unwrap();
        model::write_hf_dir(dir.path(), &c, tensors.clone()).unwrap();
        let m = model::open(dir.path(), None).unwrap();
        assert_eq!(m.config, c, "{arch:?}");
        assert!(m.tokenizer.is_none());
        assert_same_tensors(&c, &tensors, &m);
        let json = std::fs::read_to_string(dir.path().join("config.json")).unwrap();
        assert!(json.contains("\"torch_dtype\": \"bfloat16\""), "{json}");
        // The safetensors header is one the reference crate accepts.
        let bytes = std::fs::read(dir.path().join("model.safetensors")).unwrap();
        let st = SafeTensors::deserialize(&bytes).unwrap();
        assert!(st.names().contains(&"model.layers.2.mlp.down_proj.weight"));
        assert!(!dir.path().join("model.safetensors.partial").exists());
    }
}

#[test]
fn writer_refuses_wrong_or_missing_tensors() {
    let c = tiny(Arch::Llama, false);
    let mut tensors = random_tensors(&c);
    let dir = tempfile::tempdir().unwrap();
    tensors[1].2 = vec![16, 2];
    let e = err_of(model::write_hf_dir(dir.path(), &c, tensors.clone()));
    assert!(e.contains("tensor `blk.0.attn_norm.weight` has shape [16, 2], but the config needs [32]"), "{e}");
    assert!(!dir.path().join("model.safetensors").exists() && !dir.path().join("model.safetensors.partial").exists());
    let e = err_of(model::write_hf_dir(dir.path(), &c, random_tensors(&c).into_iter().skip(1)));
    assert!(e.contains("tensors missing") && e.contains("token_embd.weight"), "{e}");
    let mut q2 = tiny(Arch::Qwen2, false);
    q2.qkv_bias = false;
    let e = err_of(model::write_hf_dir(dir.path(), &q2, random_tensors(&q2)));
    assert!(e.contains("Qwen2ForCausalLM always has q/k/v biases"), "{e}");
}

fn stories_dir() -> PathBuf {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/stories260K");
    if repo.join("stories260K.gguf").is_file() {
        repo
    } else {
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/models/stories260K/")).to_path_buf()
    }
}

#[test]
fn interleaved_model_is_written_half_split() {
    let src = model::open(&stories_dir().join("stories260K.gguf"), None).unwrap();
    let c = &src.config;
    let tensors: Vec<_> = c
        .tensors()
        .into_iter()
        .map(|t| {
            let r = src.weights.tensor(&t.name).unwrap();
            (t.name, r.dtype, r.shape, r.data.to_vec())
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    model::write_hf_dir(dir.path(), c, tensors.clone()).unwrap();
    let m = model::open(dir.path(), None).unwrap();
    let mut expected = c.clone();
    expected.rope.style = RopeStyle::HalfSplit;
    assert_eq!(m.config, expected);
    for (name, _, _, data) in &tensors {
        let got = m.weights.tensor(name).unwrap().data.to_vec();
        let heads = if name.ends_with("attn_q.weight") {
            Some(c.n_heads)
        } else if name.ends_with("attn_k.weight") {
            Some(c.n_kv_heads)
        } else {
            None
        };
        match heads {
            Some(h) => {
                assert_ne!(&got, data, "{name} must be permuted");
                assert_eq!(&half_split_to_interleaved(&got, h, c.head_dim).unwrap(), data, "{name}");
            }
            None => assert_eq!(&got, data, "{name}"),
        }
    }
}

#[test]
fn rope_permutation_moves_pairs() {
    // One head of 4 rows, one byte per row: interleaved pairs (0,1),(2,3) -> half-split (0,2),(1,3).
    let rows = [10u8, 11, 20, 21];
    assert_eq!(interleaved_to_half_split(&rows, 1, 4).unwrap(), [10, 20, 11, 21]);
    assert_eq!(half_split_to_interleaved(&[10, 20, 11, 21], 1, 4).unwrap(), rows);
}

/// Rewrites `dir/model.safetensors` into the files of `shards` (file name -> tensor names),
/// plus an index; `index_lie` puts one tensor in the wrong file of the index.
fn reshard(dir: &Path, shards: &[(&str, Vec<String>)], index_lie: Option<(&str, &str)>) {
    let bytes = std::fs::read(dir.join("model.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let mut weight_map = serde_json::Map::new();
    for (file, names) in shards {
        let views: Vec<(String, TensorView)> = names.iter().map(|n| (n.clone(), st.tensor(n).unwrap())).collect();
        let out = safetensors::serialize(views, None).unwrap();
        std::fs::write(dir.join(file), out).unwrap();
        for n in names {
            weight_map.insert(n.clone(), (*file).into());
        }
    }
    if let Some((tensor, file)) = index_lie {
        weight_map.insert(tensor.into(), file.into());
    }
    let index = serde_json::json!({ "metadata": { "total_size": 0 }, "weight_map": weight_map });
    std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();
    std::fs::remove_file(dir.join("model.safetensors")).unwrap();
}

#[test]
fn sharded_directory_opens_and_index_is_checked() {
    let c = tiny(Arch::Qwen3, true);
    let tensors = random_tensors(&c);
    let names: Vec<String> = c.tensors().iter().map(|t| kiln::model::hf::canonical_to_hf(&t.name).unwrap()).collect();
    let (a, b) = names.split_at(names.len() / 2);
    let shards = [("model-00001-of-00002.safetensors", a.to_vec()), ("model-00002-of-00002.safetensors", b.to_vec())];

    let dir = tempfile::tempdir().unwrap();
    model::write_hf_dir(dir.path(), &c, tensors.clone()).unwrap();
    reshard(dir.path(), &shards, None);
    let m = model::open(dir.path(), None).unwrap();
    assert_same_tensors(&c, &tensors, &m);

    let dir = tempfile::tempdir().unwrap();
    model::write_hf_dir(dir.path(), &c, tensors.clone()).unwrap();
    reshard(dir.path(), &shards, Some(("model.norm.weight", "model-00001-of-00002.safetensors")));
    let e = err_of(model::open(dir.path(), None));
    assert!(e.contains("puts tensor `model.norm.weight` in `model-00001-of-00002.safetensors`, but it is in `model-00002"), "{e}");
}

/// Rewrites `dir/model.safetensors` with `edit` applied to its (name, dtype, shape, bytes) list.
fn rewrite(dir: &Path, edit: impl FnOnce(&mut Vec<(String, Dtype, Vec<usize>, Vec<u8>)>)) {
    let bytes = std::fs::read(dir.join("model.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let mut list: Vec<_> = st.tensors().into_iter().map(|(n, v)| (n, v.dtype(), v.shape().to_vec(), v.data().to_vec())).collect();
    edit(&mut list);
    let views: Vec<(String, TensorView)> =
        list.iter().map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap())).collect();
    std::fs::write(dir.join("model.safetensors"), safetensors::serialize(views, None).unwrap()).unwrap();
}

#[test]
fn tied_lm_head_is_ignored_and_unknown_tensors_refused() {
    let c = tiny(Arch::Llama, true);
    let tensors = random_tensors(&c);
    let dir = tempfile::tempdir().unwrap();
    model::write_hf_dir(dir.path(), &c, tensors.clone()).unwrap();
    rewrite(dir.path(), |l| {
        let embd = l.iter().find(|t| t.0 == "model.embed_tokens.weight").unwrap().clone();
        l.push(("lm_head.weight".into(), embd.1, embd.2, embd.3));
        l.push(("model.layers.0.self_attn.rotary_emb.inv_freq".into(), Dtype::F32, vec![4], vec![0; 16]));
    });
    let m = model::open(dir.path(), None).unwrap();
    assert_same_tensors(&c, &tensors, &m);

    rewrite(dir.path(), |l| l.push(("model.layers.0.self_attn.o_proj.bias".into(), Dtype::BF16, vec![32], vec![0; 64])));
    let e = err_of(model::open(dir.path(), None));
    assert!(e.contains("tensors kiln does not understand: `model.layers.0.self_attn.o_proj.bias`"), "{e}");
}

#[test]
fn unsupported_dtype_and_bias_mismatch_are_refused() {
    let c = tiny(Arch::Llama, true);
    let dir = tempfile::tempdir().unwrap();
    model::write_hf_dir(dir.path(), &c, random_tensors(&c)).unwrap();
    rewrite(dir.path(), |l| {
        let t = l.iter_mut().find(|t| t.0 == "model.norm.weight").unwrap();
        t.1 = Dtype::I16;
    });
    let e = err_of(model::open(dir.path(), None));
    assert!(e.contains("tensor `model.norm.weight`") && e.contains("is I16; kiln loads only F32/F16/BF16 safetensors"), "{e}");

    // A q_proj bias in a llama checkpoint whose config says no bias: refused, not ignored.
    let dir = tempfile::tempdir().unwrap();
    model::write_hf_dir(dir.path(), &c, random_tensors(&c)).unwrap();
    rewrite(dir.path(), |l| l.push(("model.layers.1.self_attn.q_proj.bias".into(), Dtype::BF16, vec![32], vec![0; 64])));
    let e = err_of(model::open(dir.path(), None));
    assert!(e.contains("tensor `blk.1.attn_q.bias` is not used by a llama model"), "{e}");
}

#[test]
fn config_and_weights_disagree() {
    let c = tiny(Arch::Qwen2, false);
    let dir = tempfile::tempdir().unwrap();
    model::write_hf_dir(dir.path(), &c, random_tensors(&c)).unwrap();
    let path = dir.path().join("config.json");
    let json = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, json.replace("\"intermediate_size\": 40", "\"intermediate_size\": 41")).unwrap();
    let e = err_of(model::open(dir.path(), None));
    assert!(e.contains("tensor `blk.0.ffn_gate.weight` has shape [40, 32], but the config needs [41, 32]"), "{e}");
    assert!(e.contains(&dir.path().display().to_string()), "{e}");

    std::fs::write(&path, json.replace("\"num_hidden_layers\": 3", "\"num_hidden_layers\": 3000000000")).unwrap();
    let e = err_of(model::open(dir.path(), None));
    assert!(e.contains("too few for the 3000000000 layers"), "{e}");

    std::fs::remove_file(dir.path().join("model.safetensors")).unwrap();
    std::fs::write(&path, &json).unwrap();
    let e = err_of(model::open(dir.path(), None));
    assert!(e.contains("has no model.safetensors"), "{e}");
}

#[test]
fn per_tensor_dtype_is_kept() {
    let c = tiny(Arch::Llama, true);
    let mut tensors = random_tensors(&c);
    // f32 norms, bf16 matrices, f16 embedding: each read back as written.
    let to = |d: &[u8], dtype: SrcDType| -> Vec<u8> {
        d.chunks(2)
            .flat_map(|b| {
                let x = half::bf16::from_le_bytes([b[0], b[1]]).to_f32();
                match dtype {
                    SrcDType::F32 => x.to_le_bytes().to_vec(),
                    SrcDType::F16 => half::f16::from_f32(x).to_le_bytes().to_vec(),
                    SrcDType::BF16 => b.to_vec(),
                }
            })
            .collect()
    };
    for t in tensors.iter_mut() {
        let dtype = if t.0.ends_with("norm.weight") {
            SrcDType::F32
        } else if t.0 == "token_embd.weight" {
            SrcDType::F16
        } else {
            continue;
        };
        t.3 = to(&t.3, dtype);
        t.1 = dtype;
    }
    let dir = tempfile::tempdir().unwrap();
    model::write_hf_dir(dir.path(), &c, tensors.clone()).unwrap();
    let m = model::open(dir.path(), None).unwrap();
    assert_same_tensors(&c, &tensors, &m);
    let json = std::fs::read_to_string(dir.path().join("config.json")).unwrap();
    assert!(json.contains("\"torch_dtype\": \"float16\""), "{json}");
}

/// Configs saved by transformers 5.24 (`AutoConfig.from_pretrained(kiln dir).save_pretrained`,
/// and default `LlamaConfig()`/`Qwen2Config()`/`Qwen3Config()`): `rope_parameters`, `dtype`,
/// `layer_types` and null ids must all be understood.
#[test]
fn transformers5_saved_configs_parse() {
    for name in ["default-llama", "default-qwen2", "default-qwen3", "tiny-llama", "tiny-qwen2", "tiny-qwen3", "stories260K"] {
        let file = format!("transformers5-{name}.json");
        ModelConfig::from_hf_json(&fixture(&file)).unwrap_or_else(|e| panic!("{file}: {e:#}"));
    }
    let llama = ModelConfig::from_hf_json(&fixture("transformers5-tiny-llama.json")).unwrap();
    assert_eq!(
        llama.rope.scaling,
        RopeScaling::Llama3 { factor: 8.0, low_freq_factor: 1.0, high_freq_factor: 4.0, original_max_position: 64 }
    );
    assert_eq!((llama.rope.theta, llama.eos_token_ids.clone(), llama.tie_word_embeddings), (1e6, vec![2, 3], false));
    let q2 = ModelConfig::from_hf_json(&fixture("transformers5-tiny-qwen2.json")).unwrap();
    assert!(q2.qkv_bias && q2.tie_word_embeddings && !q2.qk_norm);
    let q3 = ModelConfig::from_hf_json(&fixture("transformers5-tiny-qwen3.json")).unwrap();
    assert!(!q3.qkv_bias && q3.qk_norm);
    let stories = ModelConfig::from_hf_json(&fixture("transformers5-stories260K.json")).unwrap();
    let expected = ModelConfig::from_hf_json(
        &model::open(&stories_dir().join("stories260K.gguf"), None)
            .map(|m| {
                let mut c = m.config;
                c.rope.style = RopeStyle::HalfSplit;
                c.to_hf_json_with_dtype("float32").unwrap()
            })
            .unwrap(),
    )
    .unwrap();
    assert_eq!(stories, expected);
}
