//! Hugging Face model directories: `config.json`, `model.safetensors` (or shards listed in
//! `model.safetensors.index.json`) and `tokenizer.json`; reading them, and writing one.
//!
//! Owns: the mapping between Hugging Face tensor names and kiln's canonical names, reading
//! safetensors headers of memory-mapped files, and the directory writer `kiln synth` uses.
//! Never: ignores a tensor it cannot place (only RoPE `inv_freq` buffers and a tied
//! `lm_head.weight` are skipped, both recomputable), or loads a dtype other than F32/F16/BF16.

use super::bytes::{checked_numel, map_file, read_small_file, ModelBytes};
use super::tokenizer_hf::HfTokenizer;
use super::{LoadedModel, ModelConfig, SrcDType, TensorRef, Tokenizer, WeightSource};
use crate::ir::RopeStyle;
use anyhow::{bail, Context, Result};
use safetensors::tensor::{Dtype, SafeTensors};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{Seek, SeekFrom, Write};
use std::ops::Range;
use std::path::Path;

/// Per-layer tensor names: Hugging Face suffix after `model.layers.{i}.`, canonical suffix
/// after `blk.{i}.`.
const LAYER_NAMES: &[(&str, &str)] = &[
    ("input_layernorm.weight", "attn_norm.weight"),
    ("self_attn.q_proj.weight", "attn_q.weight"),
    ("self_attn.q_proj.bias", "attn_q.bias"),
    ("self_attn.k_proj.weight", "attn_k.weight"),
    ("self_attn.k_proj.bias", "attn_k.bias"),
    ("self_attn.v_proj.weight", "attn_v.weight"),
    ("self_attn.v_proj.bias", "attn_v.bias"),
    ("self_attn.o_proj.weight", "attn_output.weight"),
    ("self_attn.q_norm.weight", "attn_q_norm.weight"),
    ("self_attn.k_norm.weight", "attn_k_norm.weight"),
    ("post_attention_layernorm.weight", "ffn_norm.weight"),
    ("mlp.gate_proj.weight", "ffn_gate.weight"),
    ("mlp.up_proj.weight", "ffn_up.weight"),
    ("mlp.down_proj.weight", "ffn_down.weight"),
];

/// Model-level tensor names: (Hugging Face, canonical).
const GLOBAL_NAMES: &[(&str, &str)] =
    &[("model.embed_tokens.weight", "token_embd.weight"), ("model.norm.weight", "output_norm.weight"), ("lm_head.weight", "output.weight")];

/// Splits `{prefix}{i}.{rest}` into `(i, rest)`, accepting only canonical decimal indices.
fn split_layer<'a>(name: &'a str, prefix: &str) -> Option<(usize, &'a str)> {
    let (idx, rest) = name.strip_prefix(prefix)?.split_once('.')?;
    let i: usize = idx.parse().ok()?;
    (i.to_string() == idx).then_some((i, rest))
}

/// Canonical name of Hugging Face tensor `name`, `None` if kiln does not know it.
pub fn hf_to_canonical(name: &str) -> Option<String> {
    if let Some((_, c)) = GLOBAL_NAMES.iter().find(|(h, _)| *h == name) {
        return Some(c.to_string());
    }
    let (i, rest) = split_layer(name, "model.layers.")?;
    LAYER_NAMES.iter().find(|(h, _)| *h == rest).map(|(_, c)| format!("blk.{i}.{c}"))
}

/// Hugging Face name of canonical tensor `name`, `None` if it has none.
pub fn canonical_to_hf(name: &str) -> Option<String> {
    if let Some((h, _)) = GLOBAL_NAMES.iter().find(|(_, c)| *c == name) {
        return Some(h.to_string());
    }
    let (i, rest) = split_layer(name, "blk.")?;
    LAYER_NAMES.iter().find(|(_, c)| *c == rest).map(|(h, _)| format!("model.layers.{i}.{h}"))
}

fn src_dtype(dtype: Dtype) -> Option<SrcDType> {
    match dtype {
        Dtype::F32 => Some(SrcDType::F32),
        Dtype::F16 => Some(SrcDType::F16),
        Dtype::BF16 => Some(SrcDType::BF16),
        _ => None,
    }
}

