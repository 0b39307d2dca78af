//! Converting model tensors into the plan's weight region: each tensor, checked against the
//! plan's table, converted to the plan's dtype and placed at its planned offset. Shared by
//! every executor (the CUDA one fills a pinned staging buffer with it).

use crate::ir::DType;
use crate::model::{SrcDType, WeightSource};
use crate::plan::{Layout, Plan, PlannedTensor, RegionKind};
use anyhow::{bail, Result};
use half::{bf16, f16};

/// Tensors of the weight region in offset order.
pub fn weight_tensors(plan: &Plan) -> impl Iterator<Item = &PlannedTensor> {
    plan.tensors.iter().filter(|t| t.region == RegionKind::Weights)
}

/// Writes `t` from `src` into `dst` (exactly `t.bytes` long), converting to `t.dtype`; a
/// tile-packed twin (`Layout::GemvTiles`, `NAME@tiles`) from `NAME`, permuted.
pub fn convert_tensor(t: &PlannedTensor, src: &dyn WeightSource, dst: &mut [u8]) -> Result<()> {
    if t.layout == Layout::GemvTiles {
        let row_major = PlannedTensor { name: t.source().to_string(), layout: Layout::RowMajor, ..t.clone() };
        let mut tmp = vec![0u8; dst.len()];
        convert_tensor(&row_major, src, &mut tmp)?;
        return tile_pack(&t.name, t.dtype, &t.shape, &tmp, dst);
    }
    let r = src.tensor(&t.name)?;
    if r.shape != t.shape {
        bail!(
            "{}: tensor `{}` has shape {:?}, but the model config needs {:?}; the file does not match its config",
            src.describe(),
            t.name,
            r.shape,
            t.shape
        );
    }
    let n: usize = t.shape.iter().product();
    if r.data.len() != n * r.dtype.size() {
        bail!(
            "{}: tensor `{}` holds {} bytes, expected {} ({n} x {})",
            src.describe(),
            t.name,
            r.data.len(),
            n * r.dtype.size(),
            r.dtype.name()
        );
    }
    if dst.len() as u64 != t.bytes {
        bail!("internal: weight `{}` destination is {} bytes, the plan says {}", t.name, dst.len(), t.bytes);
    }
    let read = |i: usize| -> f32 {
        let b = &r.data[i * r.dtype.size()..];
        match r.dtype {
            SrcDType::F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            SrcDType::F16 => f16::from_le_bytes([b[0], b[1]]).to_f32(),
            SrcDType::BF16 => bf16::from_le_bytes([b[0], b[1]]).to_f32(),
        }
    };
    let same = matches!((r.dtype, t.dtype), (SrcDType::F32, DType::F32) | (SrcDType::F16, DType::F16) | (SrcDType::BF16, DType::BF16));
    if same {
        dst.copy_from_slice(r.data);
        return Ok(());
    }
    match t.dtype {
        DType::F32 => (0..n).for_each(|i| dst[i * 4..i * 4 + 4].copy_from_slice(&read(i).to_le_bytes())),
        DType::F16 => (0..n).for_each(|i| dst[i * 2..i * 2 + 2].copy_from_slice(&f16::from_f32(read(i)).to_le_bytes())),
        DType::BF16 => (0..n).for_each(|i| dst[i * 2..i * 2 + 2].copy_from_slice(&bf16::from_f32(read(i)).to_le_bytes())),
        DType::I32 | DType::U32 => bail!("weight `{}` planned as {}, which is not a float type", t.name, t.dtype),
    }
    Ok(())
}

/// `dst` = the row-major `[N, K]` 16-bit `src` tile-packed (`lower::tiles::tile_index`), moved in
/// 16-byte pieces (a lane quad's 8 elements stay together).
fn tile_pack(name: &str, dtype: DType, shape: &[usize], src: &[u8], dst: &mut [u8]) -> Result<()> {
    if !crate::lower::tiles::packable(dtype, shape) || src.len() != dst.len() || src.len() != shape.iter().product::<usize>() * 2 {
        bail!("internal: `{name}` ({dtype} {shape:?}) cannot be tile-packed");
    }
    let k = shape[1];
    for (r, row) in src.chunks_exact(k * 2).enumerate() {
        for (piece, bytes) in row.chunks_exact(16).enumerate() {
            let at = crate::lower::tiles::tile_index(r, piece * 8, k) * 2;
            dst[at..at + 16].copy_from_slice(bytes);
        }
    }
    Ok(())
}

/// Fills a whole host weight region (`plan.region_bytes[Weights]` long).
pub fn fill_weight_region(plan: &Plan, src: &dyn WeightSource, region: &mut [u8]) -> Result<()> {
    for t in weight_tensors(plan) {
        let o = t.offset as usize;
        convert_tensor(t, src, &mut region[o..o + t.bytes as usize])?;
    }
    Ok(())
}
