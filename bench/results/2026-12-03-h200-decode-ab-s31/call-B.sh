#!/bin/bash
# Session 31 call B (binary of main's head $KILN_COMMIT, default plans = KILN_GEMV_NARROW 64 KiB rule):
# warm-up A/B round 1 (default | KILN_ATTN_EARLY_TRIGGER=1 kernels), the official command, kiln gate,
# A/B round 2, then block traces of the default on the three shapes, each step while time allows.
set -u
T0=$(date +%s)
B=$PWD/target/kiln-s31b
export KILN_CACHE_DIR=$PWD/.device/kc31c KILN_CUDA_INCLUDE=/usr/local/cuda/include
(cd .device/kc31c && xz -d -k -f *.xz)
S=$OUT/a-summary.txt
{ date -u; echo "commit $KILN_COMMIT"; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv; } > $S
el() { echo $(( $(date +%s) - T0 )); }
for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
  timeout 240 $B synth --shape $M --seed 1 --out target/synth/$M-seed1 > $OUT/log-$M.txt 2>&1
  echo "synth $M done at $(el) s" >> $S
done
ab() {  # ab ROUND LIMIT
  for V in A E; do
    [ $(el) -gt $2 ] && { echo "skip $V round $1 at $(el) s" >> $S; continue; }
    case $V in A) E="KILN_X=0" ;; E) E="KILN_NVRTC_DEFINES=KILN_ATTN_EARLY_TRIGGER=1" ;; esac
    echo "-- $V round $1 ($E) start $(el) s" >> $S
    env $E timeout 150 $B bench --shapes qwen2.5-0.5b,llama3.2-1b,llama3.1-8b --synth-root target/synth --batches 1 \
      --contexts 128 --repeats 3 --fuse --out /tmp/b31-$V-$1 > $OUT/bench-$V-$1.txt 2>&1
    echo "rc $? end $(el) s" >> $S
    grep -a -E '^(qwen|llama)[^ ]* +1 |read bandwidth:|rror' $OUT/bench-$V-$1.txt | head -8 >> $S
  done
}
ab 1 200
R=2026-12-03-h200-decode-$KILN_COMMIT
echo "== official start $(el) s" >> $S
timeout 420 $B bench --shapes qwen2.5-0.5b,llama3.2-1b,llama3.1-8b --synth-root target/synth --prompt 128 --new-tokens 256 \
  --batches 1,2,4,8 --contexts 128,4096 --repeats 5 --fuse --torch --torch-rows first --torch-modes compile --torch-repeats 3 \
  --out $OUT/$R > $OUT/official.txt 2>&1
echo "rc $? end $(el) s" >> $S
grep -a -E '^(qwen|llama)[^ ]* +1 +128 |read bandwidth:|rror' $OUT/official.txt | head -8 >> $S
if [ $(el) -lt 400 ]; then
  echo "== gate start $(el) s" >> $S
  timeout 150 $B gate --synth-dir target/synth > $OUT/gate.log 2>&1
  echo "rc $? end $(el) s" >> $S; tail -2 $OUT/gate.log >> $S
fi
ab 2 450
IDS=$(seq -s, 1 128)
for M in llama3.2-1b qwen2.5-0.5b; do
  [ $(el) -gt 490 ] && break
  D=target/synth/$M-seed1
  echo "== trace $M at $(el) s" >> $S
  $B plan --model $D --fuse --decode-buckets 1 -o $OUT/$M.plan >> $OUT/log-$M.txt 2>&1
  KILN_NVRTC_DEFINES=KILN_TRACE=1 KILN_TRACE_OUT=/tmp/trace-$M.bin timeout 60 $B run --model $D --plan $OUT/$M.plan \
    --prompt-ids $IDS --max-tokens 256 --temperature 0 --device cuda > /tmp/traced.txt 2>&1
  grep -a '^\[kiln\]\|^kiln:' /tmp/traced.txt | cut -c1-200 >> $S
  python3 scripts/trace_summary.py /tmp/trace-$M.bin $OUT/$M.plan.txt --csv $OUT/launches-$M.csv >> $S 2>&1
  rm -f /tmp/trace-$M.bin $OUT/$M.plan
done
echo "end $(el) s" >> $S
cd $OUT && tar czf extra.tgz bench-*.txt official.txt log-*.txt *.csv *.plan.txt 2>/dev/null; rm -f bench-*.txt log-*.txt official.txt *.csv *.plan.txt
ls -la $OUT >> $S
cat $S
