#!/bin/bash
# Session 63: on an H200, the official command on e5e678d (main's default kernels: KILN_QKV_ATTN_MERGE1 is off
# and the new phase stamps exist only in trace builds; attention_qkv.cu's default .text is byte-identical to
# e8269fb's). On anything else: the A/B of KILN_QKV_ATTN_MERGE1=1 (the split's warps merged after one barrier) on the
# 0.5B, traces of the default and of MERGE1 (phase 9: the dot products' barrier return; 10: the merge's first
# barrier return), then the full `kiln gate` on the default if time is left (LIMIT s from the start).
# Carry [".device/bin/kiln-s63.xz", ".device/kc63", ".device/kc63t"] (scripts/device_cache.sh /tmp/kiln-s63 DIR with
# no defines and KILN_QKV_ATTN_MERGE1=1 -> kc63; with KILN_TRACE=1 and KILN_TRACE=1,KILN_QKV_ATTN_MERGE1=1 -> kc63t).
# It ran with the H200 guard and the A/B and trace steps inline; they moved, unchanged, into
# scripts/device_official_if_h200.sh and scripts/device_ab_traced.sh afterwards (which now prints fewer lines).
set -u
source scripts/device_official_if_h200.sh .device/bin/kiln-s63.xz .device/kc63 && exit
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
AB_BY=150 bash scripts/device_ab_traced.sh merge1 KILN_QKV_ATTN_MERGE1=1 .device/bin/kiln-s63.xz .device/kc63 .device/kc63t
echo "traces done at $(el) s"
source scripts/device_prep.sh .device/bin/kiln-s63.xz .device/kc63 > /dev/null
timeout $((${LIMIT:-560} - $(el))) target/kiln gate --synth-dir target/synth > $OUT/gate.log 2>&1
echo "gate (all checks, default) rc $? at $(el) s"; grep -a -E 'FAIL|kiln gate:' $OUT/gate.log | tail -6
