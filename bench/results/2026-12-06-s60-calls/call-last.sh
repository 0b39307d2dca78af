#!/bin/bash
# Session 60: which block sets the 0.5B QKV-attention's and o projection's span, and where its time goes:
# scripts/trace_summary.py's third table (the median and the last-ending block's wait return, phases and end, us past
# the launch's release), main's KILN_TRACE=1 kernels at contexts 128 and 1024, and
# the 1B at 128 (every role's median and last-ending block: SM mates, the next launches' blocks beside it, arrival). Carry
# [".device/bin/kiln-s60m.xz", ".device/kc60t"] (83a7781's binary and its KILN_TRACE=1 cache; trace_summary.py from
# the working tree). ~25 s on a warm machine. Output: $OUT/s60-last-summary.txt.
set -u
source scripts/device_prep.sh .device/bin/kiln-s60m.xz .device/kc60t KILN_TRACE=1 > /tmp/prep.txt
B=$PWD/target/kiln S=$OUT/s60-last-summary.txt
{ nvidia-smi --query-gpu=name --format=csv,noheader; $B --version; git log -1 --format=%h 2>/dev/null; cat /tmp/prep.txt; } > $S
M=qwen2.5-0.5b D=target/synth/$M-seed1
[ -f $D/config.json ] || timeout 60 $B synth --shape $M --seed 1 --out $D > /dev/null 2>&1
$B plan --model $D --fuse --decode-buckets 1 -o /tmp/$M.plan > /dev/null 2>&1
for CTX in 128 1024; do
  KILN_TRACE_OUT=/tmp/trace.bin timeout 60 $B run --model $D --plan /tmp/$M.plan --prompt-ids $(seq -s, 1 $CTX) \
    --max-tokens 256 --temperature 0 --device cuda > /tmp/traced.txt 2>&1
  echo "trace $M prompt $CTX rc $?" >> $S; grep -a -i "error\|panic" /tmp/traced.txt | head -3 >> $S
  python3 scripts/trace_summary.py /tmp/trace.bin /tmp/$M.plan.txt --json $OUT/last-$CTX.json >> $S 2>&1
done
M=llama3.2-1b D=target/synth/$M-seed1
[ -f $D/config.json ] || timeout 90 $B synth --shape $M --seed 1 --out $D > /dev/null 2>&1
$B plan --model $D --fuse --decode-buckets 1 -o /tmp/$M.plan > /dev/null 2>&1
KILN_TRACE_OUT=/tmp/trace.bin timeout 60 $B run --model $D --plan /tmp/$M.plan --prompt-ids $(seq -s, 1 128) \
  --max-tokens 256 --temperature 0 --device cuda > /tmp/traced.txt 2>&1
echo "trace $M prompt 128 rc $?" >> $S; grep -a -i "error\|panic" /tmp/traced.txt | head -3 >> $S
python3 scripts/trace_summary.py /tmp/trace.bin /tmp/$M.plan.txt --json $OUT/last-1b-128.json >> $S 2>&1
cat $S
