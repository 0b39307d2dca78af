//! The op IR: one [`Program`] per (phase, bucket), a flat list of [`Value`]s and [`OpNode`]s
//! in execution order. Shapes are static; a program is lowered once per bucket.
//!
//! Owns: ids, dtypes, shapes, the closed [`Op`] enum, the verifier and the text form.
//! Never: addresses, launch geometry or anything device-specific (that is `plan`'s).

pub mod op;
pub mod text;
pub mod types;
pub mod verify;

pub use op::{group_sumsq, stats_inv, NormOrder, Op, OutNorm, Qkv, RopeScaling, RopeSpec, RopeStyle};
pub use types::{DType, OpId, Shape, ValueId};

use serde::{Deserialize, Serialize};

/// Where a value lives for its whole life. The planner gives each class its own region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ValueClass {
    /// A model tensor; read-only; named by its canonical tensor name (`blk.3.attn_q.weight`).
    Weight,
    /// Persistent state carried across steps (KV cache today; recurrent state and conv rings
    /// later). Named by the model (`blk.3.k_cache`).
    State,
    /// A per-step input in the device-resident step block (`step.positions`). Written by the
    /// host (or a device loop) between steps, never by a program.
    Step,
    /// A result the host reads after a step (`out.logits`, `out.tokens`).
    Output,
    /// An intermediate; lives in the activation arena only between its first write and last read.
    Temp,
    /// Tokens a device loop streams to the host (`ring.tokens`); host-mapped memory on a GPU,
    /// read by the host without synchronizing. Written only by `advance`.
    Ring,
}

impl ValueClass {
    pub fn name(self) -> &'static str {
        match self {
            ValueClass::Weight => "weight",
            ValueClass::State => "state",
            ValueClass::Step => "step",
            ValueClass::Output => "output",
            ValueClass::Temp => "temp",
            ValueClass::Ring => "ring",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Value {
    pub name: String,
    pub dtype: DType,
    pub shape: Shape,
    pub class: ValueClass,
}

impl Value {
    pub fn bytes(&self) -> u64 {
        (self.shape.numel() * self.dtype.size()) as u64
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OpNode {
    /// Name from the model (`blk.3.attn_q`), unique within the program.
    pub name: String,
    pub op: Op,
}

/// What a program computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Phase {
    /// One new token for each of `bucket` sequences.
    Decode,
    /// Up to `bucket` prompt tokens of one sequence; logits for the last real token only.
    Prefill,
    /// A device loop: the decode program of `bucket` sequences followed by `advance`, repeated
    /// on the device until the loop control says stop (budget, stop token, context end).
    DecodeLoop,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Decode => "decode",
            Phase::Prefill => "prefill",
            Phase::DecodeLoop => "loop",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Program {
    pub phase: Phase,
    /// Batch size (decode) or token count (prefill) this program was lowered for.
    pub bucket: usize,
    /// Tokens processed per step (`bucket` for both phases).
    pub tokens: usize,
    /// Rows of logits produced (decode: `bucket`; prefill: 1).
    pub sample_rows: usize,
    pub values: Vec<Value>,
    pub ops: Vec<OpNode>,
}

impl Program {
    pub fn new(phase: Phase, bucket: usize, sample_rows: usize) -> Program {
        Program { phase, bucket, tokens: bucket, sample_rows, values: Vec::new(), ops: Vec::new() }
    }

    /// `decode.b4`, `prefill.t256`.
    pub fn label(&self) -> String {
        match self.phase {
            Phase::Decode => format!("decode.b{}", self.bucket),
            Phase::Prefill => format!("prefill.t{}", self.bucket),
            Phase::DecodeLoop => format!("loop.b{}", self.bucket),
        }
    }

    pub fn value(&self, id: ValueId) -> &Value {
        &self.values[id.index()]
    }

    /// Adds a value; values of a class other than `Temp` are shared by name, so asking twice
    /// for `blk.0.k_cache` returns the same id.
    pub fn add_value(&mut self, name: impl Into<String>, dtype: DType, shape: &[usize], class: ValueClass) -> ValueId {
        let name = name.into();
        if class != ValueClass::Temp {
            if let Some(i) = self.values.iter().position(|v| v.name == name) {
                return ValueId(i as u32);
            }
        }
        self.values.push(Value { name, dtype, shape: Shape::new(shape), class });
        ValueId(self.values.len() as u32 - 1)
    }

    pub fn push(&mut self, name: impl Into<String>, op: Op) -> OpId {
        self.ops.push(OpNode { name: name.into(), op });
        OpId(self.ops.len() as u32 - 1)
    }

    pub fn value_by_name(&self, name: &str) -> Option<ValueId> {
        self.values.iter().position(|v| v.name == name).map(|i| ValueId(i as u32))
    }
}
