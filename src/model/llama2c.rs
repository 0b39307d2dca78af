//! llama2.c legacy checkpoints (`stories260K.bin`, version 0 export) and llama2.c tokenizer
//! files (`tok512.bin`, `tokenizer.bin`).
//!
//! Owns: the 7 × i32 header, the fixed order of the f32 weight arrays and their mapping to
//! kiln's canonical tensor names, and the llama2.c tokenizer format.
//! Never: accepts a file whose size differs from what its header implies (a truncated or
//! padded file is refused with both sizes), or reads the newer versioned exports (`ak42`).
//!
//! Checkpoint layout (llama2.c `run.c`, `memory_map_weights`), all little-endian:
//! header `dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len` (i32; a negative
//! vocab_size means a separate classifier follows), then f32 arrays:
//! `token_embedding [vocab, dim]`, `rms_att [L, dim]`, `wq [L, dim, dim]`, `wk [L, kv_dim, dim]`,
//! `wv [L, kv_dim, dim]`, `wo [L, dim, dim]`, `rms_ffn [L, dim]`, `w1 [L, hidden, dim]` (gate),
//! `w2 [L, dim, hidden]` (down), `w3 [L, hidden, dim]` (up), `rms_final [dim]`,
//! `freq_cis_real [seq_len, head_size/2]` and `freq_cis_imag [seq_len, head_size/2]` (unused,
//! skipped), then `wcls [vocab, dim]` when the classifier is not shared. Matrices are
//! `[out, in]` row-major, which is kiln's canonical layout, and RoPE rotates adjacent pairs.
//!
//! Tokenizer layout: i32 `max_token_length`, then per token: f32 score, i32 length, bytes.
//! llama2.c fixes BOS = 1 and EOS = 2 (pieces `"\n<s>\n"` and `"\n</s>\n"`) and UNK = 0.

use super::bytes::{map_file, read_small_file, ModelBytes, Reader};
use super::tokenizer_spm::{infer_kinds, SpmSpecials, SpmTokenizer};
use super::{Arch, LoadedModel, ModelConfig, SrcDType, TensorRef, WeightSource};
use crate::ir::{RopeScaling, RopeSpec, RopeStyle};
use anyhow::{bail, Context, Result};
use std::collections::HashMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// Magic of llama2.c's versioned exports (`export.py --version 1/2`), "ak42" little-endian.
const VERSIONED_MAGIC: u32 = 0x616b_3432;
pub const LLAMA2C_BOS: u32 = 1;
pub const LLAMA2C_EOS: u32 = 2;
pub const LLAMA2C_UNK: u32 = 0;

/// Canonical name, shape and f32-element range of each tensor, in file order.
type TensorLayout = Vec<(String, Vec<usize>, Range<usize>)>;

/// The checkpoint header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Llama2cHeader {
    pub dim: usize,
    pub hidden_dim: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub vocab_size: usize,
    /// The output classifier is the token embedding (header vocab_size > 0).
    pub shared_classifier: bool,
    pub seq_len: usize,
}

pub const HEADER_BYTES: usize = 7 * 4;

