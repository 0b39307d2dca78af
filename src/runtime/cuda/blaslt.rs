//! cuBLASLt for the plan's `Kernel::Gemm` launches (prefill linears): bf16 / f16 / f32 in,
//! f32 accumulate, the bias in the epilogue, the plan's arena workspace as cuBLASLt's
//! workspace. Everything is decided at load: one matmul descriptor, layouts and algorithm per
//! launch, with every pointer fixed by the plan.
//!
//! Layout: kiln's row-major `out[M, N] = x[M, K] . w[N, K]^T` is cuBLASLt's column-major
//! `D[N, M] = op(A)[N, K] . B[K, M]` with A = w (`K x N`, ld K, transposed), B = x (`K x M`,
//! ld K) and D = out (`N x M`, ld N): the "TN" GEMM, the fast one for tensor cores.
//!
//! Padding invisibility: split-K and stream-K reductions are excluded, so each output element
//! is one tile's K loop, sequential over K in tensor-core k-steps, whatever the number of rows.
//! For f16 / bf16 the algorithm (tile shape) is chosen for each launch's row count: by default
//! (`KILN_GEMM_ALGO=tuned`) the fastest of cuBLASLt's heuristic candidates without split-K,
//! timed at load on the launch's own planned buffers with a cold L2 (the heuristic's first unless
//! another is more than 10% faster); `KILN_GEMM_ALGO=per-rows` takes the heuristic's first. Measured on the
//! H200 (ncu, 2026-11-30), the heuristic's first choice for narrow weights at 128 rows (the K/V
//! projections, 4096 -> 1024) was a 64x256 tile on 8 blocks: 98 us where a 64x64 tile takes a
//! few. The tensor-core kernels accumulate K in the same k-step order whatever the tile, so the
//! choice does not change a result (kiln gate check 6 compares buckets that use different
//! algorithms). f32 GEMMs, and every GEMM under `KILN_GEMM_ALGO=fixed`, use one algorithm per weight shape,
//! chosen at its largest row count and used for every row count (checked with
//! `cublasLtMatmulAlgoCheck`): measured on the H200, cuBLASLt's f32 algorithms for different row
//! counts do not sum in the same order (a 1-token prompt's logits differed between buckets 16
//! and 64 by 3.9e-7). `kiln gate` check 6
//! verifies bit-identical rows across prefill buckets on the models it runs, including a
//! Llama-3.2-1B-shaped one.
//!
//! Graphs: at load each launch's call is captured once into its own small graph (a child
//! graph node of the program's graph); eager mode calls `cublasLtMatmul` on the stream. Both
//! run the same algorithm with the same workspace: bit-identical.
//!
//! Owns: the cuBLASLt handle, descriptors and algorithms. Never: allocates (the workspace is
//! planned), or chooses anything after load. The load-time timing runs GEMMs on the planned
//! buffers before the weights are uploaded: it writes only arena scratch.

use super::counters::Counters;
use super::driver::{call, Event, Stream};
use crate::ir::DType;
use crate::plan::{BufArg, Kernel, Plan, RegionKind};
use anyhow::{bail, ensure, Context, Result};
use cudarc::cublaslt::sys as lt;
use cudarc::driver::sys;
use std::collections::BTreeMap;
use std::ffi::c_void;

fn check(status: lt::cublasStatus_t, what: &str) -> Result<()> {
    if status == lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        bail!("cuBLASLt {what} failed: {status:?}")
    }
}

fn data_type(d: DType) -> Result<lt::cudaDataType_t> {
    Ok(match d {
        DType::F32 => lt::cudaDataType_t::CUDA_R_32F,
        DType::F16 => lt::cudaDataType_t::CUDA_R_16F,
        DType::BF16 => lt::cudaDataType_t::CUDA_R_16BF,
        other => bail!("a GEMM on {} operands (cuBLASLt takes f32, f16, bf16)", other.name()),
    })
}

/// The loaded cuBLASLt library and one handle.
pub struct Blas {
    handle: lt::cublasLtHandle_t,
}

impl Drop for Blas {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once.
        unsafe {
            lt::cublasLtDestroy(self.handle);
        }
    }
}

