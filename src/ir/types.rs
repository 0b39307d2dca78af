//! Element types, shapes and the typed ids every IR table is keyed by.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Element type of a value. Storage type only: kernels always accumulate in f32.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum DType {
    F32,
    F16,
    BF16,
    I32,
    U32,
}

impl DType {
    pub fn size(self) -> usize {
        match self {
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F16 | DType::BF16 => 2,
        }
    }
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16)
    }
    /// Name used in the text form, plan dumps and kernel symbols (`f32`, `bf16`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I32 => "i32",
            DType::U32 => "u32",
        }
    }
    pub fn parse(s: &str) -> anyhow::Result<DType> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "f32" | "float32" => DType::F32,
            "f16" | "float16" => DType::F16,
            "bf16" | "bfloat16" => DType::BF16,
            "i32" | "int32" => DType::I32,
            "u32" | "uint32" => DType::U32,
            other => anyhow::bail!("unknown dtype `{other}`: expected one of f32, f16, bf16"),
        })
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A static shape, row-major, last dimension contiguous. Fixed once a bucket is chosen.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Shape(pub Vec<usize>);

impl Shape {
    pub fn new(dims: &[usize]) -> Shape {
        Shape(dims.to_vec())
    }
    pub fn numel(&self) -> usize {
        self.0.iter().product()
    }
    pub fn rank(&self) -> usize {
        self.0.len()
    }
    pub fn dims(&self) -> &[usize] {
        &self.0
    }
    /// Last dimension (the row length); 1 for a scalar.
    pub fn last(&self) -> usize {
        self.0.last().copied().unwrap_or(1)
    }
    /// Product of all dimensions but the last (the number of rows).
    pub fn rows(&self) -> usize {
        if self.0.is_empty() {
            1
        } else {
            self.0[..self.0.len() - 1].iter().product()
        }
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

macro_rules! entity {
    ($(#[$m:meta])* $name:ident, $prefix:literal) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        pub struct $name(pub u32);
        impl $name {
            pub fn index(self) -> usize {
                self.0 as usize
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
    };
}

entity!(
    /// A value (a tensor) of one program; prints as `v3`.
    ValueId,
    "v"
);
entity!(
    /// An op of one program; prints as `op7`.
    OpId,
    "op"
);
