#!/bin/bash
# Session 62, guarded: on an H200 the issue's official command (ba1cfaf's binary; its default kernels' .text are
# byte-identical to main's since 0c26f9b); on anything else the A/B of KILN_QKV_ATTN_MMA=1 (the fused QKV-attention's
# 24 dot products on mma.sync over warp-split inputs, x * norm_w rounded once per input instead of once per warp):
# kernel_check's qkv_attention check with the define, then scripts/device_ab_define.sh (ids, placements, gate 1,2,5).
# Carry [".device/bin/kiln-s62.xz", ".device/kc62"] (scripts/device_cache.sh /tmp/kiln-s62 .device/kc62, with no
# defines and with KILN_QKV_ATTN_MMA=1) and, for the traces, ".device/kc62t" (the same with KILN_TRACE=1 and
# KILN_TRACE=1,KILN_QKV_ATTN_MMA=1). Else branch ~250-420 s: kernel_check, the A/B, then both arms traced at context 128 if under TRACE_BEFORE (300) s.
set -u
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
if grep -q H200 $OUT/gpu.txt; then
  BIN=.device/bin/kiln-s62.xz KC=.device/kc62 GATE_BEFORE=450 bash bench/results/2026-12-05-s52-calls/call-official.sh
else
  T0=$(date +%s)
  timeout 100 python3 scripts/kernel_check.py --only qkv_attention --define KILN_QKV_ATTN_MMA=1 > $OUT/kcheck-mma.txt 2>&1
  echo "kernel_check rc $? at $(( $(date +%s) - T0 )) s" | tee -a $OUT/kcheck-mma.txt
  grep -a -i -E 'qkv|fail|pass|error' $OUT/kcheck-mma.txt | head -12
  AB_BY=200 bash scripts/device_ab_define.sh mma KILN_QKV_ATTN_MMA=1 .device/bin/kiln-s62.xz .device/kc62
  for V in base:KILN_TRACE=1 mma:KILN_TRACE=1,KILN_QKV_ATTN_MMA=1; do
    [ $(( $(date +%s) - T0 )) -lt ${TRACE_BEFORE:-300} ] || break
    DEFINES=${V#*:} timeout 90 bash scripts/device_trace.sh .device/bin/kiln-s62.xz .device/kc62t trace-${V%%:*}-summary.txt \
      qwen2.5-0.5b:128 > /dev/null
    mv $OUT/qwen2.5-0.5b-128.json $OUT/trace-${V%%:*}-128.json 2>/dev/null
    grep -a -E 'step us median|^qkv_attn ' $OUT/trace-${V%%:*}-summary.txt | head -3
  done
  echo "else branch done at $(( $(date +%s) - T0 )) s"
fi
