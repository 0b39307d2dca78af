#!/bin/bash
# Session 62: the official command, only on an H200 (exit 3 at once on anything else, so an H100 costs only its
# start). Carry [".device/bin/kiln-s61.xz", ".device/kc61"] (0c26f9b; its 131 kernels' .text byte-identical to main's
# default build). BIN / KC may name another binary and cache built from main.
set -u
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
grep -q H200 $OUT/gpu.txt || exit 3
BIN=${BIN:-.device/bin/kiln-s61.xz} KC=${KC:-.device/kc61} GATE_BEFORE=450 bash bench/results/2026-12-05-s52-calls/call-official.sh
