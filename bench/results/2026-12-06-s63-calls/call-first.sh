#!/bin/bash
# Session 63's first call: on an H200, the official command on main's machine code (87dd512's kiln-s62c and
# kc62c; e8269fb's kernels have the same .text); on anything else, call-default.sh (the 0.5B's ids, the full
# `kiln gate` and kernel_check's qkv_attention on the MMA default). Carry [".device/bin/kiln-s62c.xz", ".device/kc62c"].
set -u
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
if grep -q H200 $OUT/gpu.txt; then
  BIN=.device/bin/kiln-s62c.xz KC=.device/kc62c GATE_BEFORE=450 bash bench/results/2026-12-05-s52-calls/call-official.sh
else
  bash bench/results/2026-12-06-s62-calls/call-default.sh
fi
