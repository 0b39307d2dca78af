//! The model embedded in the binary so that `kiln run` works with no files and no GPU:
//! stories260K (a 260K-parameter Llama trained on TinyStories, llama2.c project, MIT; GGUF copy
//! from mutablelogic/go-llama, Apache-2.0 — see `models/stories260K/README.md` and its LICENSE).

use crate::model::LoadedModel;

pub const STORIES260K_GGUF: &[u8] = include_bytes!("../models/stories260K/stories260K.gguf");

pub fn open_default() -> anyhow::Result<LoadedModel> {
    crate::model::open_gguf_bytes(STORIES260K_GGUF, "bundled stories260K.gguf")
}
