#!/bin/bash
# Session 31 call A: kiln-only A/B at batch 1, context 128 (plan knobs, one cubin set):
#   A default | B KILN_GEMV_NARROW=64 | C NARROW=64 + KILN_GEMV_COLOC=1 | D COLOC=1
# then the block trace of the 1B under C, then a second A/B round while time allows.
set -u
T0=$(date +%s)
B=$PWD/target/kiln-s31
export KILN_CACHE_DIR=$PWD/.device/kc31 KILN_CUDA_INCLUDE=/usr/local/cuda/include
(cd .device/kc31 && xz -d -k -f *.xz)
S=$OUT/a-summary.txt
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv; } > $S
el() { echo $(( $(date +%s) - T0 )); }
for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
  timeout 240 $B synth --shape $M --seed 1 --out target/synth/$M-seed1 > $OUT/log-$M.txt 2>&1
  echo "synth $M done at $(el) s" >> $S
done
env_of() { case $1 in A) echo KILN_X=0 ;; B) echo KILN_GEMV_NARROW=64 ;; C) echo KILN_GEMV_NARROW=64 KILN_GEMV_COLOC=1 ;; D) echo KILN_GEMV_COLOC=1 ;; esac; }
ab() {  # ab ROUND
  for V in A B C D; do
    [ $(el) -gt $2 ] && { echo "skip $V round $1 at $(el) s" >> $S; continue; }
    E=$(env_of $V)
    echo "-- $V round $1 ($E) start $(el) s" >> $S
    env $E timeout 150 $B bench --shapes qwen2.5-0.5b,llama3.2-1b,llama3.1-8b --synth-root target/synth --batches 1 \
      --contexts 128 --repeats 3 --fuse --out /tmp/b31-$V-$1 > $OUT/bench-$V-$1.txt 2>&1
    echo "rc $? end $(el) s" >> $S
    grep -a -E '^(qwen|llama)|GB/s|bandwidth|rror' $OUT/bench-$V-$1.txt | head -8 >> $S
  done
}
ab 1 400
IDS=$(seq -s, 1 128)
M=llama3.2-1b; D=target/synth/$M-seed1
if [ $(el) -lt 430 ]; then
  echo "== trace $M C at $(el) s" >> $S
  env KILN_GEMV_NARROW=64 KILN_GEMV_COLOC=1 $B plan --model $D --fuse --decode-buckets 1 -o $OUT/$M-C.plan >> $OUT/log-$M.txt 2>&1
  KILN_NVRTC_DEFINES=KILN_TRACE=1 KILN_TRACE_OUT=$OUT/trace-$M-C.bin timeout 100 $B run --model $D --plan $OUT/$M-C.plan \
    --prompt-ids $IDS --max-tokens 256 --temperature 0 --device cuda > $OUT/traced.txt 2>&1
  grep -a '^\[kiln\]\|^kiln:' $OUT/traced.txt | cut -c1-300 >> $S
  python3 scripts/trace_summary.py $OUT/trace-$M-C.bin $OUT/$M-C.plan.txt --csv $OUT/launches-$M-C.csv >> $S 2>&1
  rm -f $OUT/trace-$M-C.bin $OUT/$M-C.plan $OUT/traced.txt
fi
ab 2 470
echo "end $(el) s" >> $S
cd $OUT && tar czf extra.tgz bench-*.txt *.csv *.plan.txt log-*.txt 2>/dev/null; rm -f bench-*.txt *.csv *.plan.txt log-*.txt
cat $S
