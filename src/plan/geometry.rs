//! Launch geometry of each kernel: grid, block and dynamic shared memory, decided at plan
//! time from the kernel's parameters. Must agree with the CUDA sources in `kernels/`.

use super::{BufArg, Kernel};

pub struct Geometry {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_bytes: u32,
}

pub fn launch_geometry(kernel: &Kernel, _bufs: &[BufArg]) -> Geometry {
    let g = |x: u32, y: u32, threads: u32| Geometry { grid: [x.max(1), y.max(1), 1], block: [threads, 1, 1], shared_bytes: 0 };
    match *kernel {
        Kernel::Gather { rows, .. } => g(rows, 1, 256),
        Kernel::RmsNorm { rows, .. } => g(rows, 1, 256),
        Kernel::HeadRmsNorm { rows, heads, .. } => g(rows, heads, 128),
        Kernel::Linear { rows, out_features, .. } => g(out_features.div_ceil(8), rows, 256),
        Kernel::Rope { rows, heads, .. } => g(rows, heads, 128),
        Kernel::KvWrite { rows, .. } => g(rows, 1, 256),
        Kernel::Attention { rows, heads, .. } => g(heads, rows, 256),
        Kernel::SwiGlu { n } | Kernel::Add { n } => g(n.div_ceil(256), 1, 256),
        Kernel::Sample { rows, .. } => g(rows, 1, 1024),
    }
}
