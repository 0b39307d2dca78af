//! The GGUF parser and config reader: malformed files give errors naming the file (never a
//! panic), metadata kiln does not implement is refused by name, and the architecture-specific
//! facts (RoPE style, biases, Q/K norm, tying, RoPE scaling) are read right.

use kiln::ir::{RopeScaling, RopeSpec, RopeStyle};
use kiln::model::gguf::{GgmlType, GgufFile, GgufValue, GgufValueType, GgufWeights};
use kiln::model::gguf_write::GgufBuilder;
use kiln::model::{self, Arch, ModelConfig, SrcDType, WeightSource};
use std::path::{Path, PathBuf};

fn stories_gguf() -> Vec<u8> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/stories260K/stories260K.gguf");
    let path = if repo.is_file() {
        repo
    } else {
        PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/models/stories260K/stories260K.gguf"))
    };
    std::fs::read(path).unwrap()
}

fn open(bytes: Vec<u8>, name: &str) -> anyhow::Result<model::LoadedModel> {
    model::open_gguf_bytes(Box::leak(bytes.into_boxed_slice()), name)
}

fn err(bytes: Vec<u8>) -> String {
    match open(bytes, "test.gguf") {
        Ok(_) => panic!("expected an error"),
        Err(e) => format!("{e:#}"),
    }
}

/// Everything kiln derives from a buffer; must return (Ok or Err), never panic.
fn load_everything(bytes: &[u8]) -> anyhow::Result<()> {
    let m = kiln::model::gguf::load_gguf(kiln::model::bytes::ModelBytes::Owned(bytes.to_vec()), "fuzz.gguf")?;
    model::check_weights(&m.config, m.weights.as_ref())?;
    if let Some(t) = &m.tokenizer {
        let ids = t.encode("Once upon a time", true)?;
        for id in ids {
            t.decode_piece(None, id);
        }
    }
    Ok(())
}

#[test]
fn every_truncation_is_an_error_naming_the_file() {
    let bytes = stories_gguf();
    let file = GgufFile::parse(&bytes, "stories260K.gguf").unwrap();
    let header_end = file.data_offset as usize;
    // Every cut inside the header, and a sample of cuts inside the tensor data.
    let cuts = (0..header_end + 64).chain((header_end..bytes.len()).step_by(4093)).chain([bytes.len() - 1]);
    for cut in cuts {
        match GgufFile::parse(&bytes[..cut], "cut.gguf") {
            Ok(_) => panic!("a file cut at byte {cut} of {} parsed", bytes.len()),
            Err(e) => {
                let e = format!("{e:#}");
                assert!(e.contains("cut.gguf"), "cut {cut}: {e}");
                if cut >= 4 {
                    assert!(e.contains("truncated"), "cut {cut}: {e}");
                }
            }
        }
    }
}

/// Corrupts 1-4 header bytes of `original` `rounds` times; returns how many loads succeeded.
fn fuzz_header(original: &[u8], rounds: usize, seed: u64) -> usize {
    let header_end = GgufFile::parse(original, "x").unwrap().data_offset as usize;
    let mut state = seed;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut ok = 0;
    for _ in 0..rounds {
        let mut bytes = original.to_vec();
        for _ in 0..1 + next() % 4 {
            let at = (next() % header_end as u64) as usize;
            bytes[at] = match next() % 4 {
                0 => 0xFF,
                1 => 0,
                2 => bytes[at] ^ (1 << (next() % 8)),
                _ => next() as u8,
            };
        }
        ok += usize::from(load_everything(&bytes).is_ok());
    }
    ok
}

#[test]
fn random_corruption_never_panics() {
    let stories = stories_gguf();
    let ok = fuzz_header(&stories, 400, 0x9E37_79B9_7F4A_7C15);
    // Most flips land in token strings and scores, which stay loadable.
    assert!(ok > 0 && ok < 400, "{ok}");
    let tiny = builder_for(&tiny(Arch::Qwen2), "qwen2").build();
    let ok = fuzz_header(&tiny, 3000, 42);
    assert!(ok < 3000, "{ok}");
}

#[test]
fn bad_magic_and_versions() {
    let bytes = stories_gguf();
    let mut bad = bytes.clone();
    bad[..4].copy_from_slice(b"GGML");
    let e = err(bad);
    assert!(e.contains("test.gguf") && e.contains("is not a GGUF file"), "{e}");

    for (version, expect) in
        [(1u32, "GGUF version 1"), (4, "GGUF version 4; kiln reads versions 2 and 3"), (3u32.swap_bytes(), "big-endian")]
    {
        let mut b = bytes.clone();
        b[4..8].copy_from_slice(&version.to_le_bytes());
        let e = err(b);
        assert!(e.contains(expect), "version {version}: {e}");
    }
    // Version 2 has the same layout as 3 for little-endian files.
    let mut v2 = bytes.clone();
    v2[4..8].copy_from_slice(&2u32.to_le_bytes());
    assert!(open(v2, "v2.gguf").is_ok());
    assert!(err(Vec::new()).contains("is not a GGUF file"));
}

