#!/bin/bash
# Session 58 calls 4-6, as run (inline commands, on the H100 call 3 had started, warm; cfff1f3's traced binary
# kiln-s58t.xz and its cache kc58t; carry [".device/bin/kiln-s58t.xz", ".device/kc58t"]):
#   call 4: the 8B's block trace (s58-4-summary.txt, launches-llama3.1-8b.csv.gz, llama3.1-8b.plan.txt.gz);
#   call 5: the 0.5B and 1B again with trace_summary.py's end quantiles (s58-5-summary.txt);
#   call 6: the 0.5B with KILN_L2_PREFETCH=0 and with KILN_GEMV_K2=0 (s58-6-summary.txt).
# MODELS and VARS pick the call: call 4 MODELS=llama3.1-8b; call 5 MODELS="qwen2.5-0.5b llama3.2-1b";
# call 6 MODELS=qwen2.5-0.5b VARS="KILN_L2_PREFETCH=0 KILN_GEMV_K2=0".
source scripts/device_prep.sh .device/bin/kiln-s58t.xz .device/kc58t KILN_TRACE=1 > /tmp/prep.txt
B=$PWD/target/kiln S=$OUT/summary.txt
{ nvidia-smi --query-gpu=name --format=csv,noheader; cat /tmp/prep.txt; } > $S
for M in ${MODELS:-qwen2.5-0.5b}; do
  for V in ${VARS:-KILN_NONE=}; do (
    export $V; D=target/synth/$M-seed1
    [ -f $D/config.json ] || timeout 120 $B synth --shape $M --seed 1 --out $D > /dev/null 2>&1
    $B plan --model $D --fuse --decode-buckets 1 -o /tmp/$M.plan > /dev/null 2>&1
    KILN_TRACE_OUT=/tmp/trace.bin timeout 60 $B run --model $D --plan /tmp/$M.plan --prompt-ids $(seq -s, 1 128) \
      --max-tokens 256 --temperature 0 --device cuda > /tmp/traced.txt 2>&1
    echo "trace $M $V rc $?" >> $S; grep -a -i "error\|panic" /tmp/traced.txt | head -3 >> $S
    python3 scripts/trace_summary.py /tmp/trace.bin /tmp/$M.plan.txt >> $S 2>&1 ); done
done
cat $S
