//! Weight loaders and tokenizers. Files are memory-mapped (memmap2) and checked against the
//! config's tensor table before anything is planned or uploaded.
//!
//! Owns: file formats (GGUF, llama2.c, Hugging Face directories), the mapping of their tensor
//! names and layouts to kiln's canonical table, tokenizers.
//! Never: converts to a plan's dtype (that is `runtime::weights`, at the plan's offsets), or
//! ignores a tensor or config field it does not understand.
//!
//! Files: [`bytes`] (mapping, bounds-checked reader), [`gguf`] (+ [`gguf_write`] for tests and
//! export), [`llama2c`], [`hf`] (safetensors directories, reader and writer) with
//! [`hf_config`] (`config.json`), [`tokenizer_spm`] (SentencePiece BPE) and [`tokenizer_hf`]
//! (`tokenizers` crate: `tokenizer.json` and GGUF byte-level BPE). This file: [`open`], the
//! format detection, and [`check_weights`].

pub mod bytes;
pub mod config;
pub mod gguf;
pub mod gguf_write;
pub mod hf;
pub mod hf_config;
pub mod llama2c;
pub mod tokenizer_hf;
pub mod tokenizer_spm;

pub use config::{Arch, ModelConfig, TensorSpec};
pub use hf::write_hf_dir;

use anyhow::{bail, Context, Result};
use std::path::Path;

/// Element type of a tensor as stored in a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SrcDType {
    F32,
    F16,
    BF16,
}

impl SrcDType {
    pub fn size(self) -> usize {
        match self {
            SrcDType::F32 => 4,
            SrcDType::F16 | SrcDType::BF16 => 2,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            SrcDType::F32 => "f32",
            SrcDType::F16 => "f16",
            SrcDType::BF16 => "bf16",
        }
    }
}

/// A tensor's bytes as they lie in the file (little-endian), in canonical layout:
/// row-major `[out, in]` with the canonical shape of [`TensorSpec`].
pub struct TensorRef<'a> {
    pub dtype: SrcDType,
    pub shape: Vec<usize>,
    pub data: &'a [u8],
}

/// Where a model's tensors come from. Implementations check each tensor's dtype, shape and
/// byte length when asked, and say which file and tensor is wrong.
pub trait WeightSource {
    /// The tensor of canonical name `name`, or an error naming the file and the tensor.
    fn tensor(&self, name: &str) -> anyhow::Result<TensorRef<'_>>;
    /// Human-readable origin (`path/to/model.gguf`), for messages.
    fn describe(&self) -> String;
    /// Canonical names of every tensor the source holds, when it can list them; lets
    /// [`check_weights`] refuse tensors the config does not use (they would be ignored, and the
    /// model would compute something else). `None`: the source cannot list its tensors.
    fn tensor_names(&self) -> Option<Vec<String>> {
        None
    }
}

/// Text <-> token ids.
pub trait Tokenizer {
    /// Token ids of `text`; a BOS token first when `add_bos` and the model has one.
    fn encode(&self, text: &str, add_bos: bool) -> anyhow::Result<Vec<u32>>;
    /// Bytes that token `token` adds to the text, given the token before it (`None` at the
    /// start): SentencePiece drops the leading space right after BOS; `<0xXX>` pieces are bytes.
    fn decode_piece(&self, prev: Option<u32>, token: u32) -> Vec<u8>;
    fn vocab_size(&self) -> usize;
    fn bos(&self) -> Option<u32>;
    fn eos(&self) -> Vec<u32>;
}

/// A model opened from disk (or from bytes embedded in the binary).
pub struct LoadedModel {
    pub config: ModelConfig,
    pub weights: Box<dyn WeightSource>,
    pub tokenizer: Option<Box<dyn Tokenizer>>,
    /// What was opened, for messages and `--stats`.
    pub source: String,
}

/// Opens a model: a Hugging Face directory (with `config.json`), a GGUF file (`.gguf` or GGUF
/// magic), or a llama2.c checkpoint. `tokenizer` overrides the tokenizer (`tokenizer.json`, or a
/// llama2.c `tok*.bin`); without it the model's own is used (GGUF vocabulary, the directory's
/// `tokenizer.json`, a `tok{vocab}.bin`/`tokenizer.bin` next to a llama2.c checkpoint).
/// Every tensor is checked against the config's table ([`check_weights`]) before returning.
pub fn open(path: &Path, tokenizer: Option<&Path>) -> Result<LoadedModel> {
    if !path.exists() {
        bail!("model file `{}` not found (give --model a .gguf file, a llama2.c .bin, or a Hugging Face directory)", path.display());
    }
    let model = if path.is_dir() {
        if !path.join("config.json").is_file() {
            bail!(
                "`{}` is a directory without config.json; kiln opens Hugging Face directories (config.json + model.safetensors), \
                 .gguf files and llama2.c .bin files",
                path.display()
            );
        }
        hf::open_hf_dir(path, tokenizer)?
    } else if is_gguf(path)? {
        let mut m = gguf::open_gguf(path)?;
        if let Some(t) = tokenizer {
            m.tokenizer = Some(open_tokenizer_file(t, &m.config)?);
        }
        m
    } else {
        llama2c::open_llama2c(path, tokenizer)?
    };
    check_weights(&model.config, model.weights.as_ref())?;
    check_tokenizer(&model)?;
    Ok(model)
}

/// Opens a GGUF model embedded in the binary (`include_bytes!`); `name` stands for the file in
/// messages.
pub fn open_gguf_bytes(bytes: &'static [u8], name: &str) -> Result<LoadedModel> {
    let model = gguf::load_gguf(bytes::ModelBytes::Static(bytes), name)?;
    check_weights(&model.config, model.weights.as_ref())?;
    check_tokenizer(&model)?;
    Ok(model)
}