impl Blas {
    /// Loads libcublasLt (a clear error where it is missing, never cudarc's panic) and makes a
    /// handle in the current context.
    pub fn new() -> Result<Blas> {
        // SAFETY: only tries to dlopen the library's candidate names.
        if !unsafe { lt::is_culib_present() } {
            bail!(
                "this plan's prefill GEMMs need cuBLASLt, and libcublasLt (CUDA 13) was not found; install the CUDA toolkit's \
                 cuBLAS or put its lib directory on LD_LIBRARY_PATH (e.g. /usr/local/cuda/lib64)"
            );
        }
        let mut handle: lt::cublasLtHandle_t = std::ptr::null_mut();
        // SAFETY: out-parameter.
        check(unsafe { lt::cublasLtCreate(&mut handle) }, "handle creation")?;
        Ok(Blas { handle })
    }
}

/// Matrix layouts and the matmul descriptor of one GEMM, destroyed on drop.
struct Descs {
    matmul: lt::cublasLtMatmulDesc_t,
    a: lt::cublasLtMatrixLayout_t,
    b: lt::cublasLtMatrixLayout_t,
    d: lt::cublasLtMatrixLayout_t,
}

impl Drop for Descs {
    fn drop(&mut self) {
        // SAFETY: each handle was created by `Descs::new` (null ones are skipped) and is
        // destroyed once.
        unsafe {
            if !self.a.is_null() {
                lt::cublasLtMatrixLayoutDestroy(self.a);
            }
            if !self.b.is_null() {
                lt::cublasLtMatrixLayoutDestroy(self.b);
            }
            if !self.d.is_null() {
                lt::cublasLtMatrixLayoutDestroy(self.d);
            }
            if !self.matmul.is_null() {
                lt::cublasLtMatmulDescDestroy(self.matmul);
            }
        }
    }
}

/// What decides a GEMM's descriptors: shapes, dtypes, bias.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Shape {
    rows: u32,
    k: u32,
    n: u32,
    input: DType,
    output: DType,
    bias: Option<DType>,
}

impl Descs {
    fn new(s: &Shape, bias_ptr: u64) -> Result<Descs> {
        let mut d = Descs { matmul: std::ptr::null_mut(), a: std::ptr::null_mut(), b: std::ptr::null_mut(), d: std::ptr::null_mut() };
        let (tin, tout) = (data_type(s.input)?, data_type(s.output)?);
        // SAFETY: out-parameter calls; attribute buffers are locals of the stated sizes.
        unsafe {
            check(
                lt::cublasLtMatmulDescCreate(&mut d.matmul, lt::cublasComputeType_t::CUBLAS_COMPUTE_32F, lt::cudaDataType_t::CUDA_R_32F),
                "matmul descriptor",
            )?;
            let set = |attr: lt::cublasLtMatmulDescAttributes_t, v: &[u8]| {
                check(lt::cublasLtMatmulDescSetAttribute(d.matmul, attr, v.as_ptr() as *const c_void, v.len()), "descriptor attribute")
            };
            use lt::cublasLtMatmulDescAttributes_t as A;
            set(A::CUBLASLT_MATMUL_DESC_TRANSA, &1i32.to_le_bytes())?; // CUBLAS_OP_T
            set(A::CUBLASLT_MATMUL_DESC_TRANSB, &0i32.to_le_bytes())?; // CUBLAS_OP_N
            if let Some(bt) = s.bias {
                set(A::CUBLASLT_MATMUL_DESC_EPILOGUE, &(lt::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_BIAS as u32).to_le_bytes())?;
                set(A::CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr.to_le_bytes())?;
                set(A::CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &(data_type(bt)? as u32).to_le_bytes())?;
            }
            check(lt::cublasLtMatrixLayoutCreate(&mut d.a, tin, s.k as u64, s.n as u64, s.k as i64), "layout of the weight")?;
            check(lt::cublasLtMatrixLayoutCreate(&mut d.b, tin, s.k as u64, s.rows as u64, s.k as i64), "layout of x")?;
            check(lt::cublasLtMatrixLayoutCreate(&mut d.d, tout, s.n as u64, s.rows as u64, s.n as i64), "layout of out")?;
        }
        Ok(d)
    }
}

/// One planned GEMM call: descriptors, algorithm and every pointer, ready to enqueue.
pub struct GemmCall {
    descs: Descs,
    algo: lt::cublasLtMatmulAlgo_t,
    alpha: f32,
    beta: f32,
    x: u64,
    w: u64,
    out: u64,
    workspace: u64,
    workspace_bytes: usize,
}