#[test]
fn huge_counts_are_refused_without_allocating() {
    let bytes = stories_gguf();
    let mut b = bytes.clone();
    b[16..24].copy_from_slice(&u64::MAX.to_le_bytes()); // metadata count
    assert!(err(b).contains("cannot fit"));
    // The first metadata value is the token array: claim 2^60 elements.
    let mut b = bytes.clone();
    let key_len = u64::from_le_bytes(b[24..32].try_into().unwrap()) as usize;
    let count_at = 32 + key_len + 4 + 4;
    b[count_at..count_at + 8].copy_from_slice(&(1u64 << 60).to_le_bytes());
    let e = err(b);
    assert!(e.contains("tokenizer.ggml.tokens") && e.contains("cannot fit"), "{e}");
}

/// A GGUF holding `config`'s tensors (deterministic bytes) with matching metadata.
fn builder_for(config: &ModelConfig, arch: &str) -> GgufBuilder {
    let mut b = GgufBuilder::new();
    let key = |k: &str| format!("{arch}.{k}");
    b.kv("general.architecture", GgufValue::String(arch.into()))
        .kv(&key("context_length"), GgufValue::U32(config.max_position_embeddings as u32))
        .kv(&key("embedding_length"), GgufValue::U32(config.hidden_size as u32))
        .kv(&key("block_count"), GgufValue::U32(config.n_layers as u32))
        .kv(&key("feed_forward_length"), GgufValue::U32(config.intermediate_size as u32))
        .kv(&key("attention.head_count"), GgufValue::U32(config.n_heads as u32))
        .kv(&key("attention.head_count_kv"), GgufValue::U32(config.n_kv_heads as u32))
        .kv(&key("attention.key_length"), GgufValue::U32(config.head_dim as u32))
        .kv(&key("attention.value_length"), GgufValue::U32(config.head_dim as u32))
        .kv(&key("attention.layer_norm_rms_epsilon"), GgufValue::F32(config.rms_norm_eps))
        .kv(&key("rope.freq_base"), GgufValue::F32(config.rope.theta))
        .kv(&key("vocab_size"), GgufValue::U32(config.vocab_size as u32))
        .kv("tokenizer.ggml.bos_token_id", GgufValue::U32(1))
        .kv("tokenizer.ggml.eos_token_id", GgufValue::U32(2));
    for (i, t) in config.tensors().iter().enumerate() {
        let n: usize = t.shape.iter().product();
        let data: Vec<u8> = (0..n).flat_map(|j| ((i * 1000 + j) as f32 * 0.001).to_le_bytes()).collect();
        b.tensor(&t.name, GgmlType::F32, &t.shape, data);
    }
    b
}

fn tiny(arch: Arch) -> ModelConfig {
    ModelConfig {
        arch,
        vocab_size: 32,
        hidden_size: 16,
        intermediate_size: 24,
        n_layers: 2,
        n_heads: 4,
        n_kv_heads: 2,
        head_dim: 4,
        rms_norm_eps: 1e-6,
        rope: RopeSpec {
            style: if arch == Arch::Llama { RopeStyle::Interleaved } else { RopeStyle::HalfSplit },
            theta: 10000.0,
            rotary_dim: 4,
            scaling: RopeScaling::None,
        },
        tie_word_embeddings: false,
        qkv_bias: arch == Arch::Qwen2,
        qk_norm: arch == Arch::Qwen3,
        max_position_embeddings: 128,
        bos_token_id: Some(1),
        eos_token_ids: vec![2],
    }
}

#[test]
fn synthetic_llama_qwen2_qwen3_configs() {
    for (arch, name) in [(Arch::Llama, "llama"), (Arch::Qwen2, "qwen2"), (Arch::Qwen3, "qwen3")] {
        let c = tiny(arch);
        let m = open(builder_for(&c, name).build(), "tiny.gguf").unwrap();
        assert_eq!(m.config, c, "{name}");
        assert!(m.tokenizer.is_none());
        let t = m.weights.tensor("blk.1.ffn_down.weight").unwrap();
        assert_eq!((t.dtype, t.shape.as_slice()), (SrcDType::F32, &[16, 24][..]));
    }
}

