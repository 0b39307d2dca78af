#!/bin/bash
# Session 32 call B: call A's shared-memory-ring `fused_linear` (`_sr`) lost everywhere; hypothesis: its
# 106 KB of dynamic shared memory puts its SMs in another L1/shared carveout than the other kernels,
# and an SM changes carveout only when idle, so no launch overlaps it. KILN_CARVEOUT=100 gives every
# kernel the same carveout. kiln-only A/B, two rounds: A default | C carveout 100 | R1C ring on
# 512-thread launches + C | R3C ring on every no-norm fused_linear + C | R1D6C R1C with a 6-deep ring;
# then block traces of the 1B under C and R1C and the 0.5B under R3C.
set -u
T0=$(date +%s)
B=$PWD/target/kiln-s32
export KILN_CACHE_DIR=$PWD/.device/kc32 KILN_CUDA_INCLUDE=/usr/local/cuda/include
(cd .device/kc32 && xz -d -k -f *.xz)
S=$OUT/b-summary.txt
{ date -u; echo "commit $KILN_COMMIT"; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv; } > $S
el() { echo $(( $(date +%s) - T0 )); }
for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
  timeout 240 $B synth --shape $M --seed 1 --out target/synth/$M-seed1 > $OUT/log-$M.txt 2>&1
  echo "synth $M done at $(el) s" >> $S
done
IDS=$(seq -s, 1 128)
ab() {  # ab ROUND LIMIT
  for V in A C R1C R3C R1D6C; do
    [ $(el) -gt $2 ] && { echo "skip $V round $1 at $(el) s" >> $S; continue; }
    case $V in
      A) E="KILN_X=0" ;;
      C) E="KILN_CARVEOUT=100" ;;
      R1C) E="KILN_GEMV_RING=1 KILN_CARVEOUT=100" ;;
      R3C) E="KILN_GEMV_RING=3 KILN_CARVEOUT=100" ;;
      R1D6C) E="KILN_GEMV_RING=1 KILN_CARVEOUT=100 KILN_GEMV_RING_DEPTH=6 KILN_NVRTC_DEFINES=KILN_GEMV_RING_DEPTH=6" ;;
    esac
    echo "-- $V round $1 ($E) start $(el) s" >> $S
    env $E timeout 150 $B bench --shapes qwen2.5-0.5b,llama3.2-1b,llama3.1-8b --synth-root target/synth --batches 1 \
      --contexts 128 --repeats 3 --fuse --out /tmp/b32-$V-$1 > $OUT/bench-$V-$1.txt 2>&1
    echo "rc $? end $(el) s" >> $S
    grep -a -E '^(qwen|llama)[^ ]* +1 |read bandwidth:|rror' $OUT/bench-$V-$1.txt | head -8 >> $S
  done
}
ab 1 260
ab 2 400
for MV in llama3.2-1b:0:100 llama3.2-1b:1:100 qwen2.5-0.5b:3:100 llama3.1-8b:3:100; do
  IFS=: read M V CV <<< "$MV"
  [ $(el) -gt 520 ] && break
  D=target/synth/$M-seed1
  echo "== trace $M ring=$V carveout=$CV at $(el) s" >> $S
  KILN_GEMV_RING=$V $B plan --model $D --fuse --decode-buckets 1 -o $OUT/$M-$V.plan >> $OUT/log-$M.txt 2>&1
  KILN_CARVEOUT=$CV KILN_NVRTC_DEFINES=KILN_TRACE=1 KILN_TRACE_OUT=/tmp/trace.bin timeout 60 $B run --model $D \
    --plan $OUT/$M-$V.plan --prompt-ids $IDS --max-tokens 256 --temperature 0 --device cuda > /tmp/traced.txt 2>&1
  grep -a '^\[kiln\]\|^kiln:' /tmp/traced.txt | cut -c1-200 >> $S
  python3 scripts/trace_summary.py /tmp/trace.bin $OUT/$M-$V.plan.txt --csv $OUT/launches-$M-$V-c$CV.csv >> $S 2>&1
  rm -f /tmp/trace.bin $OUT/$M-$V.plan
done
echo "end $(el) s" >> $S
cd $OUT && tar czf extra.tgz bench-*.txt log-*.txt *.csv *.plan.txt 2>/dev/null; rm -f bench-*.txt log-*.txt *.csv *.plan.txt
ls -la $OUT >> $S
cat $S
