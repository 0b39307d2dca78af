//! Converting model tensors into the plan's weight region: each tensor, checked against the
//! plan's table, converted to the plan's dtype and placed at its planned offset. Shared by
//! every executor (the CUDA one fills a pinned staging buffer with it).

use crate::ir::DType;
use crate::model::{SrcDType, TensorRef, WeightSource};
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
    let name = t.source();
    let r = src.tensor(name)?;
    if r.shape != t.shape {
        bail!(
            "{}: tensor `{name}` has shape {:?}, but the model config needs {:?}; the file does not match its config",
            src.describe(),
            r.shape,
            t.shape
        );
    }
    let n: usize = t.shape.iter().product();
    if r.data.len() != n * r.dtype.size() {
        bail!(
            "{}: tensor `{name}` holds {} bytes, expected {} ({n} x {})",
            src.describe(),
            r.data.len(),
            n * r.dtype.size(),
            r.dtype.name()
        );
    }
    if dst.len() as u64 != t.bytes {
        bail!("internal: weight `{}` destination is {} bytes, the plan says {}", t.name, dst.len(), t.bytes);
    }
    let same = matches!((r.dtype, t.dtype), (SrcDType::F32, DType::F32) | (SrcDType::F16, DType::F16) | (SrcDType::BF16, DType::BF16));
    match (t.layout, same) {
        (Layout::RowMajor, true) => dst.copy_from_slice(r.data),
        (Layout::RowMajor, false) => convert(&r, t, dst)?,
        // Straight from the source's bytes where no conversion is needed (a memory-mapped file).
        (Layout::GemvTiles, true) => tile_pack(&t.name, t.dtype, &t.shape, r.data, dst)?,
        (Layout::GemvTiles, false) => {
            let mut tmp = vec![0u8; dst.len()];
            convert(&r, t, &mut tmp)?;
            tile_pack(&t.name, t.dtype, &t.shape, &tmp, dst)?;
        }
    }
    Ok(())
}

/// `dst` = `r`'s elements converted to `t.dtype`, row-major.
fn convert(r: &TensorRef, t: &PlannedTensor, dst: &mut [u8]) -> Result<()> {
    let n: usize = t.shape.iter().product();
    let read = |i: usize| -> f32 {
        let b = &r.data[i * r.dtype.size()..];
        match r.dtype {
            SrcDType::F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            SrcDType::F16 => f16::from_le_bytes([b[0], b[1]]).to_f32(),
            SrcDType::BF16 => bf16::from_le_bytes([b[0], b[1]]).to_f32(),
        }
    };
    match t.dtype {
        DType::F32 => (0..n).for_each(|i| dst[i * 4..i * 4 + 4].copy_from_slice(&read(i).to_le_bytes())),
        DType::F16 => (0..n).for_each(|i| dst[i * 2..i * 2 + 2].copy_from_slice(&f16::from_f32(read(i)).to_le_bytes())),
        DType::BF16 => (0..n).for_each(|i| dst[i * 2..i * 2 + 2].copy_from_slice(&bf16::from_f32(read(i)).to_le_bytes())),
        DType::I32 | DType::U32 => bail!("weight `{}` planned as {}, which is not a float type", t.name, t.dtype),
    }
    Ok(())
}

/// `dst` = the row-major `[N, K]` 16-bit `src` tile-packed (`lower::tiles::tile_index`), moved in
/// 16-byte pieces (a lane quad's 8 elements stay together). A 16-row tile of `src` is a 16-row
/// tile of `dst`, so the tiles are packed on every core (loading an 8B model permutes 15 GB).
fn tile_pack(name: &str, dtype: DType, shape: &[usize], src: &[u8], dst: &mut [u8]) -> Result<()> {
    if !crate::lower::tiles::packable(dtype, shape) || src.len() != dst.len() || src.len() != shape.iter().product::<usize>() * 2 {
        bail!("internal: `{name}` ({dtype} {shape:?}) cannot be tile-packed");
    }
    let k = shape[1];
    let tile = 16 * k * 2;
    let pack = |src: &[u8], dst: &mut [u8]| {
        for (r, row) in src.chunks_exact(k * 2).enumerate() {
            for (piece, bytes) in row.chunks_exact(16).enumerate() {
                let at = crate::lower::tiles::tile_index(r, piece * 8, k) * 2;
                dst[at..at + 16].copy_from_slice(bytes);
            }
        }
    };
    let tiles = src.len() / tile;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(tiles.div_ceil(64)).max(1);
    let per = tiles.div_ceil(threads) * tile;
    std::thread::scope(|scope| {
        for (s, d) in src.chunks(per).zip(dst.chunks_mut(per)) {
            scope.spawn(move || pack(s, d));
        }
    });
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tile_pack_puts_every_element_where_tile_index_says_on_every_thread() {
        // 2048 rows: 128 tiles, packed in more than one chunk wherever there are two or more cores.
        let (n, k) = (2048, 64);
        let src: Vec<u8> = (0..n * k).flat_map(|i| (i as u16).wrapping_mul(40503).to_le_bytes()).collect();
        let mut dst = vec![0u8; src.len()];
        tile_pack("w", DType::BF16, &[n, k], &src, &mut dst).unwrap();
        for r in 0..n {
            for c in 0..k {
                let at = crate::lower::tiles::tile_index(r, c, k) * 2;
                assert_eq!(dst[at..at + 2], src[(r * k + c) * 2..(r * k + c) * 2 + 2], "({r}, {c})");
            }
        }
        assert!(tile_pack("w", DType::BF16, &[n, 48], &src[..n * 48 * 2], &mut dst[..n * 48 * 2]).is_err());
    }
}
