#!/bin/bash
# Session 40 call D. M = kiln-s40m (main b554d4f), Q = kiln-s40q (branch s40-qkv-lane: qkv_rope's early lane work,
# step-block reads and RoPE angle, moved after the ring's first weight loads, inside the x operand's prefetch()).
# 1. greedy / sampled ids of Q against the references; 2. kiln-only A/B M vs Q, batch 1, context 128, two rounds;
# 3. block traces of Q (1B, 0.5B, 8B) with the per-block analysis.
set -u
T0=$(date +%s)
mkdir -p target
for b in kiln-s40m kiln-s40q; do xz -d -c .device/bin/$b.xz > target/$b && chmod +x target/$b; done
export KILN_CUDA_INCLUDE=/usr/local/cuda/include
for d in kc40m kc40q kc40qt; do (cd .device/$d && xz -d -f *.xz); done
S=$OUT/d-summary.txt
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv; } > $S
el() { echo $(( $(date +%s) - T0 )); }
for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
  [ -f target/synth/$M-seed1/config.json ] || timeout 240 target/kiln-s40m synth --shape $M --seed 1 --out target/synth/$M-seed1 > $OUT/log-$M.txt 2>&1
  echo "synth $M ready at $(el) s" >> $S
done
IDS=$(seq -s, 1 128)
for MR in qwen2.5-0.5b:fa75432c4925 llama3.2-1b:7b77fd2899f5 llama3.1-8b:3e62d770cd44; do
  M=${MR%:*}; R=${MR#*:}
  echo "ids $M greedy Q: $(KILN_CACHE_DIR=$PWD/.device/kc40q timeout 60 target/kiln-s40q run --model target/synth/$M-seed1 --fuse --prompt-ids $IDS --max-tokens 128 --temperature 0 --device cuda 2>/dev/null | md5sum | cut -c1-12) (ref $R)" >> $S
done
echo "ids 1B sampled Q: $(KILN_CACHE_DIR=$PWD/.device/kc40q timeout 40 target/kiln-s40q run --model target/synth/llama3.2-1b-seed1 --fuse --prompt-ids $IDS --max-tokens 128 --temperature 0.8 --top-k 40 --seed 5 --device cuda 2>/dev/null | md5sum | cut -c1-12) (ref 397e198de591)" >> $S
echo "ids 0.5B sampled Q: $(KILN_CACHE_DIR=$PWD/.device/kc40q timeout 40 target/kiln-s40q run --model target/synth/qwen2.5-0.5b-seed1 --fuse --prompt-ids $IDS --max-tokens 128 --temperature 0.8 --top-k 40 --seed 5 --device cuda 2>/dev/null | md5sum | cut -c1-12) (ref bf0b78a69569)" >> $S
i=0
for V in m q q m; do
  i=$((i+1)); [ $(el) -gt 400 ] && { echo "skip run $i at $(el) s" >> $S; continue; }
  echo "-- run $i $V start $(el) s" >> $S
  KILN_CACHE_DIR=$PWD/.device/kc40$V timeout 60 target/kiln-s40$V bench --shapes qwen2.5-0.5b,llama3.2-1b,llama3.1-8b --synth-root target/synth --batches 1 --contexts 128 \
    --repeats 3 --fuse --out /tmp/b40d-$i > $OUT/bench-$i-$V.txt 2>&1
  echo "rc $? end $(el) s" >> $S
  grep -a -E '^(qwen|llama)[^ ]* +1 |read bandwidth:|rror' $OUT/bench-$i-$V.txt | head -4 | cut -c1-120 >> $S
done
for M in llama3.2-1b qwen2.5-0.5b llama3.1-8b; do
  [ $(el) -gt 520 ] && break
  D=target/synth/$M-seed1; N=$M-s40q
  echo "== trace $N at $(el) s" >> $S
  target/kiln-s40q plan --model $D --fuse --decode-buckets 1 -o $OUT/$N.plan >> $OUT/log-$M.txt 2>&1
  KILN_NVRTC_DEFINES=KILN_TRACE=1 KILN_CACHE_DIR=$PWD/.device/kc40qt KILN_TRACE_OUT=/tmp/trace.bin timeout 90 target/kiln-s40q run --model $D --plan $OUT/$N.plan \
    --prompt-ids $IDS --max-tokens 256 --temperature 0 --device cuda > /tmp/traced.txt 2>&1
  echo "rc $?" >> $S
  python3 scripts/trace_summary.py /tmp/trace.bin $OUT/$N.plan.txt --csv $OUT/launches-$N.csv >> $S 2>&1
  case $M in llama3.2-1b) W=192;; qwen2.5-0.5b) W=72;; *) W=384;; esac
  python3 .device/rawtrace.py /tmp/trace.bin 0 $W >> $S 2>&1
  rm -f /tmp/trace.bin $OUT/$N.plan
done
echo "end $(el) s" >> $S
cd $OUT && gzip -f launches-*.csv; tar czf extra.tgz log-*.txt bench-*.txt launches-*.csv.gz *.plan.txt 2>/dev/null; rm -f log-*.txt bench-*.txt launches-*.csv.gz *.plan.txt
cat $S
