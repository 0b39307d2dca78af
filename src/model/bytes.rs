//! The bytes of a model file, and a bounds-checked little-endian reader over them.
//!
//! Owns: memory-mapping files (or borrowing bytes embedded in the binary) and the one cursor
//! every binary parser in `model` reads through.
//! Never: indexes with an offset taken from a file without checking it first, or panics on a
//! malformed file. Every failed read names the file, what was being read and where.

use anyhow::{bail, Context, Result};
use memmap2::Mmap;
use std::fs::File;
use std::ops::Deref;
use std::path::Path;

/// A whole model file in memory: mapped from disk, embedded in the binary, or owned.
pub enum ModelBytes {
    Mapped(Mmap),
    Static(&'static [u8]),
    Owned(Vec<u8>),
}

impl Deref for ModelBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            ModelBytes::Mapped(m) => m,
            ModelBytes::Static(s) => s,
            ModelBytes::Owned(v) => v,
        }
    }
}

/// Memory-maps `path` read-only. A missing file gives an error that says what kiln accepts.
pub fn map_file(path: &Path) -> Result<ModelBytes> {
    if !path.exists() {
        bail!("model file `{}` not found", path.display());
    }
    let file = File::open(path).with_context(|| format!("cannot open `{}`", path.display()))?;
    let len = file.metadata().with_context(|| format!("cannot stat `{}`", path.display()))?.len();
    if len == 0 {
        // Mapping an empty file fails on some platforms; an empty buffer parses to a clear error.
        return Ok(ModelBytes::Owned(Vec::new()));
    }
    // SAFETY: the mapping is read-only. Like every mmap-based loader, kiln assumes the file is not
    // truncated or rewritten by another process while it is open.
    let map = unsafe { Mmap::map(&file) }.with_context(|| format!("cannot memory-map `{}`", path.display()))?;
    Ok(ModelBytes::Mapped(map))
}

/// Reads a small file (tokenizer, config) whole, with a not-found message naming it.
pub fn read_small_file(path: &Path, what: &str) -> Result<Vec<u8>> {
    if !path.exists() {
        bail!("{what} `{}` not found", path.display());
    }
    std::fs::read(path).with_context(|| format!("cannot read {what} `{}`", path.display()))
}

/// A cursor over `buf` whose every read is checked against the end of the buffer.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    /// The file, for messages.
    file: &'a str,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8], file: &'a str) -> Self {
        Reader { buf, pos: 0, file }
    }

    pub fn pos(&self) -> usize {
        self.pos
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub fn file(&self) -> &'a str {
        self.file
    }

    /// The next `n` bytes; `what` names them in the error if the file ends first.
    pub fn take(&mut self, n: usize, what: &dyn std::fmt::Display) -> Result<&'a [u8]> {
        let end = match self.pos.checked_add(n) {
            Some(end) if end <= self.buf.len() => end,
            _ => bail!(
                "`{}` is truncated or corrupt: {what} at byte {} needs {n} bytes, but the file ends at byte {}",
                self.file,
                self.pos,
                self.buf.len()
            ),
        };
        let out = &self.buf[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, what: &dyn std::fmt::Display) -> Result<[u8; N]> {
        let b = self.take(N, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(b);
        Ok(out)
    }

    pub fn u8(&mut self, what: &dyn std::fmt::Display) -> Result<u8> {
        Ok(self.array::<1>(what)?[0])
    }
    pub fn i8(&mut self, what: &dyn std::fmt::Display) -> Result<i8> {
        Ok(i8::from_le_bytes(self.array(what)?))
    }
    pub fn u16(&mut self, what: &dyn std::fmt::Display) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }
    pub fn i16(&mut self, what: &dyn std::fmt::Display) -> Result<i16> {
        Ok(i16::from_le_bytes(self.array(what)?))
    }
    pub fn u32(&mut self, what: &dyn std::fmt::Display) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    pub fn i32(&mut self, what: &dyn std::fmt::Display) -> Result<i32> {
        Ok(i32::from_le_bytes(self.array(what)?))
    }
    pub fn u64(&mut self, what: &dyn std::fmt::Display) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }
    pub fn i64(&mut self, what: &dyn std::fmt::Display) -> Result<i64> {
        Ok(i64::from_le_bytes(self.array(what)?))
    }
    pub fn f32(&mut self, what: &dyn std::fmt::Display) -> Result<f32> {
        Ok(f32::from_le_bytes(self.array(what)?))
    }
    pub fn f64(&mut self, what: &dyn std::fmt::Display) -> Result<f64> {
        Ok(f64::from_le_bytes(self.array(what)?))
    }

    /// A length read from the file, as `usize`, refused when it is longer than what is left:
    /// a corrupt length must give an error, not a huge allocation.
    pub fn len_u64(&mut self, what: &dyn std::fmt::Display) -> Result<usize> {
        let at = self.pos;
        let n = self.u64(what)?;
        match usize::try_from(n) {
            Ok(n) if n <= self.remaining() => Ok(n),
            _ => bail!("`{}` is truncated or corrupt: {what} at byte {at} is {n}, but only {} bytes follow", self.file, self.remaining()),
        }
    }
}

/// Rounds `offset` up to a multiple of `align` (a power of two), or `None` on overflow.
pub fn align_up(offset: u64, align: u64) -> Option<u64> {
    let mask = align.checked_sub(1)?;
    offset.checked_add(mask).map(|x| x & !mask)
}

/// Product of `dims` as `usize`, or `None` on overflow.
pub fn checked_numel(dims: &[usize]) -> Option<usize> {
    dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}