fn safetensors_dtype_name(dtype: SrcDType) -> &'static str {
    match dtype {
        SrcDType::F32 => "F32",
        SrcDType::F16 => "F16",
        SrcDType::BF16 => "BF16",
    }
}

/// `torch_dtype` value of `config.json` for weights of `dtype`.
pub fn torch_dtype_name(dtype: SrcDType) -> &'static str {
    match dtype {
        SrcDType::F32 => "float32",
        SrcDType::F16 => "float16",
        SrcDType::BF16 => "bfloat16",
    }
}

/// A tensor of a safetensors header: name, dtype, shape, data offsets.
type HeaderEntry = (String, Dtype, Vec<usize>, (usize, usize));

struct Entry {
    file: usize,
    hf_name: String,
    dtype: SrcDType,
    shape: Vec<usize>,
    /// Absolute byte range in the file.
    range: Range<usize>,
}

/// The safetensors files of a Hugging Face directory as one [`WeightSource`] under canonical names.
pub struct SafetensorsWeights {
    dir: String,
    files: Vec<(String, ModelBytes)>,
    entries: HashMap<String, Entry>,
    /// Canonical names in file order, for `tensor_names`.
    order: Vec<String>,
}

impl SafetensorsWeights {
    /// Maps the weights of `dir`. With `tied`, a `lm_head.weight` is skipped (the embedding is
    /// the output layer).
    pub fn open_dir(dir: &Path, tied: bool) -> Result<SafetensorsWeights> {
        let index_path = dir.join("model.safetensors.index.json");
        let single = dir.join("model.safetensors");
        let (file_names, weight_map): (Vec<String>, Option<BTreeMap<String, String>>) = if index_path.is_file() {
            let text = read_small_file(&index_path, "safetensors index")?;
            let v: serde_json::Value =
                serde_json::from_slice(&text).with_context(|| format!("`{}` is not valid JSON", index_path.display()))?;
            let map = v
                .get("weight_map")
                .and_then(|m| m.as_object())
                .with_context(|| format!("`{}` has no `weight_map` object", index_path.display()))?;
            let mut weight_map = BTreeMap::new();
            for (tensor, file) in map {
                let file =
                    file.as_str().with_context(|| format!("`{}`: `weight_map.{tensor}` is not a file name", index_path.display()))?;
                if file.contains('/') || file.contains('\\') || file == ".." || file.is_empty() {
                    bail!("`{}`: shard name `{file}` is not a plain file name in the directory", index_path.display());
                }
                weight_map.insert(tensor.clone(), file.to_string());
            }
            let files: BTreeSet<String> = weight_map.values().cloned().collect();
            (files.into_iter().collect(), Some(weight_map))
        } else if single.is_file() {
            (vec!["model.safetensors".to_string()], None)
        } else {
            bail!(
                "`{}` has no model.safetensors or model.safetensors.index.json (kiln reads safetensors weights; \
                 pytorch_model.bin is not supported — re-save with `save_pretrained(..., safe_serialization=True)`)",
                dir.display()
            );
        };

        let mut files = Vec::new();
        let mut entries = HashMap::new();
        let mut order = Vec::new();
        let mut unknown = Vec::new();
        let mut found_hf: HashMap<String, usize> = HashMap::new();
        for (fi, file_name) in file_names.iter().enumerate() {
            let path = dir.join(file_name);
            let shown = path.display().to_string();
            let bytes = map_file(&path)?;
            let (header_len, metadata) =
                SafeTensors::read_metadata(&bytes).map_err(|e| anyhow::anyhow!("`{shown}` is not a valid safetensors file: {e}"))?;
            let data_start = 8 + header_len;
            let mut infos: Vec<HeaderEntry> =
                metadata.tensors().into_iter().map(|(name, info)| (name, info.dtype, info.shape.clone(), info.data_offsets)).collect();
            infos.sort_by_key(|t| t.3);
            for (hf_name, dtype, shape, (start, end)) in infos {
                if found_hf.insert(hf_name.clone(), fi).is_some() {
                    bail!("tensor `{hf_name}` appears in more than one shard of `{}`", dir.display());
                }
                let canonical = match hf_to_canonical(&hf_name) {
                    Some(c) if c == "output.weight" && tied => continue,
                    Some(c) => c,
                    None if hf_name.ends_with("rotary_emb.inv_freq") => continue,
                    None => {
                        unknown.push(format!("`{hf_name}` ({shown})"));
                        continue;
                    }
                };
                let Some(dtype) = src_dtype(dtype) else {
                    bail!("tensor `{hf_name}` in `{shown}` is {dtype:?}; kiln loads only F32/F16/BF16 safetensors");
                };
                let range = data_start + start..data_start + end;
                order.push(canonical.clone());
                entries.insert(canonical, Entry { file: fi, hf_name, dtype, shape, range });
            }
            files.push((shown, bytes));
        }
        if !unknown.is_empty() {
            let more = if unknown.len() > 10 { format!(" and {} more", unknown.len() - 10) } else { String::new() };
            unknown.truncate(10);
            bail!(
                "tensors kiln does not understand: {}{more}; kiln refuses weights it would have to ignore, because the \
                 model would compute something else without them",
                unknown.join(", ")
            );
        }
        if let Some(weight_map) = weight_map {
            for (tensor, file) in &weight_map {
                let in_file = found_hf.get(tensor).map(|&fi| &file_names[fi]);
                if in_file != Some(file) {
                    bail!(
                        "`{}` puts tensor `{tensor}` in `{file}`, but {}",
                        index_path.display(),
                        match in_file {
                            Some(f) => format!("it is in `{f}`"),
                            None => "that file does not hold it".to_string(),
                        }
                    );
                }
            }
        }
        Ok(SafetensorsWeights { dir: dir.display().to_string(), files, entries, order })
    }
}