#[test]
fn f16_and_bf16_tensors_load() {
    let c = tiny(Arch::Llama);
    let mut b = builder_for(&c, "llama");
    b.tensor("blk.0.attn_q.weight", GgmlType::F16, &[16, 16], vec![0x3c; 16 * 16 * 2]);
    b.tensor("blk.0.attn_k.weight", GgmlType::BF16, &[8, 16], vec![0x3f; 8 * 16 * 2]);
    let m = open(b.build(), "mixed.gguf").unwrap();
    assert_eq!(m.weights.tensor("blk.0.attn_q.weight").unwrap().dtype, SrcDType::F16);
    assert_eq!(m.weights.tensor("blk.0.attn_k.weight").unwrap().dtype, SrcDType::BF16);
}

#[test]
fn quantized_tensor_is_recognized_but_not_loaded() {
    let c = tiny(Arch::Llama);
    let mut b = builder_for(&c, "llama");
    // Q4_1: blocks of 32 elements in 20 bytes; [16, 16] is 8 blocks.
    b.tensor("blk.0.attn_q.weight", GgmlType::Q4_1, &[16, 32], vec![0; 16 * 20]);
    let bytes = b.build();
    let file = GgufFile::parse(&bytes, "q.gguf").unwrap();
    let info = file.tensor_info("blk.0.attn_q.weight").unwrap();
    assert_eq!((info.ggml_type.name(), info.n_bytes), ("Q4_1", 320));
    let w = GgufWeights::new(kiln::model::bytes::ModelBytes::Owned(bytes), "q.gguf").unwrap();
    let e = format!("{:#}", w.tensor("blk.0.attn_q.weight").err().unwrap());
    assert!(e.contains("tensor `blk.0.attn_q.weight` in `q.gguf` is Q4_1; kiln loads only F32/F16/BF16 GGUF tensors so far"), "{e}");
    for (id, name) in [(8, "Q8_0"), (12, "Q4_K"), (14, "Q6_K"), (30, "BF16"), (39, "MXFP4")] {
        assert_eq!(GgmlType::from_id(id).unwrap().name(), name);
    }
    assert!(GgmlType::from_id(4).is_none(), "removed Q4_2");
}

#[test]
fn quantized_row_not_a_whole_block_is_corrupt() {
    let c = tiny(Arch::Llama);
    let mut b = builder_for(&c, "llama");
    b.tensor("blk.0.attn_q.weight", GgmlType::Q8_0, &[16, 16], vec![0; 16 * 34]);
    assert!(err(b.build()).contains("impossible dimensions"));
}

#[test]
fn unsupported_architecture_is_named() {
    let mut b = builder_for(&tiny(Arch::Llama), "llama");
    b.kv("general.architecture", GgufValue::String("gemma2".into()));
    let e = err(b.build());
    assert!(e.contains("architecture `gemma2` is not supported by kiln (supported: llama, qwen2, qwen3)"), "{e}");
}

#[test]
fn math_changing_metadata_is_refused_by_name() {
    let cases: Vec<(&str, GgufValue, &str)> = vec![
        ("llama.attention.sliding_window", GgufValue::U32(4096), "llama.attention.sliding_window"),
        ("llama.expert_count", GgufValue::U32(8), "llama.expert_count"),
        ("llama.logit_scale", GgufValue::F32(0.5), "llama.logit_scale"),
        ("llama.rope.scaling.type", GgufValue::String("yarn".into()), "RoPE scaling type `yarn` is not supported"),
        ("llama.attention.causal", GgufValue::Bool(false), "llama.attention.causal"),
    ];
    for (key, value, expect) in cases {
        let mut b = builder_for(&tiny(Arch::Llama), "llama");
        b.kv(key, value);
        let e = err(b.build());
        assert!(e.contains(expect) && e.contains("test.gguf"), "{key}: {e}");
    }
    // Harmless values of the same keys are accepted.
    let mut b = builder_for(&tiny(Arch::Llama), "llama");
    b.kv("llama.expert_count", GgufValue::U32(0))
        .kv("llama.attention.causal", GgufValue::Bool(true))
        .kv("llama.rope.scaling.type", GgufValue::String("none".into()))
        .kv("general.name", GgufValue::String("whatever".into()))
        .kv("general.file_type", GgufValue::U32(0));
    open(b.build(), "ok.gguf").unwrap();
}

