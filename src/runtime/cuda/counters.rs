//! Counters that prove what the CUDA executor does after `load`: every driver call, device or
//! pinned allocation, host-to-device copy, graph launch and host sync goes through
//! [`Counters`]. The design promise is checked from these numbers, not assumed: after load,
//! zero allocations, zero stream captures, zero uploads from pageable host memory, and one
//! graph launch per step in graph mode.
//!
//! Owns: the counts and their report. Never: calls the driver itself.

use std::cell::Cell;

/// Counts of one executor. `Cell`s: an executor is used from one thread at a time.
#[derive(Debug, Default)]
pub struct Counters {
    /// Set at the end of `load`; everything counted after it is "after load".
    loaded: Cell<bool>,
    pub driver_calls_load: Cell<u64>,
    pub device_allocs_load: Cell<u64>,
    pub device_bytes_load: Cell<u64>,
    pub pinned_allocs_load: Cell<u64>,
    pub pinned_bytes_load: Cell<u64>,
    pub uploads_load: Cell<u64>,
    pub upload_bytes_load: Cell<u64>,
    pub graphs_instantiated: Cell<u64>,
    pub graph_nodes: Cell<u64>,
    pub modules_loaded: Cell<u64>,
    pub host_syncs_load: Cell<u64>,

    pub driver_calls: Cell<u64>,
    pub device_allocs: Cell<u64>,
    pub pinned_allocs: Cell<u64>,
    /// Host-to-device copies whose source is plan-owned pinned memory (graph memcpy nodes
    /// count once per graph launch).
    pub uploads_pinned: Cell<u64>,
    /// Host-to-device copies from pageable memory. Must stay 0 after load.
    pub uploads_pageable: Cell<u64>,
    /// Device-to-host copies (outputs into the pinned mirror, debug reads).
    pub downloads: Cell<u64>,
    /// Device-to-host copies into pageable memory (debug reads of non-output tensors).
    pub downloads_debug: Cell<u64>,
    pub graph_launches: Cell<u64>,
    pub kernel_launches: Cell<u64>,
    pub host_syncs: Cell<u64>,
    /// Stream captures begun. kiln never captures; the counter exists to prove it.
    pub stream_captures: Cell<u64>,
    pub steps: Cell<u64>,
    /// Device-loop launches (one graph launch each in graph mode) and the decode steps they
    /// ran on the device (the loop control's `produced`, summed when each loop is seen done).
    pub loop_launches: Cell<u64>,
    pub loop_steps: Cell<u64>,
    /// Host syncs that blocked while a device loop was still running (a final wait before the
    /// host saw the loop finish). Streaming through the ring needs none.
    pub loop_syncs: Cell<u64>,
}

fn bump(c: &Cell<u64>, by: u64) {
    c.set(c.get() + by);
}

impl Counters {
    pub fn is_loaded(&self) -> bool {
        self.loaded.get()
    }
    pub fn mark_loaded(&self) {
        self.loaded.set(true);
    }
    pub fn driver_call(&self) {
        bump(if self.is_loaded() { &self.driver_calls } else { &self.driver_calls_load }, 1);
    }
    pub fn device_alloc(&self, bytes: u64) {
        if self.is_loaded() {
            bump(&self.device_allocs, 1);
        } else {
            bump(&self.device_allocs_load, 1);
            bump(&self.device_bytes_load, bytes);
        }
    }
    pub fn pinned_alloc(&self, bytes: u64) {
        if self.is_loaded() {
            bump(&self.pinned_allocs, 1);
        } else {
            bump(&self.pinned_allocs_load, 1);
            bump(&self.pinned_bytes_load, bytes);
        }
    }
    /// A host-to-device copy; `pinned` says whether its source is page-locked.
    pub fn upload(&self, bytes: u64, pinned: bool) {
        if !self.is_loaded() {
            bump(&self.uploads_load, 1);
            bump(&self.upload_bytes_load, bytes);
        } else if pinned {
            bump(&self.uploads_pinned, 1);
        } else {
            bump(&self.uploads_pageable, 1);
        }
    }
    pub fn download(&self, debug: bool) {
        bump(if debug { &self.downloads_debug } else { &self.downloads }, 1);
    }
    pub fn graph_launch(&self) {
        bump(&self.graph_launches, 1);
    }
    pub fn kernel_launch(&self) {
        bump(&self.kernel_launches, 1);
    }
    pub fn host_sync(&self) {
        bump(if self.is_loaded() { &self.host_syncs } else { &self.host_syncs_load }, 1);
    }
    pub fn step(&self) {
        bump(&self.steps, 1);
    }
    pub fn loop_launch(&self) {
        bump(&self.loop_launches, 1);
    }
    pub fn loop_finished(&self, steps: u64) {
        bump(&self.loop_steps, steps);
    }
    pub fn loop_sync(&self) {
        bump(&self.loop_syncs, 1);
    }