impl GemmCall {
    /// Enqueues the GEMM on `stream` (during a capture, records it).
    pub fn enqueue(&self, blas: &Blas, counters: &Counters, stream: sys::CUstream) -> Result<()> {
        counters.driver_call();
        // SAFETY: every pointer is a planned span of a live region (checked at `prepare`);
        // alpha / beta are read before the call returns (host pointer mode).
        let status = unsafe {
            lt::cublasLtMatmul(
                blas.handle,
                self.descs.matmul,
                &self.alpha as *const f32 as *const c_void,
                self.w as *const c_void,
                self.descs.a,
                self.x as *const c_void,
                self.descs.b,
                &self.beta as *const f32 as *const c_void,
                self.out as *const c_void,
                self.descs.d,
                self.out as *mut c_void,
                self.descs.d,
                &self.algo,
                self.workspace as *mut c_void,
                self.workspace_bytes,
                stream as lt::cudaStream_t,
            )
        };
        check(status, "matmul")
    }

    /// Captures the call into a graph of its own (a child graph node for the program's graph).
    /// The caller owns (and destroys) the returned graph.
    // `stream` is an opaque driver handle, passed through, never dereferenced here.
    #[allow(clippy::not_unsafe_ptr_arg_deref)]
    pub fn capture(&self, blas: &Blas, counters: &Counters, stream: sys::CUstream) -> Result<sys::CUgraph> {
        call(counters, "cuStreamBeginCapture", unsafe {
            sys::cuStreamBeginCapture_v2(stream, sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        })?;
        let enq = self.enqueue(blas, counters, stream);
        let mut graph: sys::CUgraph = std::ptr::null_mut();
        let end = call(counters, "cuStreamEndCapture", unsafe { sys::cuStreamEndCapture(stream, &mut graph) });
        enq.context("recording a cuBLASLt GEMM into a graph")?;
        end?;
        ensure!(!graph.is_null(), "capturing a cuBLASLt GEMM gave no graph");
        Ok(graph)
    }
}

fn gemm_shape(kernel: &Kernel, bufs: &[BufArg]) -> Result<Shape> {
    let &Kernel::Gemm { rows, in_features, out_features, bias } = kernel else { bail!("not a GEMM launch") };
    ensure!(bufs.len() == 4 + bias as usize, "a GEMM launch with {} operands", bufs.len());
    Ok(Shape {
        rows,
        k: in_features,
        n: out_features,
        input: bufs[0].dtype,
        output: bufs[bufs.len() - 2].dtype,
        bias: bias.then(|| bufs[2].dtype),
    })
}

/// cuBLASLt's heuristic candidates for shape `s` without split-K that fit `workspace`, best
/// first (see the module doc); at least one.
fn candidates(blas: &Blas, s: &Shape, workspace: usize) -> Result<Vec<lt::cublasLtMatmulAlgo_t>> {
    let descs = Descs::new(s, 0)?;
    let mut pref: lt::cublasLtMatmulPreference_t = std::ptr::null_mut();
    // SAFETY: out-parameter and attribute calls with locals of the stated sizes.
    unsafe {
        check(lt::cublasLtMatmulPreferenceCreate(&mut pref), "preference")?;
        let r = (|| -> Result<Vec<lt::cublasLtMatmulAlgo_t>> {
            use lt::cublasLtMatmulPreferenceAttributes_t as P;
            let ws = workspace as u64;
            check(
                lt::cublasLtMatmulPreferenceSetAttribute(
                    pref,
                    P::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                    &ws as *const u64 as *const c_void,
                    8,
                ),
                "workspace preference",
            )?;
            let none = lt::cublasLtReductionScheme_t::CUBLASLT_REDUCTION_SCHEME_NONE as u32;
            check(
                lt::cublasLtMatmulPreferenceSetAttribute(
                    pref,
                    P::CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                    &none as *const u32 as *const c_void,
                    4,
                ),
                "reduction preference",
            )?;
            let mut results: [lt::cublasLtMatmulHeuristicResult_t; 12] = std::mem::zeroed();
            let mut found = 0i32;
            check(
                lt::cublasLtMatmulAlgoGetHeuristic(
                    blas.handle,
                    descs.matmul,
                    descs.a,
                    descs.b,
                    descs.d,
                    descs.d,
                    pref,
                    results.len() as i32,
                    results.as_mut_ptr(),
                    &mut found,
                ),
                "algorithm heuristic",
            )?;
            let mut out = Vec::new();
            for r in results.iter().take(found.max(0) as usize) {
                if r.state != lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS || r.workspaceSize > workspace {
                    continue;
                }
                let mut splitk = 0u32;
                let mut written = 0usize;
                let st = lt::cublasLtMatmulAlgoConfigGetAttribute(
                    &r.algo,
                    lt::cublasLtMatmulAlgoConfigAttributes_t::CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
                    &mut splitk as *mut u32 as *mut c_void,
                    4,
                    &mut written,
                );
                if st == lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS && splitk <= 1 {
                    out.push(r.algo);
                }
            }
            ensure!(
                !out.is_empty(),
                "cuBLASLt offers no algorithm without split-K for a {}x{}x{} GEMM ({} in, {} out) within a {} MiB workspace",
                s.rows,
                s.n,
                s.k,
                s.input.name(),
                s.output.name(),
                workspace >> 20
            );
            Ok(out)
        })();
        lt::cublasLtMatmulPreferenceDestroy(pref);
        r
    }
}

/// How the f16 / bf16 algorithms are chosen (`KILN_GEMM_ALGO`, see the module doc).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Choice {
    Tuned,
    PerRows,
    Fixed,
}

