//! Writing GGUF files: a small builder used by tests (to craft valid and broken files) and by
//! tools that export kiln models.
//!
//! Owns: serializing metadata and F32/F16/BF16 (or raw) tensors in GGUF v3 layout.
//! Never: validates what it writes; tests rely on being able to write inconsistent files.

use super::gguf::{GgmlType, GgufValue, DEFAULT_ALIGNMENT, GGUF_MAGIC};

struct PendingTensor {
    name: String,
    ggml_type: GgmlType,
    /// GGUF order: innermost dimension first.
    ne: Vec<u64>,
    data: Vec<u8>,
}

/// Builds a GGUF file in memory.
pub struct GgufBuilder {
    version: u32,
    metadata: Vec<(String, GgufValue)>,
    tensors: Vec<PendingTensor>,
}

impl Default for GgufBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl GgufBuilder {
    pub fn new() -> Self {
        GgufBuilder { version: 3, metadata: Vec::new(), tensors: Vec::new() }
    }

    pub fn version(&mut self, version: u32) -> &mut Self {
        self.version = version;
        self
    }

    /// Adds (or replaces) metadata `key`.
    pub fn kv(&mut self, key: &str, value: GgufValue) -> &mut Self {
        self.metadata.retain(|(k, _)| k != key);
        self.metadata.push((key.to_string(), value));
        self
    }

    /// Removes metadata `key`.
    pub fn remove_kv(&mut self, key: &str) -> &mut Self {
        self.metadata.retain(|(k, _)| k != key);
        self
    }

    /// Adds a tensor of canonical (row-major) `shape`; stored with dims reversed, as GGUF does.
    pub fn tensor(&mut self, name: &str, ggml_type: GgmlType, shape: &[usize], data: Vec<u8>) -> &mut Self {
        let ne = shape.iter().rev().map(|&d| d as u64).collect();
        self.tensor_ne(name, ggml_type, ne, data)
    }

    /// Adds a tensor with `ne` given in GGUF order (innermost first).
    pub fn tensor_ne(&mut self, name: &str, ggml_type: GgmlType, ne: Vec<u64>, data: Vec<u8>) -> &mut Self {
        self.tensors.retain(|t| t.name != name);
        self.tensors.push(PendingTensor { name: name.to_string(), ggml_type, ne, data });
        self
    }

    /// Removes tensor `name`.
    pub fn remove_tensor(&mut self, name: &str) -> &mut Self {
        self.tensors.retain(|t| t.name != name);
        self
    }

    /// The file's bytes.
    pub fn build(&self) -> Vec<u8> {
        let alignment = self
            .metadata
            .iter()
            .find(|(k, _)| k == "general.alignment")
            .and_then(|(_, v)| v.as_u64())
            .filter(|a| *a > 0)
            .unwrap_or(DEFAULT_ALIGNMENT) as usize;
        let mut out = Vec::new();
        out.extend_from_slice(&GGUF_MAGIC);
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (k, v) in &self.metadata {
            write_str(&mut out, k);
            out.extend_from_slice(&v.value_type().id().to_le_bytes());
            write_value(&mut out, v);
        }
        let mut offset = 0usize;
        let mut offsets = Vec::new();
        for t in &self.tensors {
            write_str(&mut out, &t.name);
            out.extend_from_slice(&(t.ne.len() as u32).to_le_bytes());
            for d in &t.ne {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&t.ggml_type.id().to_le_bytes());
            out.extend_from_slice(&(offset as u64).to_le_bytes());
            offsets.push(offset);
            offset = (offset + t.data.len()).div_ceil(alignment) * alignment;
        }
        let data_start = out.len().div_ceil(alignment) * alignment;
        out.resize(data_start, 0);
        for (t, off) in self.tensors.iter().zip(offsets) {
            out.resize(data_start + off, 0);
            out.extend_from_slice(&t.data);
        }
        out
    }
}

fn write_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn write_value(out: &mut Vec<u8>, v: &GgufValue) {
    match v {
        GgufValue::U8(x) => out.push(*x),
        GgufValue::I8(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::Bool(x) => out.push(u8::from(*x)),
        GgufValue::String(s) => write_str(out, s),
        GgufValue::Array(t, items) => {
            out.extend_from_slice(&t.id().to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for i in items {
                write_value(out, i);
            }
        }
    }
}