impl Llama2cHeader {
    pub fn parse(bytes: &[u8], file_name: &str) -> Result<Llama2cHeader> {
        let mut r = Reader::new(bytes, file_name);
        if bytes.len() >= 4 && u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) == VERSIONED_MAGIC {
            bail!(
                "`{file_name}` is a versioned llama2.c export (magic `ak42`); kiln reads only the legacy format \
                 (`export.py --version 0`) or GGUF"
            );
        }
        let names = ["dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"];
        let mut v = [0i32; 7];
        for (slot, name) in v.iter_mut().zip(names) {
            *slot = r.i32(&format_args!("llama2.c header field `{name}`"))?;
        }
        for (i, name) in names.iter().enumerate() {
            let ok = if *name == "vocab_size" { v[i] != 0 && v[i] != i32::MIN } else { v[i] > 0 };
            if !ok {
                bail!(
                    "`{file_name}` is not a llama2.c checkpoint: header field `{name}` is {} (header {v:?}); \
                     give --model a .gguf file, a llama2.c .bin, or a Hugging Face directory",
                    v[i]
                );
            }
        }
        let h = Llama2cHeader {
            dim: v[0] as usize,
            hidden_dim: v[1] as usize,
            n_layers: v[2] as usize,
            n_heads: v[3] as usize,
            n_kv_heads: v[4] as usize,
            vocab_size: v[5].unsigned_abs() as usize,
            shared_classifier: v[5] > 0,
            seq_len: v[6] as usize,
        };
        if !h.dim.is_multiple_of(h.n_heads) || !h.n_heads.is_multiple_of(h.n_kv_heads) {
            bail!(
                "`{file_name}` is not a valid llama2.c checkpoint: dim {} is not a multiple of n_heads {}, \
                 or n_heads is not a multiple of n_kv_heads {}",
                h.dim,
                h.n_heads,
                h.n_kv_heads
            );
        }
        Ok(h)
    }

    pub fn head_dim(&self) -> usize {
        self.dim / self.n_heads
    }

    pub fn kv_dim(&self) -> usize {
        self.head_dim() * self.n_kv_heads
    }

    pub fn config(&self) -> Result<ModelConfig> {
        let head_dim = self.head_dim();
        let config = ModelConfig {
            arch: Arch::Llama,
            vocab_size: self.vocab_size,
            hidden_size: self.dim,
            intermediate_size: self.hidden_dim,
            n_layers: self.n_layers,
            n_heads: self.n_heads,
            n_kv_heads: self.n_kv_heads,
            head_dim,
            rms_norm_eps: 1e-5,
            rope: RopeSpec {
                style: RopeStyle::Interleaved,
                theta: 10000.0,
                rotary_dim: u32::try_from(head_dim).context("head_dim too large")?,
                scaling: RopeScaling::None,
            },
            tie_word_embeddings: self.shared_classifier,
            qkv_bias: false,
            qk_norm: false,
            max_position_embeddings: self.seq_len,
            bos_token_id: Some(LLAMA2C_BOS),
            eos_token_ids: vec![LLAMA2C_EOS],
        };
        config.validate()?;
        super::ensure_addressable(&config)?;
        Ok(config)
    }

    /// Size in bytes of a checkpoint with this header, `None` on overflow. Computed without
    /// allocating, so a corrupt layer count is refused before any per-layer table is built.
    pub fn expected_file_bytes(&self) -> Option<usize> {
        let (d, f, v, l) = (self.dim, self.hidden_dim, self.vocab_size, self.n_layers);
        let kvd = self.kv_dim();
        let per_layer =
            [d, d.checked_mul(d)?, kvd.checked_mul(d)?.checked_mul(2)?, d.checked_mul(d)?, d, f.checked_mul(d)?.checked_mul(3)?]
                .into_iter()
                .try_fold(0usize, |a, x| a.checked_add(x))?;
        let embeddings = v.checked_mul(d)?.checked_mul(if self.shared_classifier { 1 } else { 2 })?;
        let freq_cis = self.seq_len.checked_mul(self.head_dim() / 2)?.checked_mul(2)?;
        let floats = l.checked_mul(per_layer)?.checked_add(embeddings)?.checked_add(d)?.checked_add(freq_cis)?;
        floats.checked_mul(4)?.checked_add(HEADER_BYTES)
    }

    /// Every tensor's canonical name, shape and f32-element range, in file order, plus the
    /// total number of f32 elements after the header. `None` on overflow.
    fn layout(&self) -> Option<(TensorLayout, usize)> {
        let (d, f, v, l) = (self.dim, self.hidden_dim, self.vocab_size, self.n_layers);
        let kvd = self.kv_dim();
        let mut tensors = Vec::new();
        let mut at = 0usize;
        let push_stacked = |tensors: &mut Vec<_>, at: &mut usize, name: &str, shape: Vec<usize>, stacked: bool| -> Option<()> {
            let numel = shape.iter().try_fold(1usize, |a, &x| a.checked_mul(x))?;
            if stacked {
                for i in 0..l {
                    let end = at.checked_add(numel)?;
                    tensors.push((format!("blk.{i}.{name}"), shape.clone(), *at..end));
                    *at = end;
                }
            } else {
                let end = at.checked_add(numel)?;
                tensors.push((name.to_string(), shape, *at..end));
                *at = end;
            }
            Some(())
        };
        push_stacked(&mut tensors, &mut at, "token_embd.weight", vec![v, d], false)?;
        push_stacked(&mut tensors, &mut at, "attn_norm.weight", vec![d], true)?;
        push_stacked(&mut tensors, &mut at, "attn_q.weight", vec![d, d], true)?;
        push_stacked(&mut tensors, &mut at, "attn_k.weight", vec![kvd, d], true)?;
        push_stacked(&mut tensors, &mut at, "attn_v.weight", vec![kvd, d], true)?;
        push_stacked(&mut tensors, &mut at, "attn_output.weight", vec![d, d], true)?;
        push_stacked(&mut tensors, &mut at, "ffn_norm.weight", vec![d], true)?;
        push_stacked(&mut tensors, &mut at, "ffn_gate.weight", vec![f, d], true)?;
        push_stacked(&mut tensors, &mut at, "ffn_down.weight", vec![d, f], true)?;
        push_stacked(&mut tensors, &mut at, "ffn_up.weight", vec![f, d], true)?;
        push_stacked(&mut tensors, &mut at, "output_norm.weight", vec![d], false)?;
        // freq_cis_real and freq_cis_imag: RoPE tables of the legacy format, recomputed by kiln.
        let freq_cis = self.seq_len.checked_mul(self.head_dim() / 2)?.checked_mul(2)?;
        at = at.checked_add(freq_cis)?;
        if !self.shared_classifier {
            push_stacked(&mut tensors, &mut at, "output.weight", vec![v, d], false)?;
        }
        Some((tensors, at))
    }
}

