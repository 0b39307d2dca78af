#!/bin/bash
# Session 63: on an H200, the official command on e5e678d (main's default kernels: KILN_QKV_ATTN_MERGE1 is off
# and the new phase stamps exist only in trace builds; attention_qkv.cu's default .text is byte-identical to
# e8269fb's). On anything else: the A/B of KILN_QKV_ATTN_MERGE1=1 (the split's warps merged after one barrier) on the
# 0.5B, traces of the default and of MERGE1 (phase 9: the dot products' barrier return; 10: the merge's first
# barrier return), then the full `kiln gate` on the default if time is left (LIMIT s from the start).
# Carry [".device/bin/kiln-s63.xz", ".device/kc63", ".device/kc63t"] (scripts/device_cache.sh /tmp/kiln-s63 DIR with
# no defines and KILN_QKV_ATTN_MERGE1=1 -> kc63; with KILN_TRACE=1 and KILN_TRACE=1,KILN_QKV_ATTN_MERGE1=1 -> kc63t).
set -u
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
if grep -q H200 $OUT/gpu.txt; then
  BIN=.device/bin/kiln-s63.xz KC=.device/kc63 GATE_BEFORE=450 bash bench/results/2026-12-05-s52-calls/call-official.sh
  exit
fi
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
AB_BY=150 bash scripts/device_ab_define.sh merge1 KILN_QKV_ATTN_MERGE1=1 .device/bin/kiln-s63.xz .device/kc63 > /dev/null
grep -a -E 'ids|median|mean|paired|won|gate|rc' $OUT/merge1-summary.txt | head -20
for V in base merge1; do
  D=KILN_TRACE=1; [ $V = merge1 ] && D=KILN_TRACE=1,KILN_QKV_ATTN_MERGE1=1
  DEFINES=$D timeout 90 bash scripts/device_trace.sh .device/bin/kiln-s63.xz .device/kc63t trace-$V-summary.txt qwen2.5-0.5b:128 > /dev/null
  mv $OUT/qwen2.5-0.5b-128.json $OUT/trace-$V-128.json 2>/dev/null
  grep -a -E 'step us median|^qkv_attn ' $OUT/trace-$V-summary.txt | head -4
done
echo "traces done at $(el) s"
source scripts/device_prep.sh .device/bin/kiln-s63.xz .device/kc63 > /dev/null
timeout $((${LIMIT:-560} - $(el))) target/kiln gate --synth-dir target/synth > $OUT/gate.log 2>&1
echo "gate (all checks, default) rc $? at $(el) s"; grep -a -E 'FAIL|kiln gate:' $OUT/gate.log | tail -6
