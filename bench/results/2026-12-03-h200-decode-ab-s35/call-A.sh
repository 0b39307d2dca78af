#!/bin/bash
# Session 35 call A. Binary kiln-s35 (84fb769: device-loop bodies planned in copies, KILN_LOOP_UNROLL, default 2;
# advance: a row reaching max_position leaves as padding). Variants by plan-time knob: U1 (one copy per pass, the
# loop before this commit), U2 (default), U3, U4.
# 1. ids (fused plans, --max-tokens 128: bursts of 64, 62 and a first-copy launch of 1) against session 34 call D's md5s
#    (adb8efb: 0.5B g fa75432c4925 s bf0b78a69569, 1B g 7b77fd2899f5 s 397e198de591, 8B g 3e62d770cd44 s 81a34a28704c);
# 2. kiln gate --checks 2,5 (default) and check 5 with U3; 3. kiln-only A/B U1..U4, two rounds; 4. the 1B's trace (U2).
set -u
T0=$(date +%s)
B=$PWD/target/kiln-s35
export KILN_CUDA_INCLUDE=/usr/local/cuda/include KILN_CACHE_DIR=$PWD/.device/kc35
for d in kc35 kc35t; do (cd .device/$d && xz -d -k -f *.xz); done
S=$OUT/a-summary.txt
{ date -u; echo "commit $KILN_COMMIT"; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv; } > $S
el() { echo $(( $(date +%s) - T0 )); }
IDS=$(seq -s, 1 128)
for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
  D=target/synth/$M-seed1
  timeout 240 $B synth --shape $M --seed 1 --out $D > $OUT/log-$M.txt 2>&1
  echo "synth $M done at $(el) s" >> $S
  for V in U2g U1g U4g U2s U1s; do
    U=${V:1:1}; if [ ${V:2:1} = g ]; then SMP="--temperature 0"; else SMP="--temperature 0.8 --top-k 40 --seed 5"; fi
    KILN_LOOP_UNROLL=$U timeout 60 $B run --model $D --fuse --prompt-ids $IDS --max-tokens 128 $SMP --device cuda > /tmp/ids-$M-$V.txt 2> /tmp/err-$M-$V.txt
    echo "run $M $V rc $? at $(el) s: $(md5sum < /tmp/ids-$M-$V.txt | cut -c1-12) $(wc -w < /tmp/ids-$M-$V.txt) ids" >> $S
    grep -a -i 'error\|panic\|trap\|illegal\|compil' /tmp/err-$M-$V.txt | head -3 | cut -c1-200 >> $S
  done
  for P in U2g:U1g U2g:U4g U2s:U1s; do
    a=${P%:*}; b=${P#*:}
    cmp -s /tmp/ids-$M-$a.txt /tmp/ids-$M-$b.txt && echo "IDENTICAL $a $b $M" >> $S || echo "DIFFER $a $b $M" >> $S
  done
done
echo "== gate checks 2,5 (U2) at $(el) s" >> $S
timeout 200 $B gate --synth-dir target/synth --checks 2,5 > $OUT/gate-u2.log 2>&1
echo "rc $? end $(el) s" >> $S; grep -a -E 'FAIL|kiln gate:' $OUT/gate-u2.log | tail -6 >> $S
echo "== gate check 5 (U3) at $(el) s" >> $S
KILN_LOOP_UNROLL=3 timeout 200 $B gate --synth-dir target/synth --checks 5 > $OUT/gate-u3.log 2>&1
echo "rc $? end $(el) s" >> $S; grep -a -E 'FAIL|kiln gate:' $OUT/gate-u3.log | tail -6 >> $S
ab() {  # ab ROUND LIMIT
  for U in 1 2 3 4; do
    [ $(el) -gt $2 ] && { echo "skip U$U round $1 at $(el) s" >> $S; continue; }
    echo "-- U$U round $1 start $(el) s" >> $S
    KILN_LOOP_UNROLL=$U timeout 150 $B bench --shapes qwen2.5-0.5b,llama3.2-1b,llama3.1-8b --synth-root target/synth --batches 1 \
      --contexts 128 --repeats 3 --fuse --out /tmp/b35a-U$U-$1 > $OUT/bench-U$U-$1.txt 2>&1
    echo "rc $? end $(el) s" >> $S
    grep -a -E '^(qwen|llama)[^ ]* +1 |read bandwidth:|rror' $OUT/bench-U$U-$1.txt | head -8 >> $S
  done
}
ab 1 330
ab 2 450
if [ $(el) -lt 520 ]; then
  M=llama3.2-1b; D=target/synth/$M-seed1
  echo "== trace $M U2 at $(el) s" >> $S
  $B plan --model $D --fuse --decode-buckets 1 -o $OUT/$M.plan >> $OUT/log-$M.txt 2>&1
  KILN_CACHE_DIR=$PWD/.device/kc35t KILN_NVRTC_DEFINES=KILN_TRACE=1 KILN_TRACE_OUT=/tmp/trace.bin timeout 40 $B run --model $D --plan $OUT/$M.plan \
    --prompt-ids $IDS --max-tokens 256 --temperature 0 --device cuda > /tmp/traced.txt 2>&1
  grep -a '^\[kiln\]\|^kiln:' /tmp/traced.txt | cut -c1-200 >> $S
  python3 scripts/trace_summary.py /tmp/trace.bin $OUT/$M.plan.txt --csv $OUT/launches-$M.csv >> $S 2>&1
  rm -f /tmp/trace.bin $OUT/$M.plan
fi
echo "end $(el) s" >> $S
cd $OUT && tar czf extra.tgz bench-*.txt log-*.txt gate-*.log *.csv *.plan.txt 2>/dev/null; rm -f bench-*.txt log-*.txt *.csv *.plan.txt
ls -la $OUT >> $S
cat $S
