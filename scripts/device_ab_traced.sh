#!/bin/bash
# device_ab_traced.sh NAME DEFINES BINARY_XZ CACHE_DIR TRACE_CACHE_DIR: on a GPU machine (a device call), the A/B of a
# kernel define (scripts/device_ab_define.sh: the 0.5B's greedy ids under both, the placements, gate 1,2,5 with the
# define; AB_BY bounds it in seconds), then block traces of both arms at context 128 (scripts/device_trace.sh; its
# TRACE_CACHE_DIR holds the KILN_TRACE=1 and KILN_TRACE=1,DEFINES caches). Writes $OUT/NAME-summary.txt,
# $OUT/trace-base-summary.txt, $OUT/trace-NAME-summary.txt and their JSON, and prints their key lines. Session 63's A/B:
#   AB_BY=150 bash scripts/device_ab_traced.sh merge1 KILN_QKV_ATTN_MERGE1=1 .device/bin/kiln-s63.xz .device/kc63 .device/kc63t
set -u
NAME=$1 DEF=$2 BIN=$3 KC=$4 KCT=$5
bash scripts/device_ab_define.sh "$NAME" "$DEF" "$BIN" "$KC" > /dev/null
grep -a -v '^\[' $OUT/$NAME-summary.txt | grep -a -E "ids|^(arm|base|$NAME) |rc [0-9]+ at|kiln gate:"  # not the per-run lines
for V in base "$NAME"; do
  D=KILN_TRACE=1; [ "$V" = "$NAME" ] && D=KILN_TRACE=1,$DEF
  DEFINES=$D timeout ${TRACE_LIMIT:-90} bash scripts/device_trace.sh "$BIN" "$KCT" trace-$V-summary.txt qwen2.5-0.5b:128 > /dev/null
  mv $OUT/qwen2.5-0.5b-128.json $OUT/trace-$V-128.json 2>/dev/null
  grep -a -E 'step us median|^qkv_attn ' $OUT/trace-$V-summary.txt | head -4
done
