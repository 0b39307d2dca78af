#!/bin/bash
# Session 40 call B. Block traces (KILN_TRACE=1 kernels) of main (kiln-s40m = b554d4f) on the three shapes, and of
# the tail patch (kiln-s40 = 97e5b42) with KILN_L2_PREFETCH_TAIL=65536 on the 1B and 0.5B: where a step's time goes now.
set -u
T0=$(date +%s)
mkdir -p target
for b in kiln-s40m kiln-s40; do xz -d -c .device/bin/$b.xz > target/$b && chmod +x target/$b; done
export KILN_CUDA_INCLUDE=/usr/local/cuda/include KILN_NVRTC_DEFINES=KILN_TRACE=1
(cd .device/kc40tm && xz -d -f *.xz); (cd .device/kc40tt && xz -d -f *.xz)
S=$OUT/b-summary.txt
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv; } > $S
el() { echo $(( $(date +%s) - T0 )); }
for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
  [ -f target/synth/$M-seed1/config.json ] || timeout 240 target/kiln-s40m synth --shape $M --seed 1 --out target/synth/$M-seed1 > $OUT/log-$M.txt 2>&1
  echo "synth $M ready at $(el) s" >> $S
done
IDS=$(seq -s, 1 128)
for R in s40m:kc40tm:llama3.2-1b: s40m:kc40tm:qwen2.5-0.5b: s40m:kc40tm:llama3.1-8b: s40:kc40tt:llama3.2-1b:65536 s40:kc40tt:qwen2.5-0.5b:65536 s40m:kc40tm:llama3.2-1b:; do
  IFS=: read BN CD M TAIL <<< "$R"
  [ $(el) -gt 500 ] && break
  B=$PWD/target/kiln-$BN; D=target/synth/$M-seed1; N=$M-$BN${TAIL:+-tail$TAIL}
  echo "== trace $N at $(el) s" >> $S
  KILN_L2_PREFETCH_TAIL=$TAIL $B plan --model $D --fuse --decode-buckets 1 -o $OUT/$N.plan >> $OUT/log-$M.txt 2>&1
  KILN_CACHE_DIR=$PWD/.device/$CD KILN_TRACE_OUT=/tmp/trace.bin timeout 90 $B run --model $D --plan $OUT/$N.plan \
    --prompt-ids $IDS --max-tokens 256 --temperature 0 --device cuda > /tmp/traced.txt 2>&1
  echo "rc $? ids $(head -c 100000 /tmp/traced.txt | grep -a -v '^\[kiln\]\|^kiln:' | md5sum | cut -c1-12)" >> $S
  grep -a '^\[kiln\]\|^kiln:' /tmp/traced.txt | cut -c1-200 >> $S
  python3 scripts/trace_summary.py /tmp/trace.bin $OUT/$N.plan.txt --csv $OUT/launches-$N.csv >> $S 2>&1
  rm -f /tmp/trace.bin $OUT/$N.plan
done
echo "end $(el) s" >> $S
cd $OUT && gzip -f launches-*.csv; tar czf extra.tgz log-*.txt launches-*.csv.gz *.plan.txt 2>/dev/null; rm -f log-*.txt launches-*.csv.gz *.plan.txt
cat $S
