#!/bin/bash
# Session 34 call A. One binary kiln-s34a (main 8c34532 + the early residual, 3658a36) and kiln-s34r (+ session 32's
# shared-memory ring with KILN_GEMV_RING_ROUNDS, 2a34602). Variants:
#   B0  = kiln-s34a, KILN_FUSED_EARLY_RESIDUAL=0 (main's kernels)
#   ER  = kiln-s34a default (o / down load their residual right after the wait)
#   R2  = kiln-s34r, down's ring in shared memory, 4 stages of 2 rounds (KILN_GEMV_RING=1)
#   R2C = R2 + KILN_RING_CARVEOUT=100 on the _sr kernel alone
# 1. greedy ids of every variant against B0 (must be identical); 2. kiln-only A/B, two rounds; 3. 1B traces.
set -u
T0=$(date +%s)
BA=$PWD/target/kiln-s34a
BR=$PWD/target/kiln-s34r
export KILN_CUDA_INCLUDE=/usr/local/cuda/include
for d in kc34a kc34b kc34r; do (cd .device/$d && xz -d -k -f *.xz); done
S=$OUT/a-summary.txt
{ date -u; echo "commit $KILN_COMMIT"; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv; } > $S
el() { echo $(( $(date +%s) - T0 )); }
for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
  timeout 240 $BA synth --shape $M --seed 1 --out target/synth/$M-seed1 > $OUT/log-$M.txt 2>&1
  echo "synth $M done at $(el) s" >> $S
done
IDS=$(seq -s, 1 128)
RING="KILN_NVRTC_DEFINES=KILN_GEMV_RING_ROUNDS=2 KILN_GEMV_RING=1 KILN_GEMV_RING_ROUNDS=2 KILN_GEMV_RING_DEPTH=4"
var() {  # var NAME -> sets B, CD, E
  case $1 in
    B0) B=$BA; CD=kc34b; E="KILN_NVRTC_DEFINES=KILN_FUSED_EARLY_RESIDUAL=0" ;;
    ER) B=$BA; CD=kc34a; E="KILN_X=0" ;;
    R2) B=$BR; CD=kc34r; E="$RING" ;;
    R2C) B=$BR; CD=kc34r; E="$RING KILN_RING_CARVEOUT=100" ;;
  esac
}
VARS="B0 ER R2 R2C"
for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
  D=target/synth/$M-seed1
  for V in $VARS; do
    var $V
    env $E KILN_CACHE_DIR=$PWD/.device/$CD timeout 45 $B run --model $D --prompt-ids $IDS --max-tokens 128 --temperature 0 --device cuda \
      > /tmp/ids-$M-$V.txt 2> /tmp/err-$M-$V.txt
    echo "run $M $V rc $? at $(el) s: $(md5sum < /tmp/ids-$M-$V.txt | cut -c1-12) $(wc -w < /tmp/ids-$M-$V.txt) ids" >> $S
    grep -a -i 'error\|panic\|trap\|illegal\|compil' /tmp/err-$M-$V.txt | head -3 | cut -c1-200 >> $S
  done
  for V in ER R2 R2C; do
    cmp -s /tmp/ids-$M-B0.txt /tmp/ids-$M-$V.txt && echo "IDENTICAL B0 $V $M" >> $S || echo "DIFFER B0 $V $M" >> $S
  done
done
ab() {  # ab ROUND LIMIT
  for V in $VARS; do
    [ $(el) -gt $2 ] && { echo "skip $V round $1 at $(el) s" >> $S; continue; }
    var $V
    echo "-- $V round $1 ($B $E) start $(el) s" >> $S
    env $E KILN_CACHE_DIR=$PWD/.device/$CD timeout 150 $B bench --shapes qwen2.5-0.5b,llama3.2-1b,llama3.1-8b --synth-root target/synth --batches 1 \
      --contexts 128 --repeats 3 --fuse --out /tmp/b34a-$V-$1 > $OUT/bench-$V-$1.txt 2>&1
    echo "rc $? end $(el) s" >> $S
    grep -a -E '^(qwen|llama)[^ ]* +1 |read bandwidth:|rror' $OUT/bench-$V-$1.txt | head -8 >> $S
  done
}
ab 1 200
ab 2 330
for MV in llama3.2-1b:ER llama3.2-1b:R2C; do
  M=${MV%:*}; V=${MV#*:}
  [ $(el) -gt 420 ] && break
  var $V
  D=target/synth/$M-seed1
  if [ $V = ER ]; then TD=KILN_TRACE=1; else TD=KILN_TRACE=1,KILN_GEMV_RING_ROUNDS=2; fi
  echo "== trace $M $V at $(el) s" >> $S
  env $E $B plan --model $D --fuse --decode-buckets 1 -o $OUT/$M-$V.plan >> $OUT/log-$M.txt 2>&1
  env $E KILN_CACHE_DIR=$PWD/.device/$CD KILN_NVRTC_DEFINES=$TD KILN_TRACE_OUT=/tmp/trace.bin timeout 60 $B run --model $D --plan $OUT/$M-$V.plan \
    --prompt-ids $IDS --max-tokens 256 --temperature 0 --device cuda > /tmp/traced.txt 2>&1
  grep -a '^\[kiln\]\|^kiln:' /tmp/traced.txt | cut -c1-200 >> $S
  python3 scripts/trace_summary.py /tmp/trace.bin $OUT/$M-$V.plan.txt --csv $OUT/launches-$M-$V.csv >> $S 2>&1
  rm -f /tmp/trace.bin $OUT/$M-$V.plan
done
echo "end $(el) s" >> $S
cd $OUT && tar czf extra.tgz bench-*.txt log-*.txt *.csv *.plan.txt 2>/dev/null; rm -f bench-*.txt log-*.txt *.csv *.plan.txt
ls -la $OUT >> $S
cat $S
