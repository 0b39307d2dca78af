//! Loading the real stories260K model from its two formats (GGUF and llama2.c), and the
//! errors `model::open` gives for files it cannot use. No GPU needed.

use kiln::ir::{RopeScaling, RopeStyle};
use kiln::model::gguf::GgufFile;
use kiln::model::{self, Arch, LoadedModel, SrcDType};
use std::path::{Path, PathBuf};

/// The stories260K files: the repo's copy under `models/` if present, else the shared one.
fn stories_dir() -> PathBuf {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/stories260K");
    if repo.join("stories260K.gguf").is_file() {
        repo
    } else {
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/models/stories260K/")).to_path_buf()
    }
}

fn open_gguf() -> LoadedModel {
    model::open(&stories_dir().join("stories260K.gguf"), None).expect("stories260K.gguf opens")
}

fn open_bin() -> LoadedModel {
    let dir = stories_dir();
    model::open(&dir.join("stories260K.bin"), Some(&dir.join("tok512.bin"))).expect("stories260K.bin opens")
}

fn err_of<T>(r: anyhow::Result<T>) -> String {
    match r {
        Ok(_) => panic!("expected an error"),
        Err(e) => format!("{e:#}"),
    }
}

#[test]
fn stories260k_config_from_both_formats() {
    let g = open_gguf().config;
    let b = open_bin().config;
    for c in [&g, &b] {
        assert_eq!(c.arch, Arch::Llama);
        assert_eq!((c.hidden_size, c.intermediate_size, c.n_layers), (64, 172, 5));
        assert_eq!((c.n_heads, c.n_kv_heads, c.head_dim, c.vocab_size), (8, 4, 8, 512));
        assert_eq!(c.rope.style, RopeStyle::Interleaved);
        assert_eq!((c.rope.theta, c.rope.rotary_dim, c.rope.scaling), (10000.0, 8, RopeScaling::None));
        assert_eq!(c.rms_norm_eps, 1e-5);
        assert!(c.tie_word_embeddings, "the GGUF's output.weight is a copy of token_embd.weight: tied");
        assert!(!c.qkv_bias && !c.qk_norm);
        assert_eq!((c.bos_token_id, c.eos_token_ids.as_slice()), (Some(1), &[2][..]));
    }
    // The only difference: llama2.c's seq_len vs the GGUF's context_length.
    assert_eq!((b.max_position_embeddings, g.max_position_embeddings), (512, 2048));
    let mut g2 = g.clone();
    g2.max_position_embeddings = b.max_position_embeddings;
    assert_eq!(g2, b);
}

#[test]
fn stories260k_tensors_bit_identical_between_formats() {
    let (g, b) = (open_gguf(), open_bin());
    for spec in g.config.tensors() {
        let tg = g.weights.tensor(&spec.name).unwrap();
        let tb = b.weights.tensor(&spec.name).unwrap();
        assert_eq!((tg.dtype, tb.dtype), (SrcDType::F32, SrcDType::F32), "{}", spec.name);
        assert_eq!(tg.shape, spec.shape, "{}", spec.name);
        assert_eq!(tb.shape, spec.shape, "{}", spec.name);
        assert!(tg.data == tb.data, "tensor {} differs between the GGUF and llama2.c files", spec.name);
    }
    assert_eq!(g.config.tensors().len(), 2 + 5 * 9);
}

#[test]
fn stories260k_llama2c_finds_tokenizer_next_to_checkpoint() {
    let m = model::open(&stories_dir().join("stories260K.bin"), None).unwrap();
    let t = m.tokenizer.expect("tok512.bin next to the checkpoint");
    assert_eq!(t.vocab_size(), 512);
    assert!(m.source.contains("llama2.c"));
}

#[test]
fn gguf_from_static_bytes() {
    let bytes = std::fs::read(stories_dir().join("stories260K.gguf")).unwrap();
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    let m = model::open_gguf_bytes(bytes, "embedded:stories260K.gguf").unwrap();
    assert_eq!(m.config, open_gguf().config);
    assert!(m.weights.describe().contains("embedded:stories260K.gguf"));
}

#[test]
fn missing_model_file_says_what_to_give() {
    let e = err_of(model::open(Path::new("/nonexistent/x.gguf"), None));
    assert!(e.contains("model file `/nonexistent/x.gguf` not found"), "{e}");
    assert!(e.contains("give --model a .gguf file, a llama2.c .bin, or a Hugging Face directory"), "{e}");
}

#[test]
fn missing_tokenizer_file_is_named() {
    let e = err_of(model::open(&stories_dir().join("stories260K.bin"), Some(Path::new("/nonexistent/tok.bin"))));
    assert!(e.contains("/nonexistent/tok.bin") && e.contains("not found"), "{e}");
}

#[test]
fn directory_without_config_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let e = err_of(model::open(dir.path(), None));
    assert!(e.contains("without config.json"), "{e}");
}