/// A llama2.c checkpoint as a [`WeightSource`] (all tensors f32).
pub struct Llama2cWeights {
    bytes: ModelBytes,
    file_name: String,
    /// Canonical name -> (shape, byte range in the file).
    tensors: HashMap<String, (Vec<usize>, Range<usize>)>,
    order: Vec<String>,
}

impl Llama2cWeights {
    /// Parses and size-checks a checkpoint.
    pub fn new(bytes: ModelBytes, file_name: &str) -> Result<(ModelConfig, Llama2cWeights)> {
        let header = Llama2cHeader::parse(&bytes, file_name)?;
        let config = header.config().with_context(|| format!("`{file_name}`: header {header:?} is not a valid model"))?;
        let Some(expected) = header.expected_file_bytes() else {
            bail!("`{file_name}`: header {header:?} describes an impossibly large model");
        };
        if bytes.len() != expected {
            bail!(
                "`{file_name}` is {} bytes, but a llama2.c checkpoint with dim {}, hidden_dim {}, {} layers, {} heads, \
                 {} kv heads, vocab {} ({}) and seq_len {} must be exactly {expected} bytes{}",
                bytes.len(),
                header.dim,
                header.hidden_dim,
                header.n_layers,
                header.n_heads,
                header.n_kv_heads,
                header.vocab_size,
                if header.shared_classifier { "shared classifier" } else { "separate classifier" },
                header.seq_len,
                if bytes.len() < expected { " (the file is truncated)" } else { " (is it a llama2.c legacy checkpoint?)" }
            );
        }
        let layout = match header.layout() {
            Some((layout, floats)) if floats * 4 + HEADER_BYTES == expected => layout,
            _ => bail!("internal error: llama2.c layout of `{file_name}` disagrees with its size"),
        };
        let mut tensors = HashMap::new();
        let mut order = Vec::new();
        for (name, shape, elems) in layout {
            let range = HEADER_BYTES + elems.start * 4..HEADER_BYTES + elems.end * 4;
            order.push(name.clone());
            tensors.insert(name, (shape, range));
        }
        Ok((config, Llama2cWeights { bytes, file_name: file_name.to_string(), tensors, order }))
    }
}

