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
// stop_ids (-1 = unused slot) is finished (control[4 + r] = 1, sticky); a padding row
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
// `cudaGraphSetConditional` is declared here rather than by including
// cuda_device_runtime_api.h: under NVRTC that header needs the toolkit's crt/ headers (absent
// from NVIDIA's pip wheels), and the call compiles to an external function that the driver
// binds when it loads the module (no -rdc, no libcudadevrt). The declaration matches the
// header's: C linkage, (cudaGraphConditionalHandle = unsigned long long, unsigned int).
//
// The ring lives in host-mapped pinned memory that the host polls while the loop runs:
// `__threadfence_system()` after each ring write makes the token visible to the host before
// the step is counted as produced.
//
// Geometry: grid 1, block ceil(rows / 32) * 32; a thread per row, thread 0 finalizes.

extern "C" __device__ void cudaGraphSetConditional(unsigned long long handle, unsigned int value);

extern "C" __global__ void __launch_bounds__(1024)
    kiln_advance(const int* tokens, const int* stop_ids, int* token_ids, int* positions, unsigned int* counter,
                 unsigned int* control, int* ring, unsigned int rows, unsigned int burst, unsigned int n_stop,
                 unsigned long long cond_handle) {
  kiln::wait_prior_grids();
  // A loop already done (the step block said so, or an earlier step of an unrolled loop body)
  // changes nothing: no ring write, no position or counter moved. Every thread reads `done`
  // before thread 0 could rewrite it (after the barrier below), so all of them return or none.
  if (__ldcg(control + 2) != 0u) {
    if (threadIdx.x == 0 && cond_handle != 0) cudaGraphSetConditional(cond_handle, 0u);
    return;
  }
  // Every thread reads `produced` before thread 0 rewrites it (the barrier below orders them).
  const unsigned int produced = control[1];
  const long long max_position = (long long)control[3];
  int past_end = 0;
  for (unsigned int r = threadIdx.x; r < rows; r += blockDim.x) {
    const int p = positions[r];
    if (p < 0) {
      control[4 + r] = 1;  // padding rows count as finished
      continue;
    }
    const int t = tokens[r];
    if (produced < burst) {
      ring[(size_t)produced * rows + r] = t;
      __threadfence_system();
    }
    token_ids[r] = t;
    positions[r] = p + 1;
    counter[r] = counter[r] + 1u;
    bool stop = false;
    for (unsigned int i = 0; i < n_stop; ++i) {
      const int s = stop_ids[i];
      stop |= s >= 0 && s == t;
    }
    if (stop) control[4 + r] = 1;
    past_end |= (long long)(p + 1) >= max_position;
  }
  // Barrier and OR over the block: the finished flags and past_end of every row are in.
  past_end = __syncthreads_or(past_end);
  if (threadIdx.x != 0) return;
  const unsigned int now = produced + 1;
  control[1] = now;
  bool all_finished = true;
  for (unsigned int r = 0; r < rows; ++r) all_finished &= control[4 + r] != 0;
  const bool done = now >= control[0] || now >= burst || all_finished || past_end != 0;
  if (done) control[2] = 1;
  if (cond_handle != 0) cudaGraphSetConditional(cond_handle, done ? 0u : 1u);
}
