#!/bin/bash
# Session 32 call A: the shared-memory-ring `fused_linear` (`_sr`, plan knob KILN_GEMV_RING, 64 registers).
# 1. greedy token ids, default vs KILN_GEMV_RING=3, on the three shapes (must be identical: same bits);
# 2. kiln-only A/B, two rounds: A default | R1 ring on 512-thread launches | R3 ring on all no-norm fused
#    | R3D6 as R3 with a 6-deep ring; 3. block traces (1B, 0.5B) of R1 / R3; 4. kiln gate under R3.
set -u
T0=$(date +%s)
B=$PWD/target/kiln-s32
export KILN_CACHE_DIR=$PWD/.device/kc32 KILN_CUDA_INCLUDE=/usr/local/cuda/include
(cd .device/kc32 && xz -d -k -f *.xz)
S=$OUT/a-summary.txt
{ date -u; echo "commit $KILN_COMMIT"; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv; } > $S
el() { echo $(( $(date +%s) - T0 )); }
for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
  timeout 240 $B synth --shape $M --seed 1 --out target/synth/$M-seed1 > $OUT/log-$M.txt 2>&1
  echo "synth $M done at $(el) s" >> $S
done
IDS=$(seq -s, 1 128)
for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
  D=target/synth/$M-seed1
  for V in 0 3; do
    KILN_GEMV_RING=$V timeout 100 $B run --model $D --prompt-ids $IDS --max-tokens 128 --temperature 0 --device cuda \
      > /tmp/ids-$M-$V.txt 2> /tmp/err-$M-$V.txt
    echo "run $M ring=$V rc $? at $(el) s: $(md5sum < /tmp/ids-$M-$V.txt | cut -c1-12) $(wc -w < /tmp/ids-$M-$V.txt) ids" >> $S
    grep -a -i 'error\|panic\|tok/s' /tmp/err-$M-$V.txt | head -3 | cut -c1-200 >> $S
  done
  cmp -s /tmp/ids-$M-0.txt /tmp/ids-$M-3.txt && echo "IDENTICAL $M" >> $S || echo "DIFFER $M" >> $S
done
ab() {  # ab ROUND LIMIT
  for V in A R1 R3 R3D6; do
    [ $(el) -gt $2 ] && { echo "skip $V round $1 at $(el) s" >> $S; continue; }
    case $V in
      A) E="KILN_X=0" ;;
      R1) E="KILN_GEMV_RING=1" ;;
      R3) E="KILN_GEMV_RING=3" ;;
      R3D6) E="KILN_GEMV_RING=3 KILN_GEMV_RING_DEPTH=6 KILN_NVRTC_DEFINES=KILN_GEMV_RING_DEPTH=6" ;;
    esac
    echo "-- $V round $1 ($E) start $(el) s" >> $S
    env $E timeout 150 $B bench --shapes qwen2.5-0.5b,llama3.2-1b,llama3.1-8b --synth-root target/synth --batches 1 \
      --contexts 128 --repeats 3 --fuse --out /tmp/b32-$V-$1 > $OUT/bench-$V-$1.txt 2>&1
    echo "rc $? end $(el) s" >> $S
    grep -a -E '^(qwen|llama)[^ ]* +1 |read bandwidth:|rror' $OUT/bench-$V-$1.txt | head -8 >> $S
  done
}
ab 1 330
ab 2 420
for MV in llama3.2-1b:1 llama3.2-1b:3 qwen2.5-0.5b:3; do
  M=${MV%:*}; V=${MV#*:}
  [ $(el) -gt 500 ] && break
  D=target/synth/$M-seed1
  echo "== trace $M ring=$V at $(el) s" >> $S
  KILN_GEMV_RING=$V $B plan --model $D --fuse --decode-buckets 1 -o $OUT/$M-$V.plan >> $OUT/log-$M.txt 2>&1
  KILN_NVRTC_DEFINES=KILN_TRACE=1 KILN_TRACE_OUT=/tmp/trace.bin timeout 60 $B run --model $D --plan $OUT/$M-$V.plan \
    --prompt-ids $IDS --max-tokens 256 --temperature 0 --device cuda > /tmp/traced.txt 2>&1
  grep -a '^\[kiln\]\|^kiln:' /tmp/traced.txt | cut -c1-200 >> $S
  python3 scripts/trace_summary.py /tmp/trace.bin $OUT/$M-$V.plan.txt --csv $OUT/launches-$M-$V.csv >> $S 2>&1
  rm -f /tmp/trace.bin $OUT/$M-$V.plan
done
if [ $(el) -lt 520 ]; then
  echo "== gate ring=3 start $(el) s" >> $S
  KILN_GEMV_RING=3 timeout 70 $B gate --synth-dir target/synth > $OUT/gate.log 2>&1
  echo "rc $? end $(el) s" >> $S; tail -3 $OUT/gate.log >> $S
fi
echo "end $(el) s" >> $S
cd $OUT && tar czf extra.tgz bench-*.txt log-*.txt gate.log *.csv *.plan.txt 2>/dev/null; rm -f bench-*.txt log-*.txt *.csv *.plan.txt gate.log
ls -la $OUT >> $S
cat $S
