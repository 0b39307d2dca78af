#!/bin/bash
# Session 61: KILN_QKV_ATTN_WARM=1 (3537bc1) against the default: the fused QKV-attention runs the split's attention and
# its warps' merge once on zeros before the PDL wait (the same code, a loop of two passes), so that after the wait that
# code is in the SM's instruction cache. Is the ~1-2 us a block spends there after the wait instruction fetch
# (session 60: the last block's loop over keys 1.42 us against 0.67, no loads, no barriers)? Greedy ids, the 0.5B A/B
# over four placements at contexts 128 and 1024, kiln gate 1,2,5 with the define (scripts/device_ab_define.sh), then both
# arms traced at context 128 (scripts/device_trace.sh; phase 8 -> 7 is the loop over keys, 7 -> 5 the merge).
# Carry [".device/bin/kiln-s61w.xz", ".device/kc61w", ".device/kc61wt"] (scripts/device_cache.sh /tmp/kiln-s61w
# .device/kc61w, then with KILN_QKV_ATTN_WARM=1; .device/kc61wt with KILN_TRACE=1 and KILN_TRACE=1,KILN_QKV_ATTN_WARM=1).
# ~200 s.
set -u
W=KILN_QKV_ATTN_WARM=1
CTXS=${CTXS:-128,1024} AB_BY=${AB_BY:-230} bash scripts/device_ab_define.sh warm1 $W .device/bin/kiln-s61w.xz .device/kc61w
for V in base warm1; do
  DEF=KILN_TRACE=1; [ $V = warm1 ] && DEF=KILN_TRACE=1,$W
  DEFINES=$DEF bash scripts/device_trace.sh .device/bin/kiln-s61w.xz .device/kc61wt trace-$V-summary.txt qwen2.5-0.5b:128 > /dev/null
  mv $OUT/qwen2.5-0.5b-128.json $OUT/trace-$V-128.json 2>/dev/null
  grep -a -E "^(qkv_attn|steps used|phases|role)" $OUT/trace-$V-summary.txt | head -12
done
