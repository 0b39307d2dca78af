// advance.cu: kiln_advance(tokens, stop_ids, token_ids, positions, counter, control, ring,
//                          rows, burst, n_stop, cond_handle)
//
// Check on a GPU: kiln gate --checks 5 (device loop == one-step decode; NVRTC build, no GPU:
// cargo test --test kernels_compile)
//
// Semantics (Op::Advance): the step of a device loop, after `sample`. When done is already set,
// nothing changes (the condition stays 0). Otherwise, for every row r with
// positions[r] >= 0: ring[produced * rows + r] = tokens[r] (while produced < burst),
// token_ids[r] = tokens[r], positions[r] += 1, counter[r] += 1; a row whose token is one of
// stop_ids (-1 = unused slot) is finished (control[4 + r] = 1, sticky); a row whose next
// position reaches max_position gets position -1 instead (it leaves as a padding row, so an
// unrolled body's copies after the stop write no KV row past its end); a padding row
// (position < 0) counts as finished and changes nothing else. Then produced += 1 and
// done = 1 when produced >= budget, produced >= burst (ring full), every row is finished, or a
// row's next position reached max_position. control is u32 [4 + rows]: budget, produced, done,
// max_position, then the finished flags.
//
// CPU reference: the `Kernel::Advance` arm of src/runtime/cpu.rs (word for word).
//
// Device loop: inside the body of a CUDA graph WHILE node the runtime passes the node's
// conditional handle (`cond_handle != 0`) and the kernel sets the condition to `!done`, so the
// loop ends on the device with no host involvement. Outside a graph loop (eager mode) the
// handle is 0 and the host reads `done` itself.
//
// `cudaGraphSetConditional` is declared in advance.cuh rather than by including
// cuda_device_runtime_api.h: under NVRTC that header needs the toolkit's crt/ headers (absent
// from NVIDIA's pip wheels), and the call compiles to an external function that the driver
// binds when it loads the module (no -rdc, no libcudadevrt). The declaration matches the
// header's: C linkage, (cudaGraphConditionalHandle = unsigned long long, unsigned int).
//
// The ring lives in host-mapped pinned memory that the host polls while the loop runs, word by
// word (a slot is -1 until its token arrives); the kernel writes it with a plain store.
//
// Geometry: grid 1, block ceil(rows / 32) * 32; a thread per row, thread 0 finalizes.

#include "advance.cuh"  // advance_row, advance_finish (shared with sample.cu's sample_advance)

// Every value the step reads (control, and each row's position, token, finished flag and the stop
// ids) is loaded at once after the wait, one round trip instead of three dependent ones; the
// block's all-finished and past-end come from barrier reductions instead of thread 0 re-reading
// the flags; and the ring write has no system fence (the host polls each ring word for a value
// other than -1, a 4-byte store it sees whole, and learns the loop's end from an event, which
// orders everything; nothing it reads needed the fence's ordering). Measured on the H200 against
// the previous kernel (three dependent round trips and `__threadfence_system()` after each ring
// write; git history before session 33), with gather.cu's 16-byte rows (session 33 call C,
// bench/results/2026-12-03-h200-decode-ab-s33.md, two rounds, batch 1, context 128, greedy ids
// identical): tok/s 0.5B 1778.8 -> 1780.1, 1B 1250.8 -> 1259.2 (+0.7%), 8B 258.3 -> 258.8; the 1B's
// block trace: advance 7.52 -> 6.21 us per step.

extern "C" __global__ void __launch_bounds__(1024)
    kiln_advance(const int* tokens, const int* stop_ids, int* token_ids, int* positions, unsigned int* counter,
                 unsigned int* control, int* ring, unsigned int rows, unsigned int burst, unsigned int n_stop,
                 unsigned long long cond_handle) {
  KILN_TRACE_BLOCK_END();
  kiln::wait_prior_grids();
  // Loads first, all independent of each other (written by earlier grids or the host: coherent
  // loads through the L2, as every activation).
  const unsigned int done0 = __ldcg(control + 2);
  const unsigned int budget = __ldcg(control + 0);
  const unsigned int produced = __ldcg(control + 1);
  const long long max_position = (long long)__ldcg(control + 3);
  // One row per thread in the common case (rows <= blockDim.x); more rows loop below.
  const unsigned int r0 = threadIdx.x;
  const bool has0 = r0 < rows;
  const int p0 = has0 ? __ldcg(positions + r0) : -1;
  const int t0 = has0 ? __ldcg(tokens + r0) : 0;
  const unsigned int fin0 = has0 ? __ldcg(control + 4 + r0) : 1u;
  const unsigned int c0 = has0 ? __ldcg(counter + r0) : 0u;
  if (done0 != 0u) {
    // A loop already done changes nothing: no ring write, no position or counter moved.
    if (threadIdx.x == 0 && cond_handle != 0) cudaGraphSetConditional(cond_handle, 0u);
    return;
  }
  int past_end = 0, unfinished = 0;
  for (unsigned int r = r0; r < rows; r += blockDim.x) {
    const bool first = r == r0;
    const int p = first ? p0 : __ldcg(positions + r);
    const int t = first ? t0 : __ldcg(tokens + r);
    const unsigned int fin = first ? fin0 : __ldcg(control + 4 + r);
    const unsigned int c = first ? c0 : __ldcg(counter + r);
    const auto is_stop = [&](int tok) {
      bool stop = false;
      for (unsigned int i = 0; i < n_stop; ++i) {
        const int sid = __ldcg(stop_ids + i);
        stop |= sid >= 0 && sid == tok;
      }
      return stop;
    };
    kiln::advance_row(r, p, t, fin, c, is_stop, token_ids, positions, counter, control, ring, rows, produced, burst,
                      max_position, unfinished, past_end);
  }
  past_end = __syncthreads_or(past_end);
  unfinished = __syncthreads_or(unfinished);
  if (threadIdx.x != 0) return;
  kiln::advance_finish(control, budget, produced, burst, unfinished != 0, past_end != 0, cond_handle);
}