impl WeightSource for SafetensorsWeights {
    fn tensor(&self, name: &str) -> Result<TensorRef<'_>> {
        let e = self.entries.get(name).with_context(|| {
            format!("`{}` has no tensor `{name}` (Hugging Face name `{}`)", self.dir, canonical_to_hf(name).unwrap_or_else(|| "?".into()))
        })?;
        let (file, bytes) = &self.files[e.file];
        let data = bytes.get(e.range.clone()).with_context(|| format!("`{file}`: tensor `{}` lies outside the file", e.hf_name))?;
        Ok(TensorRef { dtype: e.dtype, shape: e.shape.clone(), data })
    }

    fn describe(&self) -> String {
        self.dir.clone()
    }

    fn tensor_names(&self) -> Option<Vec<String>> {
        Some(self.order.clone())
    }
}

/// Opens a Hugging Face directory. The tokenizer is `tokenizer` if given, else the
/// directory's `tokenizer.json` if present, else none.
pub fn open_hf_dir(dir: &Path, tokenizer: Option<&Path>) -> Result<LoadedModel> {
    let config_path = dir.join("config.json");
    let text = read_small_file(&config_path, "model config")?;
    let text = String::from_utf8(text).with_context(|| format!("`{}` is not UTF-8", config_path.display()))?;
    let config = ModelConfig::from_hf_json(&text).with_context(|| format!("in `{}`", config_path.display()))?;
    let weights = SafetensorsWeights::open_dir(dir, config.tie_word_embeddings)?;
    let default_tok = dir.join("tokenizer.json");
    let tokenizer: Option<Box<dyn Tokenizer>> = match tokenizer {
        Some(p) => Some(super::open_tokenizer_file(p, &config)?),
        None if default_tok.is_file() => Some(Box::new(HfTokenizer::from_file(&default_tok, &config)?)),
        None => None,
    };
    Ok(LoadedModel { config, weights: Box::new(weights), tokenizer, source: format!("{} (Hugging Face)", dir.display()) })
}