    /// A plain copy of the numbers, for sums over several executors and for checks.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            steps: self.steps.get(),
            device_allocs_load: self.device_allocs_load.get(),
            device_bytes_load: self.device_bytes_load.get(),
            pinned_allocs_load: self.pinned_allocs_load.get(),
            pinned_bytes_load: self.pinned_bytes_load.get(),
            driver_calls_load: self.driver_calls_load.get(),
            uploads_load: self.uploads_load.get(),
            upload_bytes_load: self.upload_bytes_load.get(),
            graphs_instantiated: self.graphs_instantiated.get(),
            graph_nodes: self.graph_nodes.get(),
            device_allocs_after_load: self.device_allocs.get(),
            pinned_allocs_after_load: self.pinned_allocs.get(),
            uploads_pinned: self.uploads_pinned.get(),
            uploads_pageable: self.uploads_pageable.get(),
            downloads: self.downloads.get(),
            downloads_debug: self.downloads_debug.get(),
            graph_launches: self.graph_launches.get(),
            kernel_launches: self.kernel_launches.get(),
            driver_calls: self.driver_calls.get(),
            host_syncs: self.host_syncs.get(),
            stream_captures: self.stream_captures.get(),
            loop_launches: self.loop_launches.get(),
            loop_steps: self.loop_steps.get(),
            loop_syncs: self.loop_syncs.get(),
        }
    }
}

/// The numbers of [`Counters`] at one moment; adds up over executors.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub steps: u64,
    pub device_allocs_load: u64,
    pub device_bytes_load: u64,
    pub pinned_allocs_load: u64,
    pub pinned_bytes_load: u64,
    pub driver_calls_load: u64,
    pub uploads_load: u64,
    pub upload_bytes_load: u64,
    pub graphs_instantiated: u64,
    pub graph_nodes: u64,
    pub device_allocs_after_load: u64,
    pub pinned_allocs_after_load: u64,
    pub uploads_pinned: u64,
    pub uploads_pageable: u64,
    pub downloads: u64,
    pub downloads_debug: u64,
    pub graph_launches: u64,
    pub kernel_launches: u64,
    pub driver_calls: u64,
    pub host_syncs: u64,
    pub stream_captures: u64,
    pub loop_launches: u64,
    pub loop_steps: u64,
    pub loop_syncs: u64,
}

impl std::ops::AddAssign for Snapshot {
    fn add_assign(&mut self, o: Snapshot) {
        self.steps += o.steps;
        self.device_allocs_load += o.device_allocs_load;
        self.device_bytes_load += o.device_bytes_load;
        self.pinned_allocs_load += o.pinned_allocs_load;
        self.pinned_bytes_load += o.pinned_bytes_load;
        self.driver_calls_load += o.driver_calls_load;
        self.uploads_load += o.uploads_load;
        self.upload_bytes_load += o.upload_bytes_load;
        self.graphs_instantiated += o.graphs_instantiated;
        self.graph_nodes += o.graph_nodes;
        self.device_allocs_after_load += o.device_allocs_after_load;
        self.pinned_allocs_after_load += o.pinned_allocs_after_load;
        self.uploads_pinned += o.uploads_pinned;
        self.uploads_pageable += o.uploads_pageable;
        self.downloads += o.downloads;
        self.downloads_debug += o.downloads_debug;
        self.graph_launches += o.graph_launches;
        self.kernel_launches += o.kernel_launches;
        self.driver_calls += o.driver_calls;
        self.host_syncs += o.host_syncs;
        self.stream_captures += o.stream_captures;
        self.loop_launches += o.loop_launches;
        self.loop_steps += o.loop_steps;
        self.loop_syncs += o.loop_syncs;
    }
}

/// `a / b` as text, with the fraction `1/n` spelled out when it is one (`-` for b = 0).
fn ratio(a: u64, b: u64) -> String {
    if b == 0 {
        "-".to_string()
    } else if a == 0 {
        "0".to_string()
    } else if b.is_multiple_of(a) {
        format!("1/{} ({:.4})", b / a, a as f64 / b as f64)
    } else {
        format!("{:.4}", a as f64 / b as f64)
    }
}

