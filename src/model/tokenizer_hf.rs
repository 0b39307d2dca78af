//! Tokenizers run by the `tokenizers` crate: a Hugging Face `tokenizer.json`, or a GGUF
//! byte-level BPE vocabulary (`tokenizer.ggml.model = gpt2`, e.g. SmolLM2, Qwen, Llama 3)
//! rebuilt as a `tokenizers` BPE model.
//!
//! Owns: wrapping `tokenizers::Tokenizer` in kiln's [`Tokenizer`] trait, the table of bytes each
//! token decodes to (so `decode_piece` is exact even when a token holds half a UTF-8
//! character), and the pre-tokenizer regexes of the GGUF `tokenizer.ggml.pre` types kiln knows.
//! Never: guesses a pre-tokenizer for an unknown `tokenizer.ggml.pre` (a wrong split gives
//! plausible but different ids), or prints special tokens as text.

use super::gguf::{GgufFile, GgufValueType};
use super::{ModelConfig, Tokenizer};
use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::Path;

/// How BOS gets in front of a prompt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BosPolicy {
    /// `tokenizer.json`'s post-processor adds what the model wants (`add_special_tokens`).
    PostProcessor,
    /// kiln prepends BOS when asked and the model wants one (GGUF `tokenizer.ggml.add_bos_token`).
    Prepend { model_wants_bos: bool },
}

/// How the vocabulary spells bytes, which decides what each token decodes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PieceStyle {
    /// GPT-2 byte-level: every byte is a printable character (`Ġ` is a space).
    ByteLevel,
    /// SentencePiece: `▁` is a space, `<0xXX>` is a byte, a leading space after BOS is dropped.
    SentencePiece,
    /// Anything else: each token decoded alone by the tokenizer's decoder.
    Other,
}

pub struct HfTokenizer {
    inner: tokenizers::Tokenizer,
    /// Bytes each token id adds to the text; special tokens add nothing.
    pieces: Vec<Vec<u8>>,
    style: PieceStyle,
    bos: Option<u32>,
    eos: Vec<u32>,
    bos_policy: BosPolicy,
}

/// GPT-2's byte <-> printable character table (`bytes_to_unicode`), inverted.
fn byte_level_decoder() -> HashMap<char, u8> {
    let mut map = HashMap::with_capacity(256);
    let mut extra = 0u32;
    for b in 0..=255u8 {
        let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
        let c = if printable {
            char::from(b)
        } else {
            extra += 1;
            char::from_u32(255 + extra).unwrap_or('\u{FFFD}')
        };
        map.insert(c, b);
    }
    map
}

fn piece_bytes(style: PieceStyle, token: &str, byte_level: &HashMap<char, u8>) -> Vec<u8> {
    match style {
        PieceStyle::ByteLevel => {
            let mut out = Vec::with_capacity(token.len());
            for c in token.chars() {
                match byte_level.get(&c) {
                    Some(&b) => out.push(b),
                    None => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
                }
            }
            out
        }
        PieceStyle::SentencePiece => match super::tokenizer_spm::parse_byte_piece(token.as_bytes()) {
            Some(b) => vec![b],
            None => token.replace('\u{2581}', " ").into_bytes(),
        },
        PieceStyle::Other => token.as_bytes().to_vec(),
    }
}

impl HfTokenizer {
    /// Loads a Hugging Face `tokenizer.json`; BOS/EOS ids come from the model config.
    pub fn from_file(path: &Path, config: &ModelConfig) -> Result<HfTokenizer> {
        if !path.exists() {
            bail!("tokenizer file `{}` not found", path.display());
        }
        let inner = tokenizers::Tokenizer::from_file(path).map_err(|e| anyhow!("cannot load tokenizer `{}`: {e}", path.display()))?;
        Self::from_tokenizer(inner, config.bos_token_id, config.eos_token_ids.clone())
    }

