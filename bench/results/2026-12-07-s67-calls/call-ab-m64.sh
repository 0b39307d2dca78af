#!/bin/bash
# Session 67: the A/B of KILN_QKV_ATTN_MERGE64=1 (a split block's 8 warps merged by 64 threads, one dim each, against
# warp 0's 8 writer lanes; the same bits) on c5e08a3, the 0.5B at context 128, pads 0 / 32 / 64 / 1024, two rounds,
# its greedy ids and gate 1,2,5 with the define (scripts/device_ab_define.sh); then, TRACE=1, block traces of both
# arms (scripts/device_ab_traced.sh). Any GPU (an H100 is fine: an A/B compares arms on one machine).
# Carry: [".device/bin/kiln-s67b.xz", ".device/kc67b", ".device/kc67bt"] (scripts/device_cache.sh /tmp/kiln-s67b DIR
# [KILN_QKV_ATTN_MERGE64=1]; kc67bt: KILN_TRACE=1 and KILN_TRACE=1,KILN_QKV_ATTN_MERGE64=1).
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
if [ -n "${TRACE:-}" ]; then
  AB_BY=${AB_BY:-200} bash scripts/device_ab_traced.sh m64 KILN_QKV_ATTN_MERGE64=1 .device/bin/kiln-s67b.xz .device/kc67b .device/kc67bt
else
  AB_BY=${AB_BY:-200} bash scripts/device_ab_define.sh m64 KILN_QKV_ATTN_MERGE64=1 .device/bin/kiln-s67b.xz .device/kc67b
fi