impl Snapshot {
    /// `x` per step, as text (`-` before the first step).
    fn per_step(&self, x: u64) -> String {
        if self.steps == 0 {
            "-".to_string()
        } else {
            let v = x as f64 / self.steps as f64;
            if v.fract() == 0.0 {
                format!("{v:.0}")
            } else {
                format!("{v:.2}")
            }
        }
    }

    /// The report `kiln run --stats` prints: load, then per step.
    pub fn report(&self, mode: &str) -> String {
        use crate::plan::planner::fmt_bytes;
        let mut s = String::new();
        s.push_str(&format!(
            "cuda load ({mode}): {} device allocations ({}), {} pinned host allocations ({}), {} uploads ({}), {} graphs instantiated ({} nodes), {} driver calls\n",
            self.device_allocs_load,
            fmt_bytes(self.device_bytes_load),
            self.pinned_allocs_load,
            fmt_bytes(self.pinned_bytes_load),
            self.uploads_load,
            fmt_bytes(self.upload_bytes_load),
            self.graphs_instantiated,
            self.graph_nodes,
            self.driver_calls_load
        ));
        s.push_str(&format!(
            "cuda after load: {} steps; device allocations {} (must be 0), pinned allocations {}, stream captures {}, pageable uploads {}\n",
            self.steps, self.device_allocs_after_load, self.pinned_allocs_after_load, self.stream_captures, self.uploads_pageable
        ));
        s.push_str(&format!(
            "cuda per step: host-to-device copies {}, graph launches {}, kernel launches {}, driver calls {}, host syncs {}, device-to-host copies {}\n",
            self.per_step(self.uploads_pinned + self.uploads_pageable),
            self.per_step(self.graph_launches),
            self.per_step(self.kernel_launches),
            self.per_step(self.driver_calls),
            self.per_step(self.host_syncs),
            self.per_step(self.downloads),
        ));
        if self.loop_launches > 0 {
            s.push_str(&format!(
                "cuda device loops: {} launches ran {} decode steps; per decode step: {} launches, {} host syncs while a loop ran\n",
                self.loop_launches,
                self.loop_steps,
                ratio(self.loop_launches, self.loop_steps),
                ratio(self.loop_syncs, self.loop_steps),
            ));
        }
        s
    }

    /// Launches per decode step inside device loops (`None` before any loop step).
    pub fn loop_launches_per_step(&self) -> Option<f64> {
        (self.loop_steps > 0).then(|| self.loop_launches as f64 / self.loop_steps as f64)
    }
    /// Blocking host syncs per decode step while device loops ran (`None` before any).
    pub fn loop_syncs_per_step(&self) -> Option<f64> {
        (self.loop_steps > 0).then(|| self.loop_syncs as f64 / self.loop_steps as f64)
    }

    /// What must hold after load; each broken promise as a sentence.
    pub fn violations(&self) -> Vec<String> {
        let mut v = Vec::new();
        if self.device_allocs_after_load != 0 {
            v.push(format!("{} device allocations after load", self.device_allocs_after_load));
        }
        if self.pinned_allocs_after_load != 0 {
            v.push(format!("{} pinned host allocations after load", self.pinned_allocs_after_load));
        }
        if self.stream_captures != 0 {
            v.push(format!("{} stream captures", self.stream_captures));
        }
        if self.uploads_pageable != 0 {
            v.push(format!("{} uploads from pageable host memory after load", self.uploads_pageable));
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_and_after_load_are_counted_apart() {
        let c = Counters::default();
        c.device_alloc(100);
        c.upload(100, false);
        c.driver_call();
        c.mark_loaded();
        c.driver_call();
        c.driver_call();
        c.upload(8, true);
        c.graph_launch();
        c.host_sync();
        c.step();
        let s = c.snapshot();
        assert_eq!((s.device_allocs_load, s.device_allocs_after_load), (1, 0));
        assert_eq!((s.uploads_load, s.uploads_pinned, s.uploads_pageable), (1, 1, 0));
        assert_eq!((s.driver_calls_load, s.driver_calls), (1, 2));
        assert!(s.violations().is_empty());
        c.device_alloc(4);
        assert_eq!(c.snapshot().violations().len(), 1);
    }
}