    /// Wraps a loaded `tokenizers::Tokenizer`.
    pub fn from_tokenizer(inner: tokenizers::Tokenizer, bos: Option<u32>, eos: Vec<u32>) -> Result<HfTokenizer> {
        let decoder = serde_json::to_string(&inner.get_decoder()).unwrap_or_default();
        let style = if decoder.contains("ByteLevel") {
            PieceStyle::ByteLevel
        } else if decoder.contains("ByteFallback") || decoder.contains("Metaspace") || decoder.contains('\u{2581}') {
            PieceStyle::SentencePiece
        } else {
            PieceStyle::Other
        };
        let vocab = inner.get_vocab(true);
        let n = vocab.values().copied().max().map_or(0, |m| m as usize + 1);
        let added = inner.get_added_tokens_decoder();
        let byte_level = byte_level_decoder();
        let mut pieces = vec![Vec::new(); n];
        for (token, &id) in &vocab {
            pieces[id as usize] = match added.get(&id) {
                Some(t) if t.special => Vec::new(),
                Some(t) => t.content.as_bytes().to_vec(),
                None if style == PieceStyle::Other => inner.decode(&[id], false).map(String::into_bytes).unwrap_or_default(),
                None => piece_bytes(style, token, &byte_level),
            };
        }
        Ok(HfTokenizer { inner, pieces, style, bos, eos, bos_policy: BosPolicy::PostProcessor })
    }

    /// Rebuilds a GGUF byte-level BPE vocabulary (`tokenizer.ggml.model = gpt2`):
    /// `tokenizer.ggml.tokens`, `.merges`, `.token_type` and the pre-tokenizer named by
    /// `tokenizer.ggml.pre`.
    pub fn from_gguf_bpe(file: &GgufFile, config: &ModelConfig) -> Result<HfTokenizer> {
        let name = &file.file_name;
        let tokens = file
            .array_opt("tokenizer.ggml.tokens", GgufValueType::String)?
            .with_context(|| format!("`{name}`: tokenizer model is `gpt2` but `tokenizer.ggml.tokens` is missing"))?;
        let tokens: Vec<&str> = tokens.iter().map(|t| t.as_str().unwrap_or_default()).collect();
        let merges = file
            .array_opt("tokenizer.ggml.merges", GgufValueType::String)?
            .with_context(|| format!("`{name}`: tokenizer model is `gpt2` but `tokenizer.ggml.merges` is missing"))?;
        let types: Vec<i64> = match file.get("tokenizer.ggml.token_type").and_then(|v| v.as_array()) {
            Some(t) => t.iter().map(|v| v.as_f64().unwrap_or(1.0) as i64).collect(),
            None => vec![1; tokens.len()],
        };
        if types.len() != tokens.len() {
            bail!("`{name}`: {} tokens but {} token types", tokens.len(), types.len());
        }
        let pre = file.str_opt("tokenizer.ggml.pre")?.unwrap_or("default");
        let (pre_tokenizer, normalizer, ignore_merges) = gguf_pre_tokenizer(pre).with_context(|| format!("`{name}`"))?;

        let mut vocab = serde_json::Map::with_capacity(tokens.len());
        let mut added = Vec::new();
        for (id, (&token, &ty)) in tokens.iter().zip(&types).enumerate() {
            // Keep the first id of a duplicated token, like llama.cpp.
            vocab.entry(token.to_string()).or_insert(Value::from(id));
            // Control (3) and user-defined (4) tokens are matched whole in the input.
            if ty == 3 || ty == 4 {
                added.push(json!({
                    "id": id, "content": token, "single_word": false, "lstrip": false, "rstrip": false,
                    "normalized": false, "special": ty == 3,
                }));
            }
        }
        let merges: Vec<&str> = merges.iter().map(|m| m.as_str().unwrap_or_default()).collect();
        let spec = json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": added,
            "normalizer": normalizer,
            "pre_tokenizer": pre_tokenizer,
            "post_processor": null,
            "decoder": { "type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true },
            "model": {
                "type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
                "ignore_merges": ignore_merges, "vocab": vocab, "merges": merges,
            },
        });
        let inner = tokenizers::Tokenizer::from_bytes(serde_json::to_vec(&spec)?)
            .map_err(|e| anyhow!("`{name}`: cannot build the byte-level BPE tokenizer from its vocabulary: {e}"))?;
        let byte_level = byte_level_decoder();
        let pieces = tokens
            .iter()
            .zip(&types)
            .map(|(t, &ty)| if ty == 3 { Vec::new() } else { piece_bytes(PieceStyle::ByteLevel, t, &byte_level) })
            .collect();
        let model_wants_bos = file.bool_opt("tokenizer.ggml.add_bos_token")?.unwrap_or(false);
        Ok(HfTokenizer {
            inner,
            pieces,
            style: PieceStyle::ByteLevel,
            bos: config.bos_token_id,
            eos: config.eos_token_ids.clone(),
            bos_policy: BosPolicy::Prepend { model_wants_bos },
        })
    }

    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }
}

