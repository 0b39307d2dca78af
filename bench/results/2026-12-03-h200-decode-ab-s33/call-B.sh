#!/bin/bash
# Session 33 call B: split-K GEMVs over a cluster of two blocks (`fused_linear_k2`, plan knob KILN_GEMV_SPLITK=<min in>,
# KILN_GEMV_SPLITK_SLOTS=<max doubled 256-thread grid>). 1. greedy ids (rounding order differs: reported, not required);
# 2. kiln-only A/B on the 0.5B and 1B (the 8B has no grid it covers), three rounds; 3. traces; 4. kiln gate under it.
set -u
T0=$(date +%s)
B=$PWD/target/kiln-s33
export KILN_CACHE_DIR=$PWD/.device/kc33b KILN_CUDA_INCLUDE=/usr/local/cuda/include
(cd .device/kc33b && xz -d -k -f *.xz)
S=$OUT/b-summary.txt
{ date -u; echo "commit $KILN_COMMIT"; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv; } > $S
el() { echo $(( $(date +%s) - T0 )); }
for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
  timeout 240 $B synth --shape $M --seed 1 --out target/synth/$M-seed1 > $OUT/log-$M.txt 2>&1
  echo "synth $M done at $(el) s" >> $S
done
IDS=$(seq -s, 1 128)
for M in qwen2.5-0.5b llama3.2-1b; do
  D=target/synth/$M-seed1
  for V in 0 1; do
    if [ $V = 1 ]; then E="KILN_GEMV_SPLITK=64 KILN_GEMV_SPLITK_SLOTS=264"; else E="KILN_X=0"; fi
    env $E timeout 45 $B run --model $D --prompt-ids $IDS --max-tokens 128 --temperature 0 --device cuda \
      > /tmp/ids-$M-$V.txt 2> /tmp/err-$M-$V.txt
    echo "run $M k=$V rc $? at $(el) s: $(md5sum < /tmp/ids-$M-$V.txt | cut -c1-12) $(wc -w < /tmp/ids-$M-$V.txt) ids" >> $S
    grep -a -i 'error\|panic\|tok/s\|trap\|illegal' /tmp/err-$M-$V.txt | head -3 | cut -c1-200 >> $S
  done
  if cmp -s /tmp/ids-$M-0.txt /tmp/ids-$M-1.txt; then echo "IDENTICAL $M" >> $S; else
    echo "DIFFER $M: first differing id at word $(cmp /tmp/ids-$M-0.txt /tmp/ids-$M-1.txt | head -1)" >> $S; fi
done
ab() {  # ab ROUND LIMIT
  for V in A K K64 K64S; do
    [ $(el) -gt $2 ] && { echo "skip $V round $1 at $(el) s" >> $S; continue; }
    case $V in
      A) E="KILN_X=0" ;;
      K) E="KILN_GEMV_SPLITK=1024" ;;
      K64) E="KILN_GEMV_SPLITK=64" ;;
      K64S) E="KILN_GEMV_SPLITK=64 KILN_GEMV_SPLITK_SLOTS=264" ;;
    esac
    echo "-- $V round $1 ($E) start $(el) s" >> $S
    env $E timeout 100 $B bench --shapes qwen2.5-0.5b,llama3.2-1b --synth-root target/synth --batches 1 \
      --contexts 128 --repeats 3 --fuse --out /tmp/b33b-$V-$1 > $OUT/bench-$V-$1.txt 2>&1
    echo "rc $? end $(el) s" >> $S
    grep -a -E '^(qwen|llama)[^ ]* +1 |read bandwidth:|rror' $OUT/bench-$V-$1.txt | head -8 >> $S
  done
}
ab 1 150
ab 2 220
ab 3 290
for MV in qwen2.5-0.5b:0 qwen2.5-0.5b:1 llama3.2-1b:1; do
  M=${MV%:*}; V=${MV#*:}
  [ $(el) -gt 330 ] && break
  if [ $V = 1 ]; then E="KILN_GEMV_SPLITK=64 KILN_GEMV_SPLITK_SLOTS=264"; else E="KILN_X=0"; fi
  D=target/synth/$M-seed1
  echo "== trace $M k=$V at $(el) s" >> $S
  env $E $B plan --model $D --fuse --decode-buckets 1 -o $OUT/$M-$V.plan >> $OUT/log-$M.txt 2>&1
  env $E KILN_NVRTC_DEFINES=KILN_TRACE=1 KILN_TRACE_OUT=/tmp/trace.bin timeout 60 $B run --model $D --plan $OUT/$M-$V.plan \
    --prompt-ids $IDS --max-tokens 256 --temperature 0 --device cuda > /tmp/traced.txt 2>&1
  grep -a '^\[kiln\]\|^kiln:' /tmp/traced.txt | cut -c1-200 >> $S
  python3 scripts/trace_summary.py /tmp/trace.bin $OUT/$M-$V.plan.txt --csv $OUT/launches-$M-$V.csv >> $S 2>&1
  rm -f /tmp/trace.bin $OUT/$M-$V.plan
done
if [ $(el) -lt 420 ]; then
  echo "== gate (KILN_GEMV_SPLITK=64 KILN_GEMV_SPLITK_SLOTS=264) at $(el) s" >> $S
  KILN_GEMV_SPLITK=64 KILN_GEMV_SPLITK_SLOTS=264 timeout 150 $B gate --synth-dir target/synth > $OUT/gate.log 2>&1
  echo "gate rc $? at $(el) s" >> $S
  grep -a -E 'PASS|FAIL|passed|checks' $OUT/gate.log | tail -40 >> $S
fi
echo "end $(el) s" >> $S
cd $OUT && tar czf extra.tgz bench-*.txt log-*.txt gate.log *.csv *.plan.txt 2>/dev/null; rm -f bench-*.txt log-*.txt *.csv *.plan.txt
ls -la $OUT >> $S
cat $S
