#!/bin/bash
# Session 63's last call (~660 s of device time left: one try): the issue's official command on cc632ab (main's
# default kernels, KILN_QKV_ATTN_MERGE1=1 among them) on whatever GPU comes; the report names the GPU. Then the full
# `kiln gate` if the bench ended before GATE_BEFORE s. Carry [".device/bin/kiln-s63d.xz", ".device/kc63d"]
# (scripts/device_cache.sh /tmp/kiln-s63d .device/kc63d).
set -u
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
BIN=.device/bin/kiln-s63d.xz KC=.device/kc63d GATE_BEFORE=${GATE_BEFORE:-450} LIMIT=${LIMIT:-520} \
  bash bench/results/2026-12-05-s52-calls/call-official.sh
