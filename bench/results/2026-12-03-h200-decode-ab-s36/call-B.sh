#!/bin/bash
# Session 36 call B. Binary kiln-s36c at $KILN_COMMIT (rewrite 9's key with the filter: a block folds its key in only
# where it beats the key read at the start of its epilogue, KILN_ARGMAX_FILTER=1). Variants: A0 (KILN_FUSE_ARGMAX=0,
# the scan, plan-time knob), A1 (default: key + filter), F0 (key without the filter: KILN_NVRTC_DEFINES=KILN_ARGMAX_FILTER=0,
# call A's kernel). 1. ids against the reference md5s; 2. kiln gate (all checks); 3. kiln-only A/B, two rounds;
# 4. block traces of the 1B and 0.5B (A1), and the 1B's A0 for the logits GEMV without atomics.
set -u
T0=$(date +%s)
B=$PWD/target/kiln-s36c
export KILN_CUDA_INCLUDE=/usr/local/cuda/include KILN_CACHE_DIR=$PWD/.device/kc36c
for d in kc36c kc36cf kc36ct; do (cd .device/$d && xz -d -k -f *.xz); done
S=$OUT/b-summary.txt
{ date -u; echo "commit $KILN_COMMIT"; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv; } > $S
el() { echo $(( $(date +%s) - T0 )); }
IDS=$(seq -s, 1 128)
for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
  D=target/synth/$M-seed1
  [ -f $D/config.json ] || timeout 240 $B synth --shape $M --seed 1 --out $D > $OUT/log-$M.txt 2>&1
  echo "synth $M ready at $(el) s" >> $S
  for V in g s; do
    if [ $V = g ]; then SMP="--temperature 0"; else SMP="--temperature 0.8 --top-k 40 --seed 5"; fi
    timeout 60 $B run --model $D --fuse --prompt-ids $IDS --max-tokens 128 $SMP --device cuda > /tmp/ids-$M-$V.txt 2> /tmp/err-$M-$V.txt
    echo "run $M A1$V rc $? at $(el) s: $(md5sum < /tmp/ids-$M-$V.txt | cut -c1-12) $(wc -w < /tmp/ids-$M-$V.txt) ids" >> $S
    grep -a -i 'error\|panic\|trap\|illegal\|compil' /tmp/err-$M-$V.txt | head -3 | cut -c1-200 >> $S
  done
done
echo "== gate (A1) at $(el) s" >> $S
timeout 200 $B gate --synth-dir target/synth > $OUT/gate.log 2>&1
echo "rc $? end $(el) s" >> $S; grep -a -E 'FAIL|kiln gate:' $OUT/gate.log | tail -6 >> $S
ab() {  # ab ROUND LIMIT
  for V in A0 A1 F0; do
    [ $(el) -gt $2 ] && { echo "skip $V round $1 at $(el) s" >> $S; continue; }
    echo "-- $V round $1 start $(el) s" >> $S
    case $V in
      A0) E="KILN_FUSE_ARGMAX=0" ;;
      A1) E="KILN_FUSE_ARGMAX=1" ;;
      F0) E="KILN_NVRTC_DEFINES=KILN_ARGMAX_FILTER=0 KILN_CACHE_DIR=$PWD/.device/kc36cf" ;;
    esac
    env $E timeout 150 $B bench --shapes qwen2.5-0.5b,llama3.2-1b,llama3.1-8b --synth-root target/synth --batches 1 \
      --contexts 128 --repeats 3 --fuse --out /tmp/b36b-$V-$1 > $OUT/bench-$V-$1.txt 2>&1
    echo "rc $? end $(el) s" >> $S
    grep -a -E '^(qwen|llama)[^ ]* +1 |read bandwidth:|rror' $OUT/bench-$V-$1.txt | head -8 >> $S
  done
}
ab 1 420
ab 2 500
for MV in llama3.2-1b:1 qwen2.5-0.5b:1 llama3.2-1b:0; do
  [ $(el) -gt 550 ] && break
  M=${MV%:*}; A=${MV#*:}; D=target/synth/$M-seed1
  echo "== trace $M A$A at $(el) s" >> $S
  KILN_FUSE_ARGMAX=$A $B plan --model $D --fuse --decode-buckets 1 -o $OUT/$M-A$A.plan >> $OUT/log-$M.txt 2>&1
  KILN_CACHE_DIR=$PWD/.device/kc36ct KILN_NVRTC_DEFINES=KILN_TRACE=1 KILN_TRACE_OUT=/tmp/trace.bin timeout 40 $B run --model $D --plan $OUT/$M-A$A.plan \
    --prompt-ids $IDS --max-tokens 256 --temperature 0 --device cuda > /tmp/traced.txt 2>&1
  grep -a '^\[kiln\]\|^kiln:' /tmp/traced.txt | cut -c1-200 >> $S
  python3 scripts/trace_summary.py /tmp/trace.bin $OUT/$M-A$A.plan.txt --csv $OUT/launches-$M-A$A.csv >> $S 2>&1
  rm -f /tmp/trace.bin $OUT/$M-A$A.plan
done
echo "end $(el) s" >> $S
cd $OUT && tar czf extra.tgz bench-*.txt log-*.txt gate.log *.csv *.plan.txt 2>/dev/null; rm -f bench-*.txt log-*.txt *.csv *.plan.txt
ls -la $OUT >> $S
cat $S