#[test]
fn truncated_llama2c_names_both_sizes() {
    let bytes = std::fs::read(stories_dir().join("stories260K.bin")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cut.bin");
    for cut in [0usize, 3, 27, 28, 1000, bytes.len() - 1] {
        std::fs::write(&path, &bytes[..cut]).unwrap();
        let e = err_of(model::open(&path, None));
        assert!(e.contains("cut.bin"), "cut {cut}: {e}");
        if cut >= 28 {
            assert!(e.contains(&format!("is {cut} bytes")) && e.contains("must be exactly 1056540 bytes"), "cut {cut}: {e}");
            assert!(e.contains("truncated"), "{e}");
        }
    }
    // One byte too many is refused too.
    let mut long = bytes.clone();
    long.push(0);
    std::fs::write(&path, &long).unwrap();
    assert!(err_of(model::open(&path, None)).contains("must be exactly 1056540 bytes"));
}

#[test]
fn llama2c_tokenizer_of_wrong_vocab_is_refused() {
    let dir = stories_dir();
    let tok = std::fs::read(dir.join("tok512.bin")).unwrap();
    let e = err_of(kiln::model::llama2c::parse_llama2c_tokenizer(&tok, "tok512.bin", 500));
    assert!(e.contains("different vocabulary"), "{e}");
    let e = err_of(kiln::model::llama2c::parse_llama2c_tokenizer(&tok, "tok512.bin", 600));
    assert!(e.contains("tok512.bin") && e.contains("token 512"), "{e}");
}

#[test]
fn check_weights_names_tensor_and_shapes() {
    // Rewrite the GGUF with attn_k of block 2 given a wrong shape (same byte count).
    let bytes = std::fs::read(stories_dir().join("stories260K.gguf")).unwrap();
    let file = GgufFile::parse(&bytes, "stories260K.gguf").unwrap();
    let mut b = kiln::model::gguf_write::GgufBuilder::new();
    for (k, v) in &file.metadata {
        b.kv(k, v.clone());
    }
    for t in &file.tensors {
        let data = file.tensor_data(&bytes, t).unwrap().to_vec();
        let shape = if t.name == "blk.2.attn_k.weight" { vec![64, 32] } else { t.shape() };
        b.tensor(&t.name, t.ggml_type, &shape, data);
    }
    let bytes: &'static [u8] = Box::leak(b.build().into_boxed_slice());
    let e = err_of(model::open_gguf_bytes(bytes, "bad-shape.gguf"));
    assert!(e.contains("bad-shape.gguf"), "{e}");
    assert!(e.contains("tensor `blk.2.attn_k.weight` has shape [64, 32], but the config needs [32, 64]"), "{e}");
}

#[test]
fn check_weights_refuses_unused_tensor() {
    let bytes = std::fs::read(stories_dir().join("stories260K.gguf")).unwrap();
    let file = GgufFile::parse(&bytes, "x.gguf").unwrap();
    let mut b = kiln::model::gguf_write::GgufBuilder::new();
    for (k, v) in &file.metadata {
        b.kv(k, v.clone());
    }
    for t in &file.tensors {
        b.tensor(&t.name, t.ggml_type, &t.shape(), file.tensor_data(&bytes, t).unwrap().to_vec());
    }
    b.tensor("blk.0.attn_output.bias", kiln::model::gguf::GgmlType::F32, &[64], vec![0; 256]);
    let bytes: &'static [u8] = Box::leak(b.build().into_boxed_slice());
    let e = err_of(model::open_gguf_bytes(bytes, "extra.gguf"));
    assert!(e.contains("tensor `blk.0.attn_output.bias` is not used"), "{e}");
}

#[test]
fn corrupt_llama2c_headers_are_refused_without_allocating() {
    use kiln::model::bytes::ModelBytes;
    use kiln::model::llama2c::Llama2cWeights;
    let bytes = std::fs::read(stories_dir().join("stories260K.bin")).unwrap();
    // (header field index, value, expected message)
    let cases = [
        (2, i32::MAX, "must be exactly"),
        (0, i32::MAX, "not a multiple of n_heads"),
        (1, i32::MAX, "must be exactly"),
        (5, i32::MIN, "header field `vocab_size` is -2147483648"),
        (5, -512, "separate classifier"),
        (3, 7, "not a multiple of n_heads"),
        (4, 3, "not a multiple of n_kv_heads"),
        (6, -1, "header field `seq_len` is -1"),
        (0, 0, "header field `dim` is 0"),
    ];
    for (field, value, expect) in cases {
        let mut b = bytes.clone();
        b[field * 4..field * 4 + 4].copy_from_slice(&value.to_le_bytes());
        let e = err_of(Llama2cWeights::new(ModelBytes::Owned(b), "bad.bin"));
        assert!(e.contains("bad.bin") && e.contains(expect), "field {field} = {value}: {e}");
    }
    let mut b = bytes.clone();
    b[..4].copy_from_slice(&0x616b_3432u32.to_le_bytes());
    assert!(err_of(Llama2cWeights::new(ModelBytes::Owned(b), "v1.bin")).contains("versioned llama2.c export"));
}
