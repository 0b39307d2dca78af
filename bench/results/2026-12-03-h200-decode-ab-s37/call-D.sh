#!/bin/bash
# Session 37 call D. Why KILN_LOOP_UNROLL=8 ran the 1B 0.6% faster than 2 and 4 in call C: 1B-only kiln bench
# (batch 1, context 128) K 2 / 8 / 4 / 16 / 2 / 8 on a second machine, then block traces of the 1B with K 2 and K 8
# (kiln run, 256 tokens, bursts of 64).
set -u
T0=$(date +%s)
B=$PWD/target/kiln-s37a
export KILN_CUDA_INCLUDE=/usr/local/cuda/include KILN_CACHE_DIR=$PWD/.device/kc37
for d in kc37 kc37t; do (cd .device/$d && xz -d -k -f *.xz); done
S=$OUT/d-summary.txt
{ date -u; echo "commit $KILN_COMMIT"; } > $S
el() { echo $(( $(date +%s) - T0 )); }
M=llama3.2-1b; D=target/synth/$M-seed1
[ -f $D/config.json ] || timeout 240 $B synth --shape $M --seed 1 --out $D > $OUT/log-$M.txt 2>&1
echo "synth $M ready at $(el) s" >> $S
i=0
for K in 2 8 4 16 2 8; do
  i=$((i+1)); [ $(el) -gt 250 ] && { echo "skip K$K at $(el) s" >> $S; continue; }
  echo "-- K$K run $i start $(el) s" >> $S
  KILN_LOOP_UNROLL=$K timeout 100 $B bench --shapes $M --synth-root target/synth --batches 1 --contexts 128 --repeats 5 \
    --fuse --out /tmp/b37d-$K-$i > $OUT/bench-K$K-$i.txt 2>&1
  echo "rc $? end $(el) s" >> $S
  grep -a -E '^(qwen|llama)[^ ]* +1 |read bandwidth:|rror' $OUT/bench-K$K-$i.txt | head -4 | cut -c1-200 >> $S
done
IDS=$(seq -s, 1 128)
for K in 2 8; do
  [ $(el) -gt 420 ] && break
  echo "== trace $M K$K at $(el) s" >> $S
  KILN_LOOP_UNROLL=$K $B plan --model $D --fuse --decode-buckets 1 -o $OUT/$M-K$K.plan >> $OUT/log-$M.txt 2>&1
  KILN_CACHE_DIR=$PWD/.device/kc37t KILN_NVRTC_DEFINES=KILN_TRACE=1 KILN_TRACE_OUT=/tmp/trace.bin timeout 60 $B run --model $D --plan $OUT/$M-K$K.plan \
    --prompt-ids $IDS --max-tokens 256 --temperature 0 --device cuda > /tmp/traced.txt 2>&1
  grep -a '^\[kiln\]\|^kiln:' /tmp/traced.txt | cut -c1-200 >> $S
  python3 scripts/trace_summary.py /tmp/trace.bin $OUT/$M-K$K.plan.txt --csv $OUT/launches-$M-K$K.csv >> $S 2>&1
  rm -f /tmp/trace.bin $OUT/$M-K$K.plan
done
echo "end $(el) s" >> $S
cd $OUT && tar czf extra.tgz bench-*.txt log-*.txt *.csv *.plan.txt 2>/dev/null; rm -f bench-*.txt log-*.txt *.csv *.plan.txt
cat $S
