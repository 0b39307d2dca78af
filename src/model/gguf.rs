//! GGUF v2/v3 files (llama.cpp's format): header, metadata, tensor table, and the
//! [`ModelConfig`] and [`WeightSource`] they give.
//!
//! Owns: parsing a GGUF buffer (mapped file or bytes embedded in the binary), the GGML type
//! table, reading kiln's config from `{arch}.*` metadata, and refusing metadata that would
//! change the math in a way kiln does not implement.
//! Never: panics or indexes unchecked on a malformed file (every count, length and offset is
//! checked against the buffer first), or silently ignores a metadata key or tensor that
//! changes what the model computes.
//!
//! Layout facts this module relies on (llama.cpp `ggml/include/gguf.h`):
//! - header: magic `GGUF`, u32 version, u64 tensor count, u64 metadata count (all little-endian);
//! - metadata: key string, u32 value type, value; strings are u64 length + UTF-8 bytes;
//!   arrays are u32 element type + u64 count + elements;
//! - tensor infos: name, u32 n_dims, n_dims × u64 `ne` (innermost first), u32 GGML type,
//!   u64 offset relative to the data section;
//! - the data section starts at the end of the tensor infos rounded up to `general.alignment`
//!   (default 32); every tensor offset is a multiple of it.
//!
//! GGUF stores `ne[0]` (the contiguous dimension) first, so kiln's row-major canonical shape is
//! the dims reversed: `ne = [in, out]` is shape `[out, in]`, and the bytes need no transposing.

use super::bytes::{align_up, map_file, ModelBytes, Reader};
use super::{Arch, LoadedModel, ModelConfig, SrcDType, TensorRef, Tokenizer, WeightSource};
use crate::ir::{RopeScaling, RopeSpec, RopeStyle};
use anyhow::{bail, Context, Result};
use std::collections::HashMap;
use std::fmt;
use std::path::Path;

pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
/// Data alignment when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// GGML's `GGML_MAX_DIMS`.
const MAX_DIMS: u32 = 4;
/// Arrays nested deeper than this are refused (real files nest at most once).
const MAX_ARRAY_DEPTH: u32 = 4;

/// Architectures (`general.architecture`) kiln can run from GGUF.
pub const SUPPORTED_ARCHS: &[&str] = &["llama", "qwen2", "qwen3"];

macro_rules! ggml_types {
    ($($variant:ident = $id:literal, $name:literal, $block:literal, $bytes:literal;)*) => {
        /// Element types of GGML tensors. Every type llama.cpp writes is recognised by name, so
        /// a file with quantized tensors parses and its tensors can be named in errors; only
        /// F32, F16 and BF16 can be loaded so far.
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum GgmlType { $($variant),* }

        impl GgmlType {
            /// The type of GGML id `id` (`enum ggml_type`), `None` for ids kiln does not know.
            pub fn from_id(id: u32) -> Option<GgmlType> {
                match id { $($id => Some(GgmlType::$variant),)* _ => None }
            }
            pub fn id(self) -> u32 {
                match self { $(GgmlType::$variant => $id),* }
            }
            /// Name as llama.cpp prints it (`Q4_K`, `BF16`).
            pub fn name(self) -> &'static str {
                match self { $(GgmlType::$variant => $name),* }
            }
            /// Elements per block (1 for plain types).
            pub fn block_size(self) -> u64 {
                match self { $(GgmlType::$variant => $block),* }
            }
            /// Bytes per block.
            pub fn block_bytes(self) -> u64 {
                match self { $(GgmlType::$variant => $bytes),* }
            }
        }
    };
}

ggml_types! {
    F32 = 0, "F32", 1, 4;
    F16 = 1, "F16", 1, 2;
    Q4_0 = 2, "Q4_0", 32, 18;
    Q4_1 = 3, "Q4_1", 32, 20;
    Q5_0 = 6, "Q5_0", 32, 22;
    Q5_1 = 7, "Q5_1", 32, 24;
    Q8_0 = 8, "Q8_0", 32, 34;
    Q8_1 = 9, "Q8_1", 32, 36;
    Q2_K = 10, "Q2_K", 256, 84;
    Q3_K = 11, "Q3_K", 256, 110;
    Q4_K = 12, "Q4_K", 256, 144;
    Q5_K = 13, "Q5_K", 256, 176;
    Q6_K = 14, "Q6_K", 256, 210;
    Q8_K = 15, "Q8_K", 256, 292;
    IQ2_XXS = 16, "IQ2_XXS", 256, 66;
    IQ2_XS = 17, "IQ2_XS", 256, 74;
    IQ3_XXS = 18, "IQ3_XXS", 256, 98;
    IQ1_S = 19, "IQ1_S", 256, 50;
    IQ4_NL = 20, "IQ4_NL", 32, 18;
    IQ3_S = 21, "IQ3_S", 256, 110;
    IQ2_S = 22, "IQ2_S", 256, 82;
    IQ4_XS = 23, "IQ4_XS", 256, 136;
    I8 = 24, "I8", 1, 1;
    I16 = 25, "I16", 1, 2;
    I32 = 26, "I32", 1, 4;
    I64 = 27, "I64", 1, 8;
    F64 = 28, "F64", 1, 8;
    IQ1_M = 29, "IQ1_M", 256, 56;
    BF16 = 30, "BF16", 1, 2;
    TQ1_0 = 34, "TQ1_0", 256, 54;
    TQ2_0 = 35, "TQ2_0", 256, 66;
    MXFP4 = 39, "MXFP4", 32, 17;
}

