#!/bin/bash
# Session 34 call C: block traces of 1975d4b (kiln-s34b, main's kernels and plans) on the three shapes, batch 1, context 128.
set -u
T0=$(date +%s)
B=$PWD/target/kiln-s34b
export KILN_CUDA_INCLUDE=/usr/local/cuda/include KILN_CACHE_DIR=$PWD/.device/kc34s
(cd .device/kc34s && xz -d -k -f *.xz)
S=$OUT/c-summary.txt
{ date -u; echo "commit $KILN_COMMIT"; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv; } > $S
el() { echo $(( $(date +%s) - T0 )); }
IDS=$(seq -s, 1 128)
for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
  D=target/synth/$M-seed1
  timeout 240 $B synth --shape $M --seed 1 --out $D > $OUT/log-$M.txt 2>&1
  echo "== trace $M at $(el) s" >> $S
  $B plan --model $D --fuse --decode-buckets 1 -o $OUT/$M.plan >> $OUT/log-$M.txt 2>&1
  KILN_NVRTC_DEFINES=KILN_TRACE=1 KILN_TRACE_OUT=/tmp/trace.bin timeout 60 $B run --model $D --plan $OUT/$M.plan \
    --prompt-ids $IDS --max-tokens 256 --temperature 0 --device cuda > /tmp/traced.txt 2>&1
  grep -a '^\[kiln\]\|^kiln:' /tmp/traced.txt | cut -c1-200 >> $S
  python3 scripts/trace_summary.py /tmp/trace.bin $OUT/$M.plan.txt --csv $OUT/launches-$M.csv >> $S 2>&1
  rm -f /tmp/trace.bin $OUT/$M.plan
  rm -rf $D
done
echo "end $(el) s" >> $S
cd $OUT && tar czf extra.tgz log-*.txt *.csv *.plan.txt 2>/dev/null; rm -f log-*.txt *.csv *.plan.txt
ls -la $OUT >> $S
cat $S