/// Milliseconds one enqueue of `call` takes on `stream`: the median of 5 timed runs after one
/// untimed run, each after overwriting `flush` (device address, bytes) so that the GEMM reads
/// its weight from memory, not from the L2 cache of the previous run (as in a real forward).
fn time_call(blas: &Blas, gemm: &GemmCall, counters: &Counters, stream: &Stream, flush: (u64, usize)) -> Result<f32> {
    let (a, b) = (Event::timed(counters)?, Event::timed(counters)?);
    gemm.enqueue(blas, counters, stream.0)?;
    let mut ms = Vec::with_capacity(5);
    for _ in 0..5 {
        if flush.1 > 0 {
            // SAFETY: a planned span of the weights region, which holds nothing yet (see `prepare`).
            call(counters, "cuMemsetD8Async", unsafe { sys::cuMemsetD8Async(flush.0, 0, flush.1, stream.0) })?;
        }
        a.record(counters, stream)?;
        gemm.enqueue(blas, counters, stream.0)?;
        b.record(counters, stream)?;
        b.sync(counters)?;
        ms.push(a.elapsed_ms(counters, &b)?);
    }
    ms.sort_by(f32::total_cmp);
    Ok(ms[2])
}

/// Prepares every `Kernel::Gemm` launch of `plan`: `calls[program][launch]` is `Some` exactly
/// for the GEMMs. The algorithm of each (weight shape, row count) is chosen once (see the module
/// doc; timed on `stream` under `KILN_GEMM_ALGO=tuned`) and checked against every launch that
/// uses it. Must run before the weights are uploaded: the timing overwrites up to 128 MiB of the
/// weights region to flush the L2 cache between runs.
pub fn prepare(
    blas: &Blas,
    plan: &Plan,
    region_base: &[u64; crate::plan::N_REGIONS],
    counters: &Counters,
    stream: &Stream,
) -> Result<Vec<Vec<Option<GemmCall>>>> {
    let choice = match std::env::var("KILN_GEMM_ALGO").as_deref() {
        Err(_) | Ok("tuned") => Choice::Tuned,
        Ok("per-rows") => Choice::PerRows,
        Ok("fixed") => Choice::Fixed,
        Ok(other) => bail!("KILN_GEMM_ALGO=`{other}`: expected `tuned`, `per-rows` or `fixed`"),
    };
    // The row count each shape's algorithm is chosen at: its own, or (f32, `fixed`) the largest.
    let algo_key = |s: &Shape| if choice != Choice::Fixed && s.input != DType::F32 { *s } else { Shape { rows: 0, ..*s } };
    let ptr = |b: &BufArg| {
        debug_assert!(b.region != RegionKind::Ring);
        region_base[b.region.index()] + b.offset
    };
    // One call of launch `l` (shape `s`) with `algo`, checked to run `s.rows` rows in the plan's
    // workspace.
    let make_call = |label: &str, l: &crate::plan::Launch, s: &Shape, algo: lt::cublasLtMatmulAlgo_t| -> Result<GemmCall> {
        let bias_ptr = if s.bias.is_some() { ptr(&l.bufs[2]) } else { 0 };
        let descs = Descs::new(s, bias_ptr)?;
        let ws = l.bufs.last().expect("checked by gemm_shape");
        let mut result: lt::cublasLtMatmulHeuristicResult_t = unsafe { std::mem::zeroed() };
        // SAFETY: descriptors and algorithm are live; out-parameter.
        check(
            unsafe { lt::cublasLtMatmulAlgoCheck(blas.handle, descs.matmul, descs.a, descs.b, descs.d, descs.d, &algo, &mut result) },
            "algorithm check",
        )
        .with_context(|| format!("{label} ({}): the algorithm chosen does not run {} rows", l.name, s.rows))?;
        ensure!(
            result.workspaceSize <= ws.bytes as usize,
            "{label} ({}): cuBLASLt wants {} bytes of workspace, the plan has {}",
            l.name,
            result.workspaceSize,
            ws.bytes
        );
        Ok(GemmCall {
            descs,
            algo,
            alpha: 1.0,
            beta: 0.0,
            x: ptr(&l.bufs[0]),
            w: ptr(&l.bufs[1]),
            out: ptr(&l.bufs[l.bufs.len() - 2]),
            workspace: ptr(ws),
            workspace_bytes: ws.bytes as usize,
        })
    };
    let flush = (region_base[RegionKind::Weights.index()], plan.region_bytes[RegionKind::Weights.index()].min(128 << 20) as usize);
    // Each key's largest row count and first launch (where its candidates are timed).
    let mut keys: BTreeMap<Shape, (u32, String, &crate::plan::Launch)> = BTreeMap::new();
    for p in &plan.programs {
        for l in p.launches.iter().filter(|l| l.kernel.is_library()) {
            let s = gemm_shape(&l.kernel, &l.bufs)?;
            let e = keys.entry(algo_key(&s)).or_insert((0, p.label(), l));
            e.0 = e.0.max(s.rows);
        }
    }
    let mut algos: BTreeMap<Shape, lt::cublasLtMatmulAlgo_t> = BTreeMap::new();
    for (key, (rows, label, launch)) in &keys {
        let s = Shape { rows: *rows, ..*key };
        let found = candidates(blas, &s, crate::plan::GEMM_WORKSPACE_BYTES as usize)
            .with_context(|| format!("choosing the GEMM algorithm for weights {}x{}", s.n, s.k))?;
        let mut best = found[0];
        if choice == Choice::Tuned && key.rows != 0 && found.len() > 1 {
            // The heuristic's first unless another candidate is more than 10% faster.
            let (mut best_ms, mut best_i, mut first_ms) = (f32::INFINITY, 0, f32::NAN);
            for (i, algo) in found.iter().enumerate() {
                let Ok(call) = make_call(label, launch, &s, *algo) else { continue };
                let ms = time_call(blas, &call, counters, stream, flush)
                    .with_context(|| format!("timing a GEMM for weights {}x{}", s.n, s.k))?;
                if i == 0 {
                    first_ms = ms;
                }
                if i == 0 || ms < 0.9 * best_ms {
                    (best, best_ms, best_i) = (*algo, ms, i);
                }
            }
            tracing::info!(
                "GEMM {} rows x {} out x {} in: candidate {best_i} of {} chosen, {:.1} us (the heuristic's first: {:.1} us)",
                s.rows,
                s.n,
                s.k,
                found.len(),
                best_ms * 1e3,
                first_ms * 1e3
            );
        }
        algos.insert(*key, best);
    }
    let mut out = Vec::with_capacity(plan.programs.len());
    for p in &plan.programs {
        let mut calls = Vec::with_capacity(p.launches.len());
        for l in &p.launches {
            if !l.kernel.is_library() {
                calls.push(None);
                continue;
            }
            let s = gemm_shape(&l.kernel, &l.bufs)?;
            calls.push(Some(make_call(&p.label(), l, &s, algos[&algo_key(&s)])?));
        }
        out.push(calls);
    }
    Ok(out)
}