/// Reorders the rows of a Q or K projection (or bias, or per-head norm weight) from
/// interleaved RoPE order (pairs `(2i, 2i+1)`, GGUF `llama` and llama2.c) to half-split order
/// (pairs `(i, i + head_dim/2)`, Hugging Face): new row `h*hd + j*hd/2 + i` is old row
/// `h*hd + 2i + j`. Applied to both Q and K it leaves attention unchanged.
pub fn interleaved_to_half_split(data: &[u8], n_heads: usize, head_dim: usize) -> Result<Vec<u8>> {
    permute_rope_rows(data, n_heads, head_dim, false)
}

/// Inverse of [`interleaved_to_half_split`] (what llama.cpp's converter does to HF weights).
pub fn half_split_to_interleaved(data: &[u8], n_heads: usize, head_dim: usize) -> Result<Vec<u8>> {
    permute_rope_rows(data, n_heads, head_dim, true)
}

fn permute_rope_rows(data: &[u8], n_heads: usize, head_dim: usize, to_interleaved: bool) -> Result<Vec<u8>> {
    let rows = n_heads * head_dim;
    if rows == 0 || !head_dim.is_multiple_of(2) || !data.len().is_multiple_of(rows) {
        bail!("cannot permute {} bytes as {n_heads} heads of {head_dim} rows", data.len());
    }
    let row_bytes = data.len() / rows;
    let half = head_dim / 2;
    let mut out = vec![0u8; data.len()];
    for h in 0..n_heads {
        for j in 0..2 {
            for i in 0..half {
                let half_split_row = h * head_dim + j * half + i;
                let interleaved_row = h * head_dim + 2 * i + j;
                let (dst, src) = if to_interleaved { (interleaved_row, half_split_row) } else { (half_split_row, interleaved_row) };
                out[dst * row_bytes..(dst + 1) * row_bytes].copy_from_slice(&data[src * row_bytes..(src + 1) * row_bytes]);
            }
        }
    }
    Ok(out)
}