/// Whether `path` is a GGUF file: by extension, or by its magic.
fn is_gguf(path: &Path) -> Result<bool> {
    if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf")) {
        return Ok(true);
    }
    use std::io::Read;
    let mut magic = [0u8; 4];
    let mut f = std::fs::File::open(path).with_context(|| format!("cannot open `{}`", path.display()))?;
    let n = f.read(&mut magic).with_context(|| format!("cannot read `{}`", path.display()))?;
    Ok(n == 4 && magic == gguf::GGUF_MAGIC)
}

/// Loads a tokenizer file given on its own: `*.json` is a Hugging Face `tokenizer.json`,
/// anything else a llama2.c tokenizer with `config.vocab_size` tokens.
pub fn open_tokenizer_file(path: &Path, config: &ModelConfig) -> Result<Box<dyn Tokenizer>> {
    if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("json")) {
        Ok(Box::new(tokenizer_hf::HfTokenizer::from_file(path, config)?))
    } else {
        Ok(Box::new(llama2c::open_llama2c_tokenizer(path, config.vocab_size)?))
    }
}

/// Every tensor of `config.tensors()` exists in `weights` with the right shape and byte length,
/// and (when `weights` can list them) no tensor is left over. All problems are reported
/// together (up to 10), each naming the source, the tensor, and expected vs found.
pub fn check_weights(config: &ModelConfig, weights: &dyn WeightSource) -> Result<()> {
    let names = weights.tensor_names();
    if let Some(names) = &names {
        // Every layer has several tensors: a layer count above the tensor count is corrupt, and
        // refusing it here keeps the table built below proportional to the file.
        if config.n_layers > names.len() {
            bail!("`{}` holds {} tensors, too few for the {} layers its config declares", weights.describe(), names.len(), config.n_layers);
        }
    }
    let table = config.tensors();
    let mut problems = Vec::new();
    for spec in &table {
        match weights.tensor(&spec.name) {
            Err(e) => problems.push(format!("{e:#}")),
            Ok(t) => {
                if t.shape != spec.shape {
                    problems.push(format!("tensor `{}` has shape {:?}, but the config needs {:?}", spec.name, t.shape, spec.shape));
                } else {
                    let needed = bytes::checked_numel(&t.shape).and_then(|n| n.checked_mul(t.dtype.size()));
                    if needed != Some(t.data.len()) {
                        problems.push(format!(
                            "tensor `{}` holds {} bytes, but {:?} of {} needs {}",
                            spec.name,
                            t.data.len(),
                            t.shape,
                            t.dtype.name(),
                            needed.map_or("more than fits in memory".to_string(), |n| n.to_string())
                        ));
                    }
                }
            }
        }
    }
    if let Some(names) = names {
        let wanted: std::collections::HashSet<&str> = table.iter().map(|t| t.name.as_str()).collect();
        for n in names.iter().filter(|n| !wanted.contains(n.as_str())) {
            problems.push(format!(
                "tensor `{n}` is not used by a {} model with this config (kiln would ignore it and compute something else)",
                config.arch.name()
            ));
        }
    }
    if problems.is_empty() {
        return Ok(());
    }
    let n = problems.len();
    problems.truncate(10);
    let more = if n > 10 { format!("\n  ... and {} more", n - 10) } else { String::new() };
    bail!(
        "`{}` does not match its model config ({n} problem{}):\n  {}{more}",
        weights.describe(),
        if n == 1 { "" } else { "s" },
        problems.join("\n  ")
    )
}

/// Every tensor of `config` (and the whole model) has a byte size that fits in `u64` even in
/// f32, computed in closed form: a corrupt dimension must give an error, not an overflow later
/// (or a table of a billion layers).
pub fn ensure_addressable(config: &ModelConfig) -> Result<()> {
    let (d, f, v) = (config.hidden_size as u64, config.intermediate_size as u64, config.vocab_size as u64);
    let (qd, kvd, hd) = (config.n_heads as u64, config.n_kv_heads as u64, config.head_dim as u64);
    let size = || -> Option<u64> {
        let (qd, kvd) = (qd.checked_mul(hd)?, kvd.checked_mul(hd)?);
        let per_layer =
            [d, qd.checked_mul(d)?, kvd.checked_mul(d)?.checked_mul(2)?, d.checked_mul(qd)?, d, f.checked_mul(d)?.checked_mul(3)?];
        let per_layer = per_layer.iter().try_fold(0u64, |a, &x| a.checked_add(x))?.checked_add(qd + 2 * kvd + 2 * hd)?;
        let embeddings = v.checked_mul(d)?.checked_mul(2)?;
        (config.n_layers as u64).checked_mul(per_layer)?.checked_add(embeddings)?.checked_add(d)?.checked_mul(4)
    };
    match size() {
        Some(_) => Ok(()),
        None => bail!(
            "config describes an impossibly large model (hidden {}, intermediate {}, vocab {}, {} layers, {} heads of {})",
            config.hidden_size,
            config.intermediate_size,
            config.vocab_size,
            config.n_layers,
            config.n_heads,
            config.head_dim
        ),
    }
}

/// The tokenizer's ids fit the embedding table.
fn check_tokenizer(model: &LoadedModel) -> Result<()> {
    if let Some(t) = &model.tokenizer {
        if t.vocab_size() > model.config.vocab_size {
            bail!(
                "{}: the tokenizer has {} tokens but the model's embedding has only {} rows; is it the right tokenizer?",
                model.source,
                t.vocab_size(),
                model.config.vocab_size
            );
        }
    }
    Ok(())
}
