//! The CUDA sources of kiln's kernels (`kernels/*.cu`, `kernels/*.cuh`), embedded at build
//! time by `build.rs`. NVRTC compiles them at load (`super::nvrtc`); the hash of the sources
//! keys the compiled-kernel cache.

include!(concat!(env!("OUT_DIR"), "/kernel_sources.rs"));

/// Contents of one embedded file by name (`"linear.cu"`).
pub fn source(name: &str) -> Option<&'static str> {
    SOURCES.iter().find(|(n, _)| *n == name).map(|(_, s)| *s)
}

/// The kernel translation units (`*.cu`), sorted by name.
pub fn kernel_files() -> impl Iterator<Item = (&'static str, &'static str)> {
    SOURCES.iter().copied().filter(|(n, _)| n.ends_with(".cu"))
}

/// Hex SHA-256 over every embedded file's name and contents, in name order: changes exactly
/// when a source changes.
pub fn source_hash() -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for (name, text) in SOURCES {
        h.update((name.len() as u64).to_le_bytes());
        h.update(name.as_bytes());
        h.update((text.len() as u64).to_le_bytes());
        h.update(text.as_bytes());
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_are_sorted_and_include_the_common_header() {
        assert!(SOURCES.windows(2).all(|w| w[0].0 < w[1].0), "SOURCES must be sorted by name");
        assert!(source("common.cuh").is_some());
        assert!(kernel_files().count() >= 10);
        assert_eq!(source_hash().len(), 64);
    }
}
