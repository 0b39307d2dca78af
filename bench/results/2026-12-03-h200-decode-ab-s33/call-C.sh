#!/bin/bash
# Session 33 call C: the step's end. O = kiln-s33 (54b4be0: the previous `advance` and `gather`), F = kiln-s33c (16-byte gather; advance with one
# round trip of loads and no system fence), FN = F + KILN_NORM_PROLOGUE_MAX=1000000 (the output norm folded into the
# logits GEMV, norm after the dot). 1. greedy ids O vs F (must be identical) and FN (reported); 2. kiln-only A/B, two
# rounds; 3. 1B / 0.5B traces of F and FN (the gate runs in the next call, on main).
set -u
T0=$(date +%s)
BO=$PWD/target/kiln-s33
BF=$PWD/target/kiln-s33c
export KILN_CUDA_INCLUDE=/usr/local/cuda/include
(cd .device/kc33b && xz -d -k -f *.xz) ; (cd .device/kc33c && xz -d -k -f *.xz)
S=$OUT/c-summary.txt
{ date -u; echo "commit $KILN_COMMIT"; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv; } > $S
el() { echo $(( $(date +%s) - T0 )); }
for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
  timeout 240 $BF synth --shape $M --seed 1 --out target/synth/$M-seed1 > $OUT/log-$M.txt 2>&1
  echo "synth $M done at $(el) s" >> $S
done
IDS=$(seq -s, 1 128)
var() {  # var NAME -> sets B, CD, E
  case $1 in
    O) B=$BO; CD=kc33b; E="KILN_X=0" ;;
    F) B=$BF; CD=kc33c; E="KILN_X=0" ;;
    FN) B=$BF; CD=kc33c; E="KILN_NORM_PROLOGUE_MAX=1000000" ;;
  esac
}
for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
  D=target/synth/$M-seed1
  for V in O F FN; do
    var $V
    env $E KILN_CACHE_DIR=$PWD/.device/$CD timeout 45 $B run --model $D --prompt-ids $IDS --max-tokens 128 --temperature 0 --device cuda \
      > /tmp/ids-$M-$V.txt 2> /tmp/err-$M-$V.txt
    echo "run $M $V rc $? at $(el) s: $(md5sum < /tmp/ids-$M-$V.txt | cut -c1-12) $(wc -w < /tmp/ids-$M-$V.txt) ids" >> $S
    grep -a -i 'error\|panic\|trap\|illegal' /tmp/err-$M-$V.txt | head -3 | cut -c1-200 >> $S
  done
  if cmp -s /tmp/ids-$M-O.txt /tmp/ids-$M-F.txt; then echo "IDENTICAL O F $M" >> $S; else
    echo "DIFFER O F $M: stopping" >> $S; cat $S; exit 1; fi
  cmp -s /tmp/ids-$M-O.txt /tmp/ids-$M-FN.txt && echo "IDENTICAL O FN $M" >> $S || echo "differ O FN $M (rounding order)" >> $S
done
ab() {  # ab ROUND LIMIT
  for V in O F FN; do
    [ $(el) -gt $2 ] && { echo "skip $V round $1 at $(el) s" >> $S; continue; }
    var $V
    echo "-- $V round $1 ($B $E) start $(el) s" >> $S
    env $E KILN_CACHE_DIR=$PWD/.device/$CD timeout 150 $B bench --shapes qwen2.5-0.5b,llama3.2-1b,llama3.1-8b --synth-root target/synth --batches 1 \
      --contexts 128 --repeats 3 --fuse --out /tmp/b33c-$V-$1 > $OUT/bench-$V-$1.txt 2>&1
    echo "rc $? end $(el) s" >> $S
    grep -a -E '^(qwen|llama)[^ ]* +1 |read bandwidth:|rror' $OUT/bench-$V-$1.txt | head -8 >> $S
  done
}
ab 1 150
ab 2 220
for MV in llama3.2-1b:F llama3.2-1b:FN qwen2.5-0.5b:FN; do
  M=${MV%:*}; V=${MV#*:}
  [ $(el) -gt 320 ] && break
  var $V
  D=target/synth/$M-seed1
  echo "== trace $M $V at $(el) s" >> $S
  env $E $B plan --model $D --fuse --decode-buckets 1 -o $OUT/$M-$V.plan >> $OUT/log-$M.txt 2>&1
  env $E KILN_CACHE_DIR=$PWD/.device/$CD KILN_NVRTC_DEFINES=KILN_TRACE=1 KILN_TRACE_OUT=/tmp/trace.bin timeout 60 $B run --model $D --plan $OUT/$M-$V.plan \
    --prompt-ids $IDS --max-tokens 256 --temperature 0 --device cuda > /tmp/traced.txt 2>&1
  grep -a '^\[kiln\]\|^kiln:' /tmp/traced.txt | cut -c1-200 >> $S
  python3 scripts/trace_summary.py /tmp/trace.bin $OUT/$M-$V.plan.txt --csv $OUT/launches-$M-$V.csv >> $S 2>&1
  rm -f /tmp/trace.bin $OUT/$M-$V.plan
done
if false; then
  echo "== gate (kiln-s33c, KILN_NORM_PROLOGUE_MAX=1000000) at $(el) s" >> $S
  KILN_CACHE_DIR=$PWD/.device/kc33c KILN_NORM_PROLOGUE_MAX=1000000 timeout 150 $BF gate --synth-dir target/synth > $OUT/gate.log 2>&1
  echo "gate rc $? at $(el) s" >> $S
  grep -a -E 'FAIL|kiln gate:' $OUT/gate.log | tail -10 >> $S
fi
echo "end $(el) s" >> $S
cd $OUT && tar czf extra.tgz bench-*.txt log-*.txt *.csv *.plan.txt 2>/dev/null; rm -f bench-*.txt log-*.txt *.csv *.plan.txt
ls -la $OUT >> $S
cat $S
