#!/bin/bash
# Session 41 call C. M = kiln-s41m (main 9d27c4e), Y = 6a56fe9 (attention_cluster g1 capped at 72 registers:
# an o block fits beside two attention blocks). 1. ids of Y; 2. kiln-only bench batch 1 context 128, m y y m;
# 3. gate of Y if its 1B mean beats M's; 4. trace of Y's 1B (KILN_TRACE=1 cubin) if time is left.
set -u
T0=$(date +%s)
mkdir -p target
for v in m y; do xz -d -c .device/bin/kiln-s41$v.xz > target/kiln-s41$v && chmod +x target/kiln-s41$v; (cd .device/kc41$v && xz -d -f *.xz); done
[ -d .device/kc41yt ] && (cd .device/kc41yt && xz -d -f *.xz)
export KILN_CUDA_INCLUDE=/usr/local/cuda/include
S=$OUT/c-summary.txt
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv; } > $S
el() { echo $(( $(date +%s) - T0 )); }
for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
  [ -f target/synth/$M-seed1/config.json ] || timeout 240 target/kiln-s41m synth --shape $M --seed 1 --out target/synth/$M-seed1 > $OUT/log-$M.txt 2>&1
  echo "synth $M ready at $(el) s" >> $S
done
IDS=$(seq -s, 1 128)
export KILN_CACHE_DIR=$PWD/.device/kc41y
for MR in qwen2.5-0.5b:fa75432c4925 llama3.2-1b:7b77fd2899f5 llama3.1-8b:3e62d770cd44; do
  M=${MR%:*}; R=${MR#*:}
  echo "ids $M greedy y: $(timeout 60 target/kiln-s41y run --model target/synth/$M-seed1 --fuse --prompt-ids $IDS --max-tokens 128 --temperature 0 --device cuda 2>/dev/null | md5sum | cut -c1-12) (ref $R)" >> $S
done
echo "ids 1B sampled y: $(timeout 40 target/kiln-s41y run --model target/synth/llama3.2-1b-seed1 --fuse --prompt-ids $IDS --max-tokens 128 --temperature 0.8 --top-k 40 --seed 5 --device cuda 2>/dev/null | md5sum | cut -c1-12) (ref 397e198de591)" >> $S
unset KILN_CACHE_DIR
i=0
for V in m y y m; do
  i=$((i+1)); [ $(el) -gt 400 ] && { echo "skip run $i at $(el) s" >> $S; continue; }
  echo "-- run $i $V start $(el) s" >> $S
  KILN_CACHE_DIR=$PWD/.device/kc41$V timeout 90 target/kiln-s41$V bench --shapes qwen2.5-0.5b,llama3.2-1b,llama3.1-8b --synth-root target/synth --batches 1 --contexts 128 \
    --repeats 3 --fuse --out /tmp/b41c-$i > $OUT/bench-$i-$V.txt 2>&1
  echo "rc $? end $(el) s" >> $S
  grep -a -E '^(qwen|llama)[^ ]* +1 |read bandwidth:|rror' $OUT/bench-$i-$V.txt | head -4 | cut -c1-120 >> $S
done
for V in m y; do
  echo "1B mean $V $(cat $OUT/bench-*-$V.txt | awk '/^llama3.2-1b +1 +128/ {s+=$4; n++} END {if (n) printf "%.1f", s/n}')" \
    "0.5B $(cat $OUT/bench-*-$V.txt | awk '/^qwen2.5-0.5b +1 +128/ {s+=$4; n++} END {if (n) printf "%.1f", s/n}')" \
    "8B $(cat $OUT/bench-*-$V.txt | awk '/^llama3.1-8b +1 +128/ {s+=$4; n++} END {if (n) printf "%.1f", s/n}')" >> $S
done
ym=$(cat $OUT/bench-*-y.txt | awk '/^llama3.2-1b +1 +128/ {s+=$4; n++} END {printf "%.1f", s/n}')
mm=$(cat $OUT/bench-*-m.txt | awk '/^llama3.2-1b +1 +128/ {s+=$4; n++} END {printf "%.1f", s/n}')
if awk -v a=$ym -v b=$mm 'BEGIN {exit !(a > b * 1.002)}' && [ $(el) -lt 470 ]; then
  echo "== gate y start $(el) s" >> $S
  KILN_CACHE_DIR=$PWD/.device/kc41y timeout 110 target/kiln-s41y gate --synth-dir target/synth > $OUT/gate.log 2>&1
  echo "rc $? end $(el) s" >> $S; grep -a -E 'FAIL|kiln gate:' $OUT/gate.log | tail -6 >> $S
fi
if [ -d .device/kc41yt ] && [ $(el) -lt 540 ]; then
  M=llama3.2-1b; D=target/synth/$M-seed1; N=$M-y
  echo "== trace $N at $(el) s" >> $S
  target/kiln-s41y plan --model $D --fuse --decode-buckets 1 -o $OUT/$N.plan >> $OUT/log-$M.txt 2>&1
  KILN_NVRTC_DEFINES=KILN_TRACE=1 KILN_CACHE_DIR=$PWD/.device/kc41yt KILN_TRACE_OUT=/tmp/trace.bin timeout 40 target/kiln-s41y run --model $D --plan $OUT/$N.plan \
    --prompt-ids $IDS --max-tokens 256 --temperature 0 --device cuda > /tmp/traced.txt 2>&1
  echo "rc $?" >> $S
  python3 scripts/trace_summary.py /tmp/trace.bin $OUT/$N.plan.txt --csv $OUT/launches-$N.csv >> $S 2>&1
  rm -f $OUT/$N.plan
fi
echo "end $(el) s" >> $S
cd $OUT && gzip -f launches-*.csv 2>/dev/null; tar czf extra.tgz log-*.txt bench-*.txt gate.log launches-*.csv.gz *.plan.txt 2>/dev/null; rm -f log-*.txt bench-*.txt launches-*.csv.gz *.plan.txt
cat $S