/// Writes a Hugging Face directory for `config`: `config.json` and one `model.safetensors`
/// holding exactly the tensors of `config.tensors()` under Hugging Face names, in the order
/// `tensors` yields them (each `(canonical name, dtype, shape, bytes)`). Tensors are streamed
/// to disk, never all held in memory. A config with interleaved RoPE is written as half-split
/// with Q and K permuted to match ([`interleaved_to_half_split`]), as transformers expects.
/// `torch_dtype` in `config.json` is the dtype of `token_embd.weight`.
pub fn write_hf_dir<I, B>(dir: &Path, config: &ModelConfig, tensors: I) -> Result<()>
where
    I: IntoIterator<Item = (String, SrcDType, Vec<usize>, B)>,
    B: AsRef<[u8]>,
{
    let permute = config.rope.style == RopeStyle::Interleaved;
    let mut hf_config = config.clone();
    hf_config.rope.style = RopeStyle::HalfSplit;
    // Refuse what transformers cannot express before writing any bytes.
    hf_config.to_hf_json()?;

    std::fs::create_dir_all(dir).with_context(|| format!("cannot create `{}`", dir.display()))?;
    let table: Vec<(String, Vec<usize>, String)> = config
        .tensors()
        .into_iter()
        .map(|t| {
            let hf = canonical_to_hf(&t.name).with_context(|| format!("tensor `{}` has no Hugging Face name", t.name))?;
            Ok((t.name, t.shape, hf))
        })
        .collect::<Result<_>>()?;
    let expected: HashMap<&str, (&Vec<usize>, &str)> = table.iter().map(|(c, s, h)| (c.as_str(), (s, h.as_str()))).collect();

    // The header goes first but its offsets are known only at the end: reserve room for the
    // longest header these tensors can have and pad with spaces (allowed by the format).
    let reserved = {
        let per_tensor: usize = table.iter().map(|(_, shape, hf)| hf.len() + 2 + 64 + shape.len() * 21 + 42).sum();
        (per_tensor + 64).div_ceil(8) * 8
    };
    let final_path = dir.join("model.safetensors");
    let partial_path = dir.join("model.safetensors.partial");
    let result = (|| -> Result<Option<SrcDType>> {
        let file = std::fs::File::create(&partial_path).with_context(|| format!("cannot create `{}`", partial_path.display()))?;
        let mut out = std::io::BufWriter::new(file);
        out.write_all(&vec![b' '; 8 + reserved])?;
        let mut written: Vec<(String, SrcDType, Vec<usize>, usize, usize)> = Vec::new();
        let mut seen = BTreeSet::new();
        let mut offset = 0usize;
        let mut embd_dtype = None;
        for (name, dtype, shape, bytes) in tensors {
            let bytes = bytes.as_ref();
            let Some(&(want_shape, hf)) = expected.get(name.as_str()) else {
                bail!("tensor `{name}` is not in the tensor table of this config");
            };
            if !seen.insert(name.clone()) {
                bail!("tensor `{name}` given twice");
            }
            if &shape != want_shape {
                bail!("tensor `{name}` has shape {shape:?}, but the config needs {want_shape:?}");
            }
            let n_bytes = checked_numel(&shape).and_then(|n| n.checked_mul(dtype.size())).context("tensor too large")?;
            if bytes.len() != n_bytes {
                bail!("tensor `{name}` has {} bytes, but {shape:?} of {} is {n_bytes}", bytes.len(), dtype.name());
            }
            if name == "token_embd.weight" {
                embd_dtype = Some(dtype);
            }
            // `blk.3.attn_q.weight` -> `attn_q`: the tensors whose rows follow RoPE pairs.
            let rope_heads = match name.rsplit('.').nth(1) {
                Some("attn_q") => Some(config.n_heads),
                Some("attn_k") => Some(config.n_kv_heads),
                Some("attn_q_norm" | "attn_k_norm") => Some(1),
                _ => None,
            };
            match rope_heads {
                Some(heads) if permute => out.write_all(&interleaved_to_half_split(bytes, heads, config.head_dim)?)?,
                _ => out.write_all(bytes)?,
            }
            written.push((hf.to_string(), dtype, shape, offset, offset + n_bytes));
            offset += n_bytes;
        }
        let missing: Vec<&str> = table.iter().map(|(c, _, _)| c.as_str()).filter(|c| !seen.contains(*c)).collect();
        if !missing.is_empty() {
            bail!("tensors missing from the model being written: {}", missing.join(", "));
        }
        let mut header = String::from("{\"__metadata__\":{\"format\":\"pt\"}");
        for (hf, dtype, shape, start, end) in &written {
            header.push_str(&format!(
                ",{}:{{\"dtype\":\"{}\",\"shape\":{},\"data_offsets\":[{start},{end}]}}",
                serde_json::to_string(hf)?,
                safetensors_dtype_name(*dtype),
                serde_json::to_string(shape)?
            ));
        }
        header.push('}');
        if header.len() > reserved {
            bail!("internal error: safetensors header of {} bytes exceeds the {reserved} reserved", header.len());
        }
        header.push_str(&" ".repeat(reserved - header.len()));
        out.seek(SeekFrom::Start(0))?;
        out.write_all(&(reserved as u64).to_le_bytes())?;
        out.write_all(header.as_bytes())?;
        out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        Ok(embd_dtype)
    })();
    let embd_dtype = match result {
        Ok(d) => d,
        Err(e) => {
            let _ = std::fs::remove_file(&partial_path);
            return Err(e.context(format!("writing `{}`", final_path.display())));
        }
    };
    std::fs::rename(&partial_path, &final_path).with_context(|| format!("cannot rename to `{}`", final_path.display()))?;
    // A shard index left from an earlier model would take precedence over the new file.
    let stale_index = dir.join("model.safetensors.index.json");
    if stale_index.exists() {
        std::fs::remove_file(&stale_index).with_context(|| format!("cannot remove the stale `{}`", stale_index.display()))?;
    }
    let torch_dtype = torch_dtype_name(embd_dtype.unwrap_or(SrcDType::BF16));
    let config_path = dir.join("config.json");
    std::fs::write(&config_path, hf_config.to_hf_json_with_dtype(torch_dtype)?)
        .with_context(|| format!("cannot write `{}`", config_path.display()))?;
    Ok(())
}