/// GGUF `tokenizer.ggml.pre` names kiln knows, with the regex llama.cpp uses for each.
pub const SUPPORTED_GGUF_PRE: &[&str] = &["gpt2", "gpt-2", "smollm", "llama3", "llama-v3", "llama-bpe", "qwen2", "deepseek-r1-qwen"];

const LLAMA3_REGEX: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Pre-tokenizer, normalizer and `ignore_merges` of a GGUF `tokenizer.ggml.pre` type, in
/// `tokenizer.json` form (as the models' own `tokenizer.json` files spell them).
fn gguf_pre_tokenizer(pre: &str) -> Result<(Value, Value, bool)> {
    let byte_level =
        |use_regex: bool| json!({ "type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": use_regex });
    let split = |regex: &str| json!({ "type": "Split", "pattern": { "Regex": regex }, "behavior": "Isolated", "invert": false });
    Ok(match pre {
        // ByteLevel's own regex is GPT-2's.
        "gpt2" | "gpt-2" => (byte_level(true), Value::Null, false),
        "smollm" => (
            json!({ "type": "Sequence", "pretokenizers": [
                { "type": "Digits", "individual_digits": true },
                byte_level(true),
            ]}),
            Value::Null,
            false,
        ),
        "llama3" | "llama-v3" | "llama-bpe" => {
            (json!({ "type": "Sequence", "pretokenizers": [split(LLAMA3_REGEX), byte_level(false)] }), Value::Null, true)
        }
        "qwen2" | "deepseek-r1-qwen" => {
            (json!({ "type": "Sequence", "pretokenizers": [split(QWEN2_REGEX), byte_level(false)] }), json!({ "type": "NFC" }), false)
        }
        other => bail!(
            "byte-level BPE pre-tokenizer `{other}` (tokenizer.ggml.pre) is not supported by kiln (supported: {}); \
             use the model's Hugging Face directory with its tokenizer.json instead",
            SUPPORTED_GGUF_PRE.join(", ")
        ),
    })
}

impl Tokenizer for HfTokenizer {
    fn encode(&self, text: &str, add_bos: bool) -> Result<Vec<u32>> {
        let with_specials = self.bos_policy == BosPolicy::PostProcessor && add_bos;
        let enc = self.inner.encode(text, with_specials).map_err(|e| anyhow!("tokenizer cannot encode the text: {e}"))?;
        let mut ids = enc.get_ids().to_vec();
        if let BosPolicy::Prepend { model_wants_bos } = self.bos_policy {
            if let (true, true, Some(bos)) = (add_bos, model_wants_bos, self.bos) {
                ids.insert(0, bos);
            }
        }
        Ok(ids)
    }

    fn decode_piece(&self, prev: Option<u32>, token: u32) -> Vec<u8> {
        let Some(piece) = self.pieces.get(token as usize) else {
            return Vec::new();
        };
        if self.style == PieceStyle::SentencePiece && prev.is_some() && prev == self.bos {
            return piece.strip_prefix(b" ").unwrap_or(piece).to_vec();
        }
        piece.clone()
    }

    fn vocab_size(&self) -> usize {
        self.pieces.len()
    }

    fn bos(&self) -> Option<u32> {
        self.bos
    }

    fn eos(&self) -> Vec<u32> {
        self.eos.clone()
    }
}
