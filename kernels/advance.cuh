// advance.cuh: one row's step and the step's end of Op::Advance, shared by advance.cu
// (kiln_advance) and sample.cu (kiln_sample_advance_f32), so that both write the same words. See
// advance.cu for the semantics and the CPU reference.
#pragma once
#include "common.cuh"

// Declared here rather than by including cuda_device_runtime_api.h (see advance.cu).
extern "C" __device__ void cudaGraphSetConditional(unsigned long long handle, unsigned int value);

namespace kiln {

// Row r's step, its reads done: position p, sampled token t, finished flag fin, counter c.
// `is_stop(t)` (called only for a live row) says whether t is a stop id. Writes the ring slot, the
// step fields and the finished flag; ORs into `unfinished` and `past_end`.
template <typename IsStop>
__device__ __forceinline__ void advance_row(unsigned int r, int p, int t, unsigned int fin, unsigned int c,
                                            IsStop is_stop, int* token_ids, int* positions, unsigned int* counter,
                                            unsigned int* control, int* ring, unsigned int rows,
                                            unsigned int produced, unsigned int burst, long long max_position,
                                            int& unfinished, int& past_end) {
  if (p < 0) {
    control[4 + r] = 1;  // padding rows count as finished
    return;
  }
  const bool stop = is_stop(t);
  if (produced < burst) ring[(size_t)produced * rows + r] = t;
  token_ids[r] = t;
  // A row whose next position reaches max_position leaves as a padding row: the copies of an
  // unrolled loop body that still run after the loop is done then write no KV row past the
  // sequence's end (src/plan/mod.rs ProgramPlan::loop_copies).
  const bool at_end = (long long)(p + 1) >= max_position;
  positions[r] = at_end ? -1 : p + 1;
  counter[r] = c + 1u;
  if (stop) control[4 + r] = 1;
  unfinished |= !(stop || fin != 0u);
  past_end |= at_end;
}

// The step's end, in one thread once every row's step is done: produced + 1, the done flag, and
// the device loop's condition (`cond_handle` 0 outside a graph loop).
__device__ __forceinline__ void advance_finish(unsigned int* control, unsigned int budget, unsigned int produced,
                                               unsigned int burst, bool unfinished, bool past_end,
                                               unsigned long long cond_handle) {
  const unsigned int now = produced + 1;
  control[1] = now;
  const bool done = now >= budget || now >= burst || !unfinished || past_end;
  if (done) control[2] = 1;
  if (cond_handle != 0) cudaGraphSetConditional(cond_handle, done ? 0u : 1u);
}

}  // namespace kiln
