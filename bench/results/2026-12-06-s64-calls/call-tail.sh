#!/bin/bash
# Session 64, a device call: on an H200 the official command on main (7dc070c: main's default kernels, their
# .text byte-identical to cc632ab's), nothing else; elsewhere the A/B of the two push-chain cuts in attention_qkv.cu
# (KILN_QKV_ATTN_PUSH_WARP0=1 with KILN_QKV_ATTN_LAST_BARRIER=0, one arm) against main's default (greedy ids, the
# placements, gate 1,2,5 with the define), then kernel_check's qkv_attention with both defines from a kernel_check
# cache built here (KILN_CHECK_CACHE=/tmp/kcc64 kernel_check.py --compile-only --define ... --define ...).
# Carry: [".device/bin/kiln-s64.xz", ".device/kc64", ".device/kcc64"]
#   (scripts/device_cache.sh /tmp/kiln-s64 .device/kc64 [DEF]).
source scripts/device_official_if_h200.sh .device/bin/kiln-s64.xz .device/kc64 && exit
DEF=KILN_QKV_ATTN_PUSH_WARP0=1,KILN_QKV_ATTN_LAST_BARRIER=0
AB_BY=${AB_BY:-150} bash scripts/device_ab_define.sh tail $DEF .device/bin/kiln-s64.xz .device/kc64 > /dev/null
grep -a -v '^\[' $OUT/tail-summary.txt | grep -a -E "ids|^(arm|base|tail) |rc [0-9]+ at|kiln gate:"
mkdir -p /tmp/kcc && for f in .device/kcc64/*.xz; do xz -dc $f > /tmp/kcc/$(basename $f .xz); done
KILN_CHECK_CACHE=/tmp/kcc timeout 150 python3 scripts/kernel_check.py --only qkv_attention \
  --define KILN_QKV_ATTN_PUSH_WARP0=1 --define KILN_QKV_ATTN_LAST_BARRIER=0 > $OUT/kc-tail.txt 2>&1
echo "kernel_check rc $?"; grep -a -E "compiled the kernels|passed|failed|FAIL" $OUT/kc-tail.txt | tail -4
