#!/bin/bash
# Session 36 call A. Binary kiln-s36 at $KILN_COMMIT (fusion rewrite 9: the device loop's greedy argmax carried by the
# vocabulary projection, a 64-bit key per row folded by atomic max; sample_advance reads the key). Variants by plan-time
# knob: A1 (default, the key) and A0 (KILN_FUSE_ARGMAX=0: the sampler scans the logits, as 84fb769).
# 1. ids (fused plans, --max-tokens 128) against session 34/35's md5s (0.5B g fa75432c4925 s bf0b78a69569, 1B g
#    7b77fd2899f5 s 397e198de591, 8B g 3e62d770cd44 s 81a34a28704c); 2. kiln gate (all checks, default);
# 3. kiln-only A/B A0 / A1, two rounds; 4. block traces of the 1B and 0.5B (A1).
set -u
T0=$(date +%s)
B=$PWD/target/kiln-s36
export KILN_CUDA_INCLUDE=/usr/local/cuda/include KILN_CACHE_DIR=$PWD/.device/kc36
for d in kc36 kc36t; do (cd .device/$d && xz -d -k -f *.xz); done
S=$OUT/a-summary.txt
{ date -u; echo "commit $KILN_COMMIT"; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv; } > $S
el() { echo $(( $(date +%s) - T0 )); }
IDS=$(seq -s, 1 128)
for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
  D=target/synth/$M-seed1
  [ -f $D/config.json ] || timeout 240 $B synth --shape $M --seed 1 --out $D > $OUT/log-$M.txt 2>&1
  echo "synth $M done at $(el) s" >> $S
  for V in A1g A1s A0g; do
    A=${V:1:1}; if [ ${V:2:1} = g ]; then SMP="--temperature 0"; else SMP="--temperature 0.8 --top-k 40 --seed 5"; fi
    KILN_FUSE_ARGMAX=$A timeout 60 $B run --model $D --fuse --prompt-ids $IDS --max-tokens 128 $SMP --device cuda > /tmp/ids-$M-$V.txt 2> /tmp/err-$M-$V.txt
    echo "run $M $V rc $? at $(el) s: $(md5sum < /tmp/ids-$M-$V.txt | cut -c1-12) $(wc -w < /tmp/ids-$M-$V.txt) ids" >> $S
    grep -a -i 'error\|panic\|trap\|illegal\|compil' /tmp/err-$M-$V.txt | head -3 | cut -c1-200 >> $S
  done
  cmp -s /tmp/ids-$M-A1g.txt /tmp/ids-$M-A0g.txt && echo "IDENTICAL A1g A0g $M" >> $S || echo "DIFFER A1g A0g $M" >> $S
done
echo "== gate (A1) at $(el) s" >> $S
timeout 200 $B gate --synth-dir target/synth > $OUT/gate.log 2>&1
echo "rc $? end $(el) s" >> $S; grep -a -E 'FAIL|kiln gate:' $OUT/gate.log | tail -6 >> $S
ab() {  # ab ROUND LIMIT
  for A in 0 1; do
    [ $(el) -gt $2 ] && { echo "skip A$A round $1 at $(el) s" >> $S; continue; }
    echo "-- A$A round $1 start $(el) s" >> $S
    KILN_FUSE_ARGMAX=$A timeout 150 $B bench --shapes qwen2.5-0.5b,llama3.2-1b,llama3.1-8b --synth-root target/synth --batches 1 \
      --contexts 128 --repeats 3 --fuse --out /tmp/b36a-A$A-$1 > $OUT/bench-A$A-$1.txt 2>&1
    echo "rc $? end $(el) s" >> $S
    grep -a -E '^(qwen|llama)[^ ]* +1 |read bandwidth:|rror' $OUT/bench-A$A-$1.txt | head -8 >> $S
  done
}
ab 1 380
ab 2 450
for M in llama3.2-1b qwen2.5-0.5b; do
  [ $(el) -gt 530 ] && break
  D=target/synth/$M-seed1
  echo "== trace $M A1 at $(el) s" >> $S
  $B plan --model $D --fuse --decode-buckets 1 -o $OUT/$M.plan >> $OUT/log-$M.txt 2>&1
  KILN_CACHE_DIR=$PWD/.device/kc36t KILN_NVRTC_DEFINES=KILN_TRACE=1 KILN_TRACE_OUT=/tmp/trace.bin timeout 40 $B run --model $D --plan $OUT/$M.plan \
    --prompt-ids $IDS --max-tokens 256 --temperature 0 --device cuda > /tmp/traced.txt 2>&1
  grep -a '^\[kiln\]\|^kiln:' /tmp/traced.txt | cut -c1-200 >> $S
  python3 scripts/trace_summary.py /tmp/trace.bin $OUT/$M.plan.txt --csv $OUT/launches-$M.csv >> $S 2>&1
  rm -f /tmp/trace.bin $OUT/$M.plan
done
echo "end $(el) s" >> $S
cd $OUT && tar czf extra.tgz bench-*.txt log-*.txt gate.log *.csv *.plan.txt 2>/dev/null; rm -f bench-*.txt log-*.txt *.csv *.plan.txt
ls -la $OUT >> $S
cat $S
