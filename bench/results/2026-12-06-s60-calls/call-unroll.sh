#!/bin/bash
# Session 60: the fused QKV-attention's loop over keys not unrolled (KILN_QKV_ATTN_UNROLL=1, 787a598; a compile-time
# define: half the loop's code, 4 keys a warp per pass, the first pass's K/V loaded before the wait) against main's 2:
# does the last-ending block's slow loop (call-probe2.sh) come from instruction fetch? Greedy ids, the 0.5B A/B over
# four placements at contexts 128 and 1024, kiln gate 1,2,5 with the define (scripts/device_ab_define.sh), then both
# arms traced at context 128 (trace_summary.py's third table: the loop is phase 8 to phase 7). Carry
# [".device/bin/kiln-s60u.xz", ".device/kc60u", ".device/kc60ut"] (scripts/device_cache.sh /tmp/kiln-s60u .device/kc60u,
# then again with KILN_QKV_ATTN_UNROLL=1; .device/kc60ut with KILN_TRACE=1 and KILN_TRACE=1,KILN_QKV_ATTN_UNROLL=1).
# ~170 s.
set -u
U1=KILN_QKV_ATTN_UNROLL=1
CTXS=${CTXS:-128,1024} AB_BY=${AB_BY:-230} bash scripts/device_ab_define.sh unroll1 $U1 .device/bin/kiln-s60u.xz .device/kc60u
S=$OUT/unroll1-summary.txt B=$PWD/target/kiln M=qwen2.5-0.5b D=target/synth/qwen2.5-0.5b-seed1
$B plan --model $D --fuse --decode-buckets 1 -o /tmp/$M.plan > /dev/null 2>&1
for V in base unroll1; do
  DEF=KILN_TRACE=1; [ $V = unroll1 ] && DEF=KILN_TRACE=1,$U1
  [ -d .device/kc60ut ] || break
  ( source scripts/device_prep.sh .device/bin/kiln-s60u.xz .device/kc60ut $DEF >> $S
    KILN_TRACE_OUT=/tmp/trace.bin timeout 45 $B run --model $D --plan /tmp/$M.plan --prompt-ids $(seq -s, 1 128) \
      --max-tokens 256 --temperature 0 --device cuda > /tmp/traced.txt 2>&1
    echo "trace $M $V rc $?" >> $S; grep -a -i "error\|panic" /tmp/traced.txt | head -3 >> $S
    python3 scripts/trace_summary.py /tmp/trace.bin /tmp/$M.plan.txt --json $OUT/trace-unroll-$V.json > /tmp/ts.txt 2>&1
    grep -a -E "^(qkv_attn|steps used|phases|role)" /tmp/ts.txt >> $S )
done
tail -30 $S
