//! Weight loaders and tokenizers. Files are memory-mapped (memmap2) and checked against the
//! config's tensor table before anything is planned or uploaded.
//!
//! Owns: file formats (GGUF, llama2.c, Hugging Face directories), the mapping of their tensor
//! names and layouts to kiln's canonical table, tokenizers.
//! Never: converts to a plan's dtype (that is `runtime::weights`, at the plan's offsets).

pub mod config;

pub use config::{Arch, ModelConfig, TensorSpec};

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