impl GgmlType {
    /// The loadable element type, `None` for quantized and integer types.
    pub fn src_dtype(self) -> Option<SrcDType> {
        match self {
            GgmlType::F32 => Some(SrcDType::F32),
            GgmlType::F16 => Some(SrcDType::F16),
            GgmlType::BF16 => Some(SrcDType::BF16),
            _ => None,
        }
    }

    pub fn from_src_dtype(dtype: SrcDType) -> GgmlType {
        match dtype {
            SrcDType::F32 => GgmlType::F32,
            SrcDType::F16 => GgmlType::F16,
            SrcDType::BF16 => GgmlType::BF16,
        }
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Metadata value types (`enum gguf_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GgufValueType {
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    F32,
    Bool,
    String,
    Array,
    U64,
    I64,
    F64,
}

impl GgufValueType {
    pub fn from_id(id: u32) -> Option<GgufValueType> {
        use GgufValueType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    pub fn id(self) -> u32 {
        use GgufValueType::*;
        match self {
            U8 => 0,
            I8 => 1,
            U16 => 2,
            I16 => 3,
            U32 => 4,
            I32 => 5,
            F32 => 6,
            Bool => 7,
            String => 8,
            Array => 9,
            U64 => 10,
            I64 => 11,
            F64 => 12,
        }
    }

    pub fn name(self) -> &'static str {
        use GgufValueType::*;
        match self {
            U8 => "u8",
            I8 => "i8",
            U16 => "u16",
            I16 => "i16",
            U32 => "u32",
            I32 => "i32",
            F32 => "f32",
            Bool => "bool",
            String => "string",
            Array => "array",
            U64 => "u64",
            I64 => "i64",
            F64 => "f64",
        }
    }

    /// Fewest bytes one value of this type takes in the file (used to refuse impossible counts).
    fn min_bytes(self) -> usize {
        use GgufValueType::*;
        match self {
            U8 | I8 | Bool => 1,
            U16 | I16 => 2,
            U32 | I32 | F32 => 4,
            U64 | I64 | F64 | String => 8,
            Array => 12,
        }
    }
}

/// One metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum GgufValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    String(String),
    /// Element type and elements (all of that type).
    Array(GgufValueType, Vec<GgufValue>),
}

impl GgufValue {
    pub fn value_type(&self) -> GgufValueType {
        match self {
            GgufValue::U8(_) => GgufValueType::U8,
            GgufValue::I8(_) => GgufValueType::I8,
            GgufValue::U16(_) => GgufValueType::U16,
            GgufValue::I16(_) => GgufValueType::I16,
            GgufValue::U32(_) => GgufValueType::U32,
            GgufValue::I32(_) => GgufValueType::I32,
            GgufValue::U64(_) => GgufValueType::U64,
            GgufValue::I64(_) => GgufValueType::I64,
            GgufValue::F32(_) => GgufValueType::F32,
            GgufValue::F64(_) => GgufValueType::F64,
            GgufValue::Bool(_) => GgufValueType::Bool,
            GgufValue::String(_) => GgufValueType::String,
            GgufValue::Array(..) => GgufValueType::Array,
        }
    }

    /// Any integer type holding a non-negative value.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            GgufValue::U8(v) => Some(v.into()),
            GgufValue::U16(v) => Some(v.into()),
            GgufValue::U32(v) => Some(v.into()),
            GgufValue::U64(v) => Some(v),
            GgufValue::I8(v) => u64::try_from(v).ok(),
            GgufValue::I16(v) => u64::try_from(v).ok(),
            GgufValue::I32(v) => u64::try_from(v).ok(),
            GgufValue::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// Any float or integer type.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            GgufValue::F32(v) => Some(v.into()),
            GgufValue::F64(v) => Some(v),
            GgufValue::I8(v) => Some(v.into()),
            GgufValue::I16(v) => Some(v.into()),
            GgufValue::I32(v) => Some(v.into()),
            GgufValue::I64(v) => Some(v as f64),
            _ => self.as_u64().map(|v| v as f64),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            GgufValue::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            GgufValue::Bool(b) => Some(b),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[GgufValue]> {
        match self {
            GgufValue::Array(_, items) => Some(items),
            _ => None,
        }
    }

    /// Short description for messages: `u32 2048`, `string "llama"`, `array of 512 string`.
    pub fn describe(&self) -> String {
        match self {
            GgufValue::String(s) => format!("string {s:?}"),
            GgufValue::Array(t, items) => format!("array of {} {}", items.len(), t.name()),
            GgufValue::Bool(b) => format!("bool {b}"),
            other => match (other.as_u64(), other.as_f64()) {
                (Some(u), _) => format!("{} {u}", other.value_type().name()),
                (None, Some(f)) => format!("{} {f}", other.value_type().name()),
                _ => other.value_type().name().to_string(),
            },
        }
    }
}

/// One entry of the tensor table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GgufTensorInfo {
    pub name: String,
    /// `ne` as stored: innermost (contiguous) dimension first.
    pub ne: Vec<u64>,
    pub ggml_type: GgmlType,
    /// Offset of the first byte, relative to the data section.
    pub offset: u64,
    /// Byte length, checked to lie inside the file.
    pub n_bytes: u64,
}

impl GgufTensorInfo {
    /// Canonical row-major shape: `ne` reversed. Every dim fits `usize` (checked at parse time).
    pub fn shape(&self) -> Vec<usize> {
        self.ne.iter().rev().map(|&d| d as usize).collect()
    }
}

/// A parsed GGUF header: metadata and tensor table. Holds no tensor data.
#[derive(Clone, Debug)]
pub struct GgufFile {
    /// The file, for messages.
    pub file_name: String,
    pub version: u32,
    /// Metadata in file order.
    pub metadata: Vec<(String, GgufValue)>,
    meta_index: HashMap<String, usize>,
    /// Tensor table in file order.
    pub tensors: Vec<GgufTensorInfo>,
    tensor_index: HashMap<String, usize>,
    pub alignment: u64,
    /// Absolute offset of the data section.
    pub data_offset: u64,
}

impl GgufFile {
    /// Parses and checks a whole GGUF buffer. Every tensor's bytes are checked to lie inside
    /// `bytes`, so a truncated file is refused here rather than when a tensor is read.
    pub fn parse(bytes: &[u8], file_name: &str) -> Result<GgufFile> {
        let mut r = Reader::new(bytes, file_name);
        if bytes.len() < 4 || bytes[..4] != GGUF_MAGIC {
            let head = &bytes[..bytes.len().min(4)];
            bail!(
                "`{file_name}` is not a GGUF file: it starts with {head:02x?}, not the magic `GGUF` \
                 (give --model a .gguf file, a llama2.c .bin, or a Hugging Face directory)"
            );
        }
        r.take(4, &"magic")?;
        let version = r.u32(&"GGUF version")?;
        match version {
            2 | 3 => {}
            1 => bail!("`{file_name}` is GGUF version 1, which kiln does not read; re-convert it with a recent llama.cpp (GGUF v2 or v3)"),
            v if matches!(v.swap_bytes(), 2 | 3) => {
                bail!("`{file_name}` is a big-endian GGUF file; kiln reads only little-endian GGUF")
            }
            v => bail!("`{file_name}` has GGUF version {v}; kiln reads versions 2 and 3"),
        }
        let n_tensors = r.u64(&"tensor count")?;
        let n_kv = r.u64(&"metadata count")?;
        // Each metadata entry takes at least 13 bytes and each tensor info at least 32.
        let remaining = r.remaining() as u64;
        if n_kv > remaining / 13 || n_tensors > remaining / 32 {
            bail!(
                "`{file_name}` is truncated or corrupt: its header claims {n_kv} metadata entries and {n_tensors} tensors, \
                 which cannot fit in the remaining {remaining} bytes"
            );
        }

        let mut metadata = Vec::with_capacity(n_kv as usize);
        let mut meta_index = HashMap::new();
        for i in 0..n_kv {
            let key = read_string(&mut r, &format_args!("key of metadata entry {i}"))?;
            let type_id = r.u32(&format_args!("type of metadata `{key}`"))?;
            let ty = GgufValueType::from_id(type_id)
                .with_context(|| format!("`{file_name}` is corrupt: metadata `{key}` has unknown value type {type_id}"))?;
            let value = read_value(&mut r, ty, &key, 0)?;
            if meta_index.insert(key.clone(), metadata.len()).is_some() {
                bail!("`{file_name}` is corrupt: metadata key `{key}` appears twice");
            }
            metadata.push((key, value));
        }

        let alignment_value = meta_index.get("general.alignment").map(|&i| &metadata[i].1);
        let alignment = match alignment_value {
            None => DEFAULT_ALIGNMENT,
            Some(v) => match v.as_u64() {
                Some(a) if a > 0 && a.is_power_of_two() => a,
                _ => bail!("`{file_name}`: `general.alignment` is {}, expected a power of two", v.describe()),
            },
        };

        let mut tensors = Vec::with_capacity(n_tensors as usize);
        let mut tensor_index = HashMap::new();
        for i in 0..n_tensors {
            let name = read_string(&mut r, &format_args!("name of tensor {i}"))?;
            let n_dims = r.u32(&format_args!("dimension count of tensor `{name}`"))?;
            if n_dims > MAX_DIMS {
                bail!("`{file_name}` is corrupt: tensor `{name}` has {n_dims} dimensions (GGML allows at most {MAX_DIMS})");
            }
            let mut ne = Vec::with_capacity(n_dims as usize);
            for d in 0..n_dims {
                ne.push(r.u64(&format_args!("dimension {d} of tensor `{name}`"))?);
            }
            let type_id = r.u32(&format_args!("type of tensor `{name}`"))?;
            let ggml_type = GgmlType::from_id(type_id).with_context(|| {
                format!("`{file_name}`: tensor `{name}` has GGML type id {type_id}, which kiln does not know (a newer llama.cpp type?)")
            })?;
            let offset = r.u64(&format_args!("data offset of tensor `{name}`"))?;
            let n_bytes = tensor_bytes(&ne, ggml_type).with_context(|| {
                format!("`{file_name}` is corrupt: tensor `{name}` has impossible dimensions {ne:?} for type {ggml_type}")
            })?;
            if offset % alignment != 0 {
                bail!("`{file_name}` is corrupt: tensor `{name}` starts at data offset {offset}, which is not a multiple of the alignment {alignment}");
            }
            if tensor_index.insert(name.clone(), tensors.len()).is_some() {
                bail!("`{file_name}` is corrupt: tensor `{name}` appears twice");
            }
            tensors.push(GgufTensorInfo { name, ne, ggml_type, offset, n_bytes });
        }

        let data_offset = align_up(r.pos() as u64, alignment).context("data offset overflows")?;
        let file_len = bytes.len() as u64;
        for t in &tensors {
            let end = data_offset.checked_add(t.offset).and_then(|s| s.checked_add(t.n_bytes));
            match end {
                Some(end) if end <= file_len => {}
                _ => bail!(
                    "`{file_name}` is truncated: tensor `{}` ({} bytes at data offset {}) ends past the end of the file ({file_len} bytes, data section at {data_offset})",
                    t.name,
                    t.n_bytes,
                    t.offset
                ),
            }
        }

        Ok(GgufFile { file_name: file_name.to_string(), version, metadata, meta_index, tensors, tensor_index, alignment, data_offset })
    }

    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.meta_index.get(key).map(|&i| &self.metadata[i].1)
    }

    pub fn tensor_info(&self, name: &str) -> Option<&GgufTensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// Bytes of tensor `info` inside `bytes` (the buffer this header was parsed from).
    pub fn tensor_data<'b>(&self, bytes: &'b [u8], info: &GgufTensorInfo) -> Result<&'b [u8]> {
        let start = self.data_offset.checked_add(info.offset);
        let end = start.and_then(|s| s.checked_add(info.n_bytes));
        match (start, end) {
            (Some(s), Some(e)) if e <= bytes.len() as u64 => Ok(&bytes[s as usize..e as usize]),
            _ => bail!("`{}`: tensor `{}` lies outside the file", self.file_name, info.name),
        }
    }

    pub fn u64_opt(&self, key: &str) -> Result<Option<u64>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => match v.as_u64() {
                Some(u) => Ok(Some(u)),
                None => bail!("`{}`: metadata `{key}` is {}, expected a non-negative integer", self.file_name, v.describe()),
            },
        }
    }

    pub fn u64_req(&self, key: &str) -> Result<u64> {
        self.u64_opt(key)?.with_context(|| format!("`{}`: required metadata `{key}` is missing", self.file_name))
    }

    pub fn usize_req(&self, key: &str) -> Result<usize> {
        let v = self.u64_req(key)?;
        usize::try_from(v).with_context(|| format!("`{}`: metadata `{key}` = {v} is too large", self.file_name))
    }

    pub fn f64_opt(&self, key: &str) -> Result<Option<f64>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => match v.as_f64() {
                Some(f) => Ok(Some(f)),
                None => bail!("`{}`: metadata `{key}` is {}, expected a number", self.file_name, v.describe()),
            },
        }
    }

    pub fn str_opt(&self, key: &str) -> Result<Option<&str>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => match v.as_str() {
                Some(s) => Ok(Some(s)),
                None => bail!("`{}`: metadata `{key}` is {}, expected a string", self.file_name, v.describe()),
            },
        }
    }

    pub fn bool_opt(&self, key: &str) -> Result<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => match v.as_bool() {
                Some(b) => Ok(Some(b)),
                None => bail!("`{}`: metadata `{key}` is {}, expected a bool", self.file_name, v.describe()),
            },
        }
    }

    /// An array whose elements are all of type `elem`, or `None` when the key is absent.
    pub fn array_opt(&self, key: &str, elem: GgufValueType) -> Result<Option<&[GgufValue]>> {
        match self.get(key) {
            None => Ok(None),
            Some(GgufValue::Array(t, items)) if *t == elem => Ok(Some(items)),
            Some(v) => bail!("`{}`: metadata `{key}` is {}, expected an array of {}", self.file_name, v.describe(), elem.name()),
        }
    }
}

/// Byte length of a tensor of `ne` elements of type `ty`, `None` if impossible or overflowing.
fn tensor_bytes(ne: &[u64], ty: GgmlType) -> Option<u64> {
    let numel = ne.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d))?;
    // Every dim must also fit usize, so shapes can be handed out without checks.
    for &d in ne {
        usize::try_from(d).ok()?;
    }
    let inner = ne.first().copied().unwrap_or(1);
    if inner % ty.block_size() != 0 {
        return None;
    }
    let n_bytes = (numel / ty.block_size()).checked_mul(ty.block_bytes())?;
    usize::try_from(n_bytes).ok()?;
    Some(n_bytes)
}

fn read_string(r: &mut Reader<'_>, what: &dyn fmt::Display) -> Result<String> {
    let at = r.pos();
    let n = r.len_u64(&format_args!("length of {what}"))?;
    let b = r.take(n, what)?;
    match std::str::from_utf8(b) {
        Ok(s) => Ok(s.to_string()),
        Err(e) => bail!("`{}` is corrupt: {what} at byte {at} is not valid UTF-8 ({e})", r.file()),
    }
}

fn read_value(r: &mut Reader<'_>, ty: GgufValueType, key: &str, depth: u32) -> Result<GgufValue> {
    let what = format_args!("value of metadata `{key}`");
    Ok(match ty {
        GgufValueType::U8 => GgufValue::U8(r.u8(&what)?),
        GgufValueType::I8 => GgufValue::I8(r.i8(&what)?),
        GgufValueType::U16 => GgufValue::U16(r.u16(&what)?),
        GgufValueType::I16 => GgufValue::I16(r.i16(&what)?),
        GgufValueType::U32 => GgufValue::U32(r.u32(&what)?),
        GgufValueType::I32 => GgufValue::I32(r.i32(&what)?),
        GgufValueType::U64 => GgufValue::U64(r.u64(&what)?),
        GgufValueType::I64 => GgufValue::I64(r.i64(&what)?),
        GgufValueType::F32 => GgufValue::F32(r.f32(&what)?),
        GgufValueType::F64 => GgufValue::F64(r.f64(&what)?),
        GgufValueType::Bool => match r.u8(&what)? {
            0 => GgufValue::Bool(false),
            1 => GgufValue::Bool(true),
            b => bail!("`{}` is corrupt: metadata `{key}` is a bool with byte value {b}", r.file()),
        },
        GgufValueType::String => GgufValue::String(read_string(r, &what)?),
        GgufValueType::Array => {
            if depth >= MAX_ARRAY_DEPTH {
                bail!("`{}` is corrupt: metadata `{key}` nests arrays more than {MAX_ARRAY_DEPTH} deep", r.file());
            }
            let type_id = r.u32(&format_args!("element type of metadata `{key}`"))?;
            let elem = GgufValueType::from_id(type_id)
                .with_context(|| format!("`{}` is corrupt: metadata `{key}` is an array of unknown type {type_id}", r.file()))?;
            let n = r.u64(&format_args!("length of metadata array `{key}`"))?;
            if n > (r.remaining() / elem.min_bytes()) as u64 {
                bail!(
                    "`{}` is truncated or corrupt: metadata array `{key}` claims {n} {} elements, which cannot fit in the remaining {} bytes",
                    r.file(),
                    elem.name(),
                    r.remaining()
                );
            }
            let mut items = Vec::with_capacity(n as usize);
            for _ in 0..n {
                items.push(read_value(r, elem, key, depth + 1)?);
            }
            GgufValue::Array(elem, items)
        }
    })
}

/// `{arch}.*` keys kiln reads, or knows not to change the math.
const KNOWN_ARCH_KEYS: &[&str] = &[
    "context_length",
    "embedding_length",
    "block_count",
    "feed_forward_length",
    "vocab_size",
    "attention.head_count",
    "attention.head_count_kv",
    "attention.key_length",
    "attention.value_length",
    "attention.layer_norm_rms_epsilon",
    "rope.freq_base",
    "rope.dimension_count",
    "rope.scaling.type",
    "rope.scaling.factor",
    "rope.scaling.original_context_length",
    "rope.scaling.low_freq_factor",
    "rope.scaling.high_freq_factor",
    // Informational: whether the model was fine-tuned with scaling; does not change the math.
    "rope.scaling.finetuned",
    // Informational: which checkpoint layout the converter started from.
    "tensor_data_layout",
];

/// Refuses `{arch}.*` keys that kiln does not understand, and known keys whose value would
/// change the math (MoE experts, non-causal attention, attention-factor scaling).
fn check_arch_keys(file: &GgufFile, arch: &str) -> Result<()> {
    let prefix = format!("{arch}.");
    for (key, value) in &file.metadata {
        let Some(suffix) = key.strip_prefix(&prefix) else {
            if key == "split.count" && value.as_u64().unwrap_or(0) > 1 {
                bail!(
                    "`{}` is one part of a split GGUF ({} parts); merge the parts first (`llama-gguf-split --merge`)",
                    file.file_name,
                    value.describe()
                );
            }
            continue;
        };
        if KNOWN_ARCH_KEYS.contains(&suffix) {
            continue;
        }
        let harmless = match suffix {
            "expert_count" | "expert_used_count" => value.as_u64() == Some(0),
            "attention.causal" => value.as_bool() == Some(true),
            "rope.scaling.attn_factor" => value.as_f64() == Some(1.0),
            _ => false,
        };
        if !harmless {
            bail!(
                "`{}`: metadata `{key}` = {} is not supported by kiln: it changes what the model computes, and kiln refuses \
                 rather than ignore it (keys kiln understands under `{prefix}`: {})",
                file.file_name,
                value.describe(),
                KNOWN_ARCH_KEYS.join(", ")
            );
        }
    }
    Ok(())
}

/// What reading the config decided about tensors outside kiln's canonical table.
#[derive(Clone, Debug, Default)]
pub struct GgufConsumed {
    /// Tensors the config absorbed (`rope_freqs.weight`, a duplicate `output.weight`).
    pub absorbed: Vec<String>,
}

/// Reads kiln's [`ModelConfig`] from GGUF metadata (and the presence of a few tensors).
/// `bytes` is the buffer `file` was parsed from (needed to compare tied output tensors and to
/// read `rope_freqs.weight`).
pub fn gguf_config(file: &GgufFile, bytes: &[u8]) -> Result<(ModelConfig, GgufConsumed)> {
    let name = &file.file_name;
    let arch_name = file
        .str_opt("general.architecture")?
        .with_context(|| format!("`{name}` has no `general.architecture` metadata; is it a model GGUF?"))?;
    let arch = match arch_name {
        "llama" => Arch::Llama,
        "qwen2" => Arch::Qwen2,
        "qwen3" => Arch::Qwen3,
        other => bail!("`{name}`: architecture `{other}` is not supported by kiln (supported: {})", SUPPORTED_ARCHS.join(", ")),
    };
    check_arch_keys(file, arch_name)?;
    let key = |k: &str| format!("{arch_name}.{k}");

    let hidden_size = file.usize_req(&key("embedding_length"))?;
    let n_layers = file.usize_req(&key("block_count"))?;
    // Each block has several tensors; a larger count is corrupt, and would make the tensor
    // table (`ModelConfig::tensors`) enormous.
    if n_layers > file.tensors.len() {
        bail!("`{name}`: `{}` is {n_layers}, but the file holds only {} tensors", key("block_count"), file.tensors.len());
    }
    let intermediate_size = file.usize_req(&key("feed_forward_length"))?;
    let n_heads = file.usize_req(&key("attention.head_count"))?;
    let n_kv_heads = match file.u64_opt(&key("attention.head_count_kv"))? {
        Some(_) => file.usize_req(&key("attention.head_count_kv"))?,
        None => n_heads,
    };
    if n_heads == 0 {
        bail!("`{name}`: `{}` is 0", key("attention.head_count"));
    }
    let head_dim = match file.u64_opt(&key("attention.key_length"))? {
        Some(_) => file.usize_req(&key("attention.key_length"))?,
        None => hidden_size / n_heads,
    };
    if let Some(v) = file.u64_opt(&key("attention.value_length"))? {
        if v != head_dim as u64 {
            bail!("`{name}`: value head size {v} differs from key head size {head_dim}; kiln needs them equal");
        }
    }
    let rms_norm_eps = file
        .f64_opt(&key("attention.layer_norm_rms_epsilon"))?
        .with_context(|| format!("`{name}`: required metadata `{}` is missing", key("attention.layer_norm_rms_epsilon")))?
        as f32;
    let theta = file.f64_opt(&key("rope.freq_base"))?.unwrap_or(10000.0) as f32;
    let rotary_dim = match file.u64_opt(&key("rope.dimension_count"))? {
        Some(d) => u32::try_from(d).with_context(|| format!("`{name}`: rope dimension count {d} is too large"))?,
        None => u32::try_from(head_dim).context("head_dim too large")?,
    };
    let max_position_embeddings = file.usize_req(&key("context_length"))?;

    let mut consumed = GgufConsumed::default();
    let mut scaling = rope_scaling_from_metadata(file, arch_name)?;
    if let Some(info) = file.tensor_info("rope_freqs.weight") {
        if scaling != RopeScaling::None {
            bail!("`{name}` has both RoPE scaling metadata and a `rope_freqs.weight` tensor; kiln cannot tell which applies");
        }
        scaling = rope_scaling_from_factors(file, bytes, info, theta, rotary_dim)?;
        consumed.absorbed.push(info.name.clone());
    }
    let style = match arch {
        // convert_hf_to_gguf permutes Q/K of `llama` so that RoPE rotates adjacent pairs.
        Arch::Llama => RopeStyle::Interleaved,
        Arch::Qwen2 | Arch::Qwen3 => RopeStyle::HalfSplit,
    };

    let embd = file.tensor_info("token_embd.weight").with_context(|| format!("`{name}` has no `token_embd.weight` tensor"))?;
    let vocab_size = match file.u64_opt(&key("vocab_size"))? {
        Some(_) => file.usize_req(&key("vocab_size"))?,
        None => match file.get("tokenizer.ggml.tokens").and_then(GgufValue::as_array) {
            Some(tokens) => tokens.len(),
            None => embd.shape().first().copied().unwrap_or(0),
        },
    };
    let tie_word_embeddings = match file.tensor_info("output.weight") {
        None => true,
        Some(out) => {
            // llama2.c converters write the shared table twice; one copy is enough.
            let same =
                out.ggml_type == embd.ggml_type && out.ne == embd.ne && file.tensor_data(bytes, out)? == file.tensor_data(bytes, embd)?;
            if same {
                consumed.absorbed.push(out.name.clone());
            }
            same
        }
    };
    let bos_token_id = token_id_opt(file, "tokenizer.ggml.bos_token_id")?;
    let mut eos_token_ids = Vec::new();
    // llama.cpp stops at any end-of-generation token: eos, eot (end of turn), eom (end of message).
    for k in ["tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"] {
        if let Some(id) = token_id_opt(file, k)? {
            if !eos_token_ids.contains(&id) {
                eos_token_ids.push(id);
            }
        }
    }

    let config = ModelConfig {
        arch,
        vocab_size,
        hidden_size,
        intermediate_size,
        n_layers,
        n_heads,
        n_kv_heads,
        head_dim,
        rms_norm_eps,
        rope: RopeSpec { style, theta, rotary_dim, scaling },
        tie_word_embeddings,
        qkv_bias: file.tensor_info("blk.0.attn_q.bias").is_some(),
        qk_norm: arch == Arch::Qwen3,
        max_position_embeddings,
        bos_token_id,
        eos_token_ids,
    };
    config.validate().with_context(|| format!("`{name}`: metadata gives an inconsistent config"))?;
    super::ensure_addressable(&config).with_context(|| format!("`{name}`"))?;
    Ok((config, consumed))
}

/// A token id from metadata; llama.cpp writes `u32::MAX` (-1) for "none".
pub fn token_id_opt(file: &GgufFile, key: &str) -> Result<Option<u32>> {
    match file.get(key) {
        None => Ok(None),
        Some(v) => match v.as_u64() {
            Some(id) if id < u32::MAX as u64 => Ok(Some(id as u32)),
            Some(_) => Ok(None),
            None if matches!(v, GgufValue::I32(-1) | GgufValue::I64(-1)) => Ok(None),
            None => bail!("`{}`: metadata `{key}` is {}, expected a token id", file.file_name, v.describe()),
        },
    }
}

fn rope_scaling_from_metadata(file: &GgufFile, arch: &str) -> Result<RopeScaling> {
    let name = &file.file_name;
    let key = |k: &str| format!("{arch}.{k}");
    let factor = file.f64_opt(&key("rope.scaling.factor"))?.map(|f| f as f32);
    let need_factor = || -> Result<f32> {
        match factor {
            Some(f) if f > 0.0 => Ok(f),
            Some(f) => bail!("`{name}`: `{}` is {f}, expected a positive number", key("rope.scaling.factor")),
            None => bail!("`{name}`: RoPE scaling needs `{}`", key("rope.scaling.factor")),
        }
    };
    Ok(match file.str_opt(&key("rope.scaling.type"))? {
        // llama.cpp reads a factor without a type as linear; 0 means "not set".
        None => match factor {
            None => RopeScaling::None,
            Some(f) if f == 0.0 || f == 1.0 => RopeScaling::None,
            Some(_) => RopeScaling::Linear { factor: need_factor()? },
        },
        Some("none") => RopeScaling::None,
        Some("linear") => RopeScaling::Linear { factor: need_factor()? },
        Some("llama3") => RopeScaling::Llama3 {
            factor: need_factor()?,
            low_freq_factor: file.f64_opt(&key("rope.scaling.low_freq_factor"))?.unwrap_or(1.0) as f32,
            high_freq_factor: file.f64_opt(&key("rope.scaling.high_freq_factor"))?.unwrap_or(4.0) as f32,
            original_max_position: file
                .u64_opt(&key("rope.scaling.original_context_length"))?
                .unwrap_or(8192)
                .try_into()
                .context("original context length too large")?,
        },
        Some(other) => bail!("`{name}`: RoPE scaling type `{other}` is not supported by kiln (supported: none, linear, llama3)"),
    })
}

/// llama.cpp stores Llama 3.1 RoPE scaling as a `rope_freqs.weight` tensor of per-pair
/// frequency divisors. kiln recognises it when it equals Llama 3 scaling with the published
/// parameters (low 1, high 4, original context 8192) and the factor it holds for the longest
/// wavelengths; anything else is refused.
fn rope_scaling_from_factors(file: &GgufFile, bytes: &[u8], info: &GgufTensorInfo, theta: f32, rotary_dim: u32) -> Result<RopeScaling> {
    let name = &file.file_name;
    let pairs = (rotary_dim / 2) as usize;
    if info.ggml_type != GgmlType::F32 || info.shape() != [pairs] {
        bail!(
            "`{name}`: tensor `rope_freqs.weight` is {} {:?}; expected F32 [{pairs}] per-frequency RoPE factors",
            info.ggml_type,
            info.shape()
        );
    }
    let data = file.tensor_data(bytes, info)?;
    let factors: Vec<f32> = data.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    if factors.iter().all(|&f| f == 1.0) {
        return Ok(RopeScaling::None);
    }
    let factor = factors.iter().copied().fold(1.0f32, f32::max);
    let candidate = RopeScaling::Llama3 { factor, low_freq_factor: 1.0, high_freq_factor: 4.0, original_max_position: 8192 };
    let scaled = RopeSpec { style: RopeStyle::HalfSplit, theta, rotary_dim, scaling: candidate };
    let plain = RopeSpec { scaling: RopeScaling::None, ..scaled };
    for (i, &f) in factors.iter().enumerate() {
        let expected = plain.inv_freq(i) / scaled.inv_freq(i);
        if (expected - f).abs() > 1e-3 * expected.abs().max(1.0) {
            bail!(
                "`{name}`: tensor `rope_freqs.weight` holds per-frequency RoPE factors that are not Llama 3 scaling \
                 (factor {factor}, low 1, high 4, original context 8192): pair {i} has {f}, Llama 3 gives {expected}; \
                 kiln does not support arbitrary RoPE factors yet"
            );
        }
    }
    Ok(candidate)
}

/// A GGUF file as a [`WeightSource`]: tensors are served straight from the buffer.
pub struct GgufWeights {
    bytes: ModelBytes,
    gguf: GgufFile,
    /// Tensors the config absorbed; not reported by `tensor_names`.
    absorbed: Vec<String>,
}

impl GgufWeights {
    /// Parses the header of `bytes` (named `file_name` in messages).
    pub fn new(bytes: ModelBytes, file_name: &str) -> Result<GgufWeights> {
        let gguf = GgufFile::parse(&bytes, file_name)?;
        Ok(GgufWeights { bytes, gguf, absorbed: Vec::new() })
    }

    pub fn gguf(&self) -> &GgufFile {
        &self.gguf
    }

    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// A tensor of any GGML type, with its raw bytes (for future dequantization and tools).
    pub fn raw_tensor(&self, name: &str) -> Result<(&GgufTensorInfo, &[u8])> {
        let info = self.gguf.tensor_info(name).with_context(|| format!("`{}` has no tensor `{name}`", self.gguf.file_name))?;
        Ok((info, self.gguf.tensor_data(&self.bytes, info)?))
    }
}

impl WeightSource for GgufWeights {
    fn tensor(&self, name: &str) -> Result<TensorRef<'_>> {
        let (info, data) = self.raw_tensor(name)?;
        let Some(dtype) = info.ggml_type.src_dtype() else {
            bail!(
                "tensor `{name}` in `{}` is {}; kiln loads only F32/F16/BF16 GGUF tensors so far \
                 (use an F32/F16/BF16 GGUF or the model's Hugging Face weights)",
                self.gguf.file_name,
                info.ggml_type
            );
        };
        let shape = info.shape();
        let expected = shape.iter().product::<usize>() * dtype.size();
        if data.len() != expected {
            bail!(
                "tensor `{name}` in `{}` holds {} bytes, but shape {shape:?} of {} needs {expected}",
                self.gguf.file_name,
                data.len(),
                dtype.name()
            );
        }
        Ok(TensorRef { dtype, shape, data })
    }

    fn describe(&self) -> String {
        self.gguf.file_name.clone()
    }

    fn tensor_names(&self) -> Option<Vec<String>> {
        Some(self.gguf.tensors.iter().filter(|t| !self.absorbed.contains(&t.name)).map(|t| t.name.clone()).collect())
    }
}

/// Opens a GGUF buffer as a model: config from metadata, weights, tokenizer from the vocabulary.
pub fn load_gguf(bytes: ModelBytes, file_name: &str) -> Result<LoadedModel> {
    let mut weights = GgufWeights::new(bytes, file_name)?;
    let (config, consumed) = gguf_config(&weights.gguf, &weights.bytes)?;
    refuse_unloadable_types(&weights.gguf, &config)?;
    weights.absorbed = consumed.absorbed;
    let tokenizer = gguf_tokenizer(&weights.gguf, &config)?;
    let source = format!("{file_name} (GGUF v{}, {})", weights.gguf.version, config.arch.name());
    Ok(LoadedModel { config, weights: Box::new(weights), tokenizer, source })
}

/// One error for all tensors of the model whose GGML type kiln cannot load (a quantized file
/// has hundreds; listing each would bury the point).
fn refuse_unloadable_types(file: &GgufFile, config: &ModelConfig) -> Result<()> {
    let mut first = None;
    let mut counts: Vec<(GgmlType, usize)> = Vec::new();
    for spec in config.tensors() {
        let Some(info) = file.tensor_info(&spec.name) else { continue };
        if info.ggml_type.src_dtype().is_some() {
            continue;
        }
        first.get_or_insert(info);
        match counts.iter_mut().find(|(t, _)| *t == info.ggml_type) {
            Some((_, n)) => *n += 1,
            None => counts.push((info.ggml_type, 1)),
        }
    }
    let Some(first) = first else { return Ok(()) };
    let total: usize = counts.iter().map(|(_, n)| n).sum();
    counts.sort_by_key(|c| std::cmp::Reverse(c.1));
    let by_type: Vec<String> = counts.iter().map(|(t, n)| format!("{n} {t}")).collect();
    bail!(
        "tensor `{}` in `{}` is {}; kiln loads only F32/F16/BF16 GGUF tensors so far ({total} of the model's tensors \
         are quantized: {}). Use an F32/F16/BF16 GGUF or the model's Hugging Face weights.",
        first.name,
        file.file_name,
        first.ggml_type,
        by_type.join(", ")
    )
}

/// Opens the GGUF file at `path`.
pub fn open_gguf(path: &Path) -> Result<LoadedModel> {
    load_gguf(map_file(path)?, &path.display().to_string())
}

/// The tokenizer a GGUF file carries (`tokenizer.ggml.model`), `None` when it has none.
pub fn gguf_tokenizer(file: &GgufFile, config: &ModelConfig) -> Result<Option<Box<dyn Tokenizer>>> {
    match file.str_opt("tokenizer.ggml.model")? {
        None | Some("none") | Some("no_vocab") => Ok(None),
        Some("llama") => Ok(Some(Box::new(super::tokenizer_spm::SpmTokenizer::from_gguf(file, config)?))),
        Some("gpt2") => Ok(Some(Box::new(super::tokenizer_hf::HfTokenizer::from_gguf_bpe(file, config)?))),
        Some(other) => bail!(
            "`{}`: tokenizer model `{other}` is not supported by kiln (supported: `llama` SentencePiece, `gpt2` byte-level BPE)",
            file.file_name
        ),
    }
}