impl WeightSource for Llama2cWeights {
    fn tensor(&self, name: &str) -> Result<TensorRef<'_>> {
        let (shape, range) = self.tensors.get(name).with_context(|| format!("`{}` has no tensor `{name}`", self.file_name))?;
        let data = self.bytes.get(range.clone()).with_context(|| format!("`{}`: tensor `{name}` lies outside the file", self.file_name))?;
        Ok(TensorRef { dtype: SrcDType::F32, shape: shape.clone(), data })
    }

    fn describe(&self) -> String {
        self.file_name.clone()
    }

    fn tensor_names(&self) -> Option<Vec<String>> {
        Some(self.order.clone())
    }
}

/// Parses a llama2.c tokenizer file holding exactly `vocab_size` tokens.
pub fn parse_llama2c_tokenizer(bytes: &[u8], file_name: &str, vocab_size: usize) -> Result<SpmTokenizer> {
    let mut r = Reader::new(bytes, file_name);
    let max_len = r.i32(&"llama2.c tokenizer max_token_length")?;
    if max_len < 0 {
        bail!("`{file_name}` is not a llama2.c tokenizer: max_token_length is {max_len}");
    }
    let mut pieces = Vec::with_capacity(vocab_size.min(r.remaining() / 8));
    let mut scores = Vec::with_capacity(pieces.capacity());
    for id in 0..vocab_size {
        let score = r.f32(&format_args!("score of token {id} (the model's vocab has {vocab_size} tokens)"))?;
        let len = r.i32(&format_args!("length of token {id}"))?;
        let len = usize::try_from(len)
            .ok()
            .filter(|&n| n <= max_len as usize)
            .with_context(|| format!("`{file_name}` is corrupt: token {id} has length {len}, but max_token_length is {max_len}"))?;
        pieces.push(r.take(len, &format_args!("bytes of token {id}"))?.to_vec());
        scores.push(score);
    }
    if r.remaining() != 0 {
        bail!(
            "`{file_name}` has {} bytes after the {vocab_size} tokens the model's vocabulary needs: it belongs to a model \
             with a different vocabulary (give the matching tokenizer with --tokenizer)",
            r.remaining()
        );
    }
    let eos = [LLAMA2C_EOS];
    let kinds = infer_kinds(&pieces, Some(LLAMA2C_BOS), &eos, Some(LLAMA2C_UNK));
    let specials = SpmSpecials { bos: Some(LLAMA2C_BOS), eos: eos.to_vec(), unk: Some(LLAMA2C_UNK), add_bos: true, add_space_prefix: true };
    SpmTokenizer::new(pieces, scores, kinds, specials, &format!("`{file_name}`"))
}

/// Reads the llama2.c tokenizer at `path`.
pub fn open_llama2c_tokenizer(path: &Path, vocab_size: usize) -> Result<SpmTokenizer> {
    let bytes = read_small_file(path, "tokenizer file")?;
    parse_llama2c_tokenizer(&bytes, &path.display().to_string(), vocab_size)
}

/// Where a llama2.c tokenizer for a checkpoint at `model` with `vocab_size` tokens is looked
/// for when none is given: `tok{vocab}.bin`, then `tokenizer.bin`, next to the checkpoint.
pub fn find_llama2c_tokenizer(model: &Path, vocab_size: usize) -> Option<PathBuf> {
    let dir = model.parent().unwrap_or(Path::new("."));
    [format!("tok{vocab_size}.bin"), "tokenizer.bin".to_string()].into_iter().map(|n| dir.join(n)).find(|p| p.is_file())
}

/// Opens a llama2.c checkpoint; the tokenizer is `tokenizer` if given, else one found next to
/// the checkpoint (see [`find_llama2c_tokenizer`]), else none.
pub fn open_llama2c(path: &Path, tokenizer: Option<&Path>) -> Result<LoadedModel> {
    let file_name = path.display().to_string();
    let (config, weights) = Llama2cWeights::new(map_file(path)?, &file_name)?;
    let tokenizer = match (tokenizer, find_llama2c_tokenizer(path, config.vocab_size)) {
        (Some(p), _) => Some(super::open_tokenizer_file(p, &config)?),
        (None, Some(found)) => Some(Box::new(open_llama2c_tokenizer(&found, config.vocab_size)?) as Box<dyn super::Tokenizer>),
        (None, None) => None,
    };
    Ok(LoadedModel { config, weights: Box::new(weights), tokenizer, source: format!("{file_name} (llama2.c)") })
}
