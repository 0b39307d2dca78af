#!/bin/bash
# Session 42 call B: block traces (KILN_TRACE=1 tile-packed module) of a (main), b (carry) and n (b, no carry),
# 1B and 0.5B, `kiln run --temperature 0 --max-tokens 256`, scripts/trace_summary.py.
set -u
T0=$(date +%s)
mkdir -p target
for v in a b; do xz -d -c .device/bin/kiln-s42$v.xz > target/kiln-s42$v && chmod +x target/kiln-s42$v; (cd .device/kc42${v}t && xz -d -f *.xz); done
export KILN_CUDA_INCLUDE=/usr/local/cuda/include
S=$OUT/b-summary.txt
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; } > $S
el() { echo $(( $(date +%s) - T0 )); }
for M in qwen2.5-0.5b llama3.2-1b; do
  [ -f target/synth/$M-seed1/config.json ] || timeout 240 target/kiln-s42a synth --shape $M --seed 1 --out target/synth/$M-seed1 > $OUT/log-$M.txt 2>&1
  echo "synth $M ready at $(el) s" >> $S
done
IDS=$(seq -s, 1 128)
for M in llama3.2-1b qwen2.5-0.5b; do
  for V in a b n a b n; do
    [ $(el) -gt 520 ] && { echo "skip $M $V at $(el) s" >> $S; continue; }
    B=$V; C=""; [ $V = n ] && { B=b; C=0; }
    D=target/synth/$M-seed1; N=$M-$V
    echo "== trace $N at $(el) s" >> $S
    KILN_LOOP_CARRY_GATHER=$C target/kiln-s42$B plan --model $D --fuse --decode-buckets 1 -o $OUT/$N.plan >> $OUT/log-$M.txt 2>&1
    rm -f /tmp/trace.bin
    KILN_NVRTC_DEFINES=KILN_TRACE=1 KILN_CACHE_DIR=$PWD/.device/kc42${B}t KILN_TRACE_OUT=/tmp/trace.bin timeout 60 target/kiln-s42$B run --model $D --plan $OUT/$N.plan \
      --prompt-ids $IDS --max-tokens 256 --temperature 0 --device cuda > /tmp/traced.txt 2>&1
    echo "rc $? ids $(md5sum < /tmp/traced.txt | cut -c1-12)" >> $S
    python3 scripts/trace_summary.py /tmp/trace.bin $OUT/$N.plan.txt --csv $OUT/launches-$N-$(el).csv >> $S 2>&1
    rm -f $OUT/$N.plan
  done
done
echo "end $(el) s" >> $S
cd $OUT && gzip -f launches-*.csv 2>/dev/null; tar czf extra.tgz log-*.txt launches-*.csv.gz *.plan.txt 2>/dev/null; rm -f log-*.txt launches-*.csv.gz *.plan.txt
cat $S
