#!/bin/bash
# Session 62, second A/B of KILN_QKV_ATTN_MMA=1 (0b6c226: the biases by cp.async, so warp 0 no longer waits for them
# before the PDL wait), then its trace at context 128. On an H200 (with too little device time left for the gate): the
# official command's bench alone. Carry [".device/bin/kiln-s62b.xz", ".device/kc62b", ".device/kc62bt"]
# (scripts/device_cache.sh /tmp/kiln-s62b .device/kc62b, with no defines and with KILN_QKV_ATTN_MMA=1; kc62bt with
# KILN_TRACE=1,KILN_QKV_ATTN_MMA=1). ~150 s on an H100.
set -u
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
if grep -q H200 $OUT/gpu.txt; then
  BIN=.device/bin/kiln-s62b.xz KC=.device/kc62b GATE_BEFORE=0 LIMIT=${LIMIT:-520} bash bench/results/2026-12-05-s52-calls/call-official.sh
else
  T0=$(date +%s)
  AB_BY=150 bash scripts/device_ab_define.sh mma2 KILN_QKV_ATTN_MMA=1 .device/bin/kiln-s62b.xz .device/kc62b
  DEFINES=KILN_TRACE=1,KILN_QKV_ATTN_MMA=1 timeout 90 bash scripts/device_trace.sh .device/bin/kiln-s62b.xz .device/kc62bt \
    trace-mma2-summary.txt qwen2.5-0.5b:128 > /dev/null
  mv $OUT/qwen2.5-0.5b-128.json $OUT/trace-mma2-128.json 2>/dev/null
  grep -a -E 'step us median|^qkv_attn ' $OUT/trace-mma2-summary.txt | head -4
  echo "else branch done at $(( $(date +%s) - T0 )) s"
fi
