#!/bin/bash
# Session 64, a device call: on an H200 the official command on main (0df9303: the QKV-attention's warp-0
# pushes and no last barrier by default), nothing else; elsewhere the 1B's A/B of KILN_ATTN_CLUSTER_LAST_BARRIER=0
# (attention_split.cu's cluster kernel without its last barrier, as attention_qkv.cu's) against main's default
# (greedy ids, the placements, gate 1,2,5 with the define), then kernel_check's attention_split with the define from
# a kernel_check cache built here (KILN_CHECK_CACHE=/tmp/kcc64b kernel_check.py --compile-only --define ...).
# Carry: [".device/bin/kiln-s64b.xz", ".device/kc64b"] (and ".device/kcc64b" for the kernel_check)
#   (scripts/device_cache.sh /tmp/kiln-s64b .device/kc64b [KILN_ATTN_CLUSTER_LAST_BARRIER=0]).
source scripts/device_official_if_h200.sh .device/bin/kiln-s64b.xz .device/kc64b && exit
DEF=KILN_ATTN_CLUSTER_LAST_BARRIER=0
SHAPE=llama3.2-1b AB_BY=${AB_BY:-170} bash scripts/device_ab_define.sh lastbar $DEF .device/bin/kiln-s64b.xz .device/kc64b > /dev/null
grep -a -v '^\[' $OUT/lastbar-summary.txt | grep -a -E "ids|^(arm|base|lastbar) |b1 c128|rc [0-9]+ at|kiln gate:"
[ -d .device/kcc64b ] || exit 0  # kernel_check only from a carried cache (a fresh compile is ~130 s of device time)
mkdir -p /tmp/kcc && for f in .device/kcc64b/*.xz; do xz -dc $f > /tmp/kcc/$(basename $f .xz); done
KILN_CHECK_CACHE=/tmp/kcc timeout 150 python3 scripts/kernel_check.py --only attention_split --define $DEF > $OUT/kc-lastbar.txt 2>&1
echo "kernel_check rc $?"; grep -a -E "compiled the kernels|passed|failed|FAIL" $OUT/kc-lastbar.txt | tail -4