#[test]
fn linear_rope_scaling_and_missing_metadata() {
    let mut b = builder_for(&tiny(Arch::Llama), "llama");
    b.kv("llama.rope.scaling.type", GgufValue::String("linear".into())).kv("llama.rope.scaling.factor", GgufValue::F32(4.0));
    assert_eq!(open(b.build(), "x.gguf").unwrap().config.rope.scaling, RopeScaling::Linear { factor: 4.0 });

    let mut b = builder_for(&tiny(Arch::Llama), "llama");
    b.remove_kv("llama.block_count");
    let e = err(b.build());
    assert!(e.contains("required metadata `llama.block_count` is missing"), "{e}");

    let mut b = builder_for(&tiny(Arch::Llama), "llama");
    b.kv("llama.block_count", GgufValue::String("two".into()));
    let e = err(b.build());
    assert!(e.contains("`llama.block_count` is string \"two\", expected a non-negative integer"), "{e}");
}

#[test]
fn llama3_rope_freqs_tensor_is_recognized() {
    let mut c = tiny(Arch::Llama);
    c.head_dim = 64;
    c.n_heads = 2;
    c.n_kv_heads = 1;
    c.hidden_size = 128;
    c.rope.rotary_dim = 64;
    c.rope.theta = 500000.0;
    let llama3 = RopeScaling::Llama3 { factor: 32.0, low_freq_factor: 1.0, high_freq_factor: 4.0, original_max_position: 8192 };
    let plain = RopeSpec { style: RopeStyle::HalfSplit, ..c.rope };
    let scaled = RopeSpec { scaling: llama3, ..plain };
    let factors: Vec<u8> = (0..32).flat_map(|i| (plain.inv_freq(i) / scaled.inv_freq(i)).to_le_bytes()).collect();
    let mut b = builder_for(&c, "llama");
    b.tensor("rope_freqs.weight", GgmlType::F32, &[32], factors.clone());
    let m = open(b.build(), "l3.gguf").unwrap();
    assert_eq!(m.config.rope.scaling, llama3);

    // Factors that are not Llama 3 scaling are refused.
    let mut odd = factors;
    odd[0..4].copy_from_slice(&3.0f32.to_le_bytes());
    let mut b = builder_for(&c, "llama");
    b.tensor("rope_freqs.weight", GgmlType::F32, &[32], odd);
    assert!(err(b.build()).contains("not Llama 3 scaling"));
}

#[test]
fn tied_output_when_output_weight_absent() {
    let mut c = tiny(Arch::Qwen2);
    c.tie_word_embeddings = true;
    let m = open(builder_for(&c, "qwen2").build(), "tied.gguf").unwrap();
    assert!(m.config.tie_word_embeddings);
    assert!(m.config.tensors().iter().all(|t| t.name != "output.weight"));
}

#[test]
fn tensor_past_end_of_file_is_truncation() {
    let mut bytes = builder_for(&tiny(Arch::Llama), "llama").build();
    bytes.truncate(bytes.len() - 1);
    let e = err(bytes);
    assert!(e.contains("test.gguf") && e.contains("is truncated") && e.contains("output.weight"), "{e}");
}

#[test]
fn misaligned_offset_and_bad_alignment_are_refused() {
    let mut b = builder_for(&tiny(Arch::Llama), "llama");
    b.kv("general.alignment", GgufValue::U32(24));
    assert!(err(b.build()).contains("expected a power of two"));
    let mut b = builder_for(&tiny(Arch::Llama), "llama");
    b.kv("general.alignment", GgufValue::U32(64));
    let m = open(b.build(), "a64.gguf").unwrap();
    assert_eq!(m.config, tiny(Arch::Llama));
}

#[test]
fn metadata_arrays_of_every_type_parse() {
    let mut b = builder_for(&tiny(Arch::Llama), "llama");
    let arrays = [
        GgufValue::Array(GgufValueType::U8, vec![GgufValue::U8(1)]),
        GgufValue::Array(GgufValueType::I16, vec![GgufValue::I16(-2)]),
        GgufValue::Array(GgufValueType::U64, vec![GgufValue::U64(3)]),
        GgufValue::Array(GgufValueType::F64, vec![GgufValue::F64(0.5)]),
        GgufValue::Array(GgufValueType::Bool, vec![GgufValue::Bool(true)]),
        GgufValue::Array(GgufValueType::Array, vec![GgufValue::Array(GgufValueType::String, vec![GgufValue::String("nested".into())])]),
    ];
    for (i, a) in arrays.iter().enumerate() {
        b.kv(&format!("general.test{i}"), a.clone());
    }
    let bytes = b.build();
    let f = GgufFile::parse(&bytes, "arr.gguf").unwrap();
    for (i, a) in arrays.iter().enumerate() {
        assert_eq!(f.get(&format!("general.test{i}")), Some(a));
    }
}
