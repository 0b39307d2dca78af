#!/bin/bash
# Session 46, third call: (1) kernel_check --only out_norm with the check fixed to compare each stats variant with
# the plain GEMV of the same launch (call A's two failures); (2) block traces (KILN_TRACE=1 kernels) of the 0.5B with
# KILN_FUSE_OUTPUT_NORM off and on: where the 0.5B's -1.7% goes. Carry [".device/bin/kiln-s46.xz", ".device/kct46",
# ".device/kcc45"] (main f628a5f's binary; kct46 its tile-packed module compiled with KILN_TRACE=1; kcc45 kernel_check's
# default unit, kernels/ unchanged since 2fbc52d).
set -u
T0=$(date +%s)
mkdir -p target
xz -d -c .device/bin/kiln-s46.xz > target/kiln && chmod +x target/kiln
(cd .device/kct46 && xz -d -f *.xz); (cd .device/kcc45 && xz -d -f *.xz)
export KILN_CUDA_INCLUDE=/usr/local/cuda/include
S=$OUT/t-summary.txt
{ date -u; target/kiln --version; nvidia-smi --query-gpu=name,driver_version --format=csv; } > $S
el() { echo $(( $(date +%s) - T0 )); }
KILN_CHECK_CACHE=$PWD/.device/kcc45 timeout 120 python3 scripts/kernel_check.py --dtypes bf16 --only out_norm > $OUT/kcheck-out_norm.txt 2>&1
echo "kernel_check rc $? at $(el) s" >> $S; grep -a -E "FAIL|passed|_o3 8x4096" $OUT/kcheck-out_norm.txt | tail -8 >> $S
M=qwen2.5-0.5b; D=target/synth/$M-seed1
[ -f $D/config.json ] || timeout 120 target/kiln synth --shape $M --seed 1 --out $D > $OUT/log-synth.txt 2>&1
echo "synth at $(el) s" >> $S
IDS=$(seq -s, 1 128)
for K in 0 1; do
  N=$M-outnorm$K
  echo "== trace $N at $(el) s" >> $S
  KILN_FUSE_OUTPUT_NORM=$K target/kiln plan --model $D --fuse --decode-buckets 1 -o $OUT/$N.plan >> $OUT/log-plan.txt 2>&1
  KILN_NVRTC_DEFINES=KILN_TRACE=1 KILN_CACHE_DIR=$PWD/.device/kct46 KILN_TRACE_OUT=/tmp/trace.bin timeout 90 target/kiln run \
    --model $D --plan $OUT/$N.plan --prompt-ids $IDS --max-tokens 256 --temperature 0 --device cuda > /tmp/traced.txt 2>&1
  echo "rc $? ids $(head -c 100000 /tmp/traced.txt | grep -a -v '^\[kiln\]\|^kiln:' | md5sum | cut -c1-12)" >> $S
  grep -a '^\[kiln\]\|^kiln:\|rror' /tmp/traced.txt | cut -c1-200 | head -5 >> $S
  python3 scripts/trace_summary.py /tmp/trace.bin $OUT/$N.plan.txt --csv $OUT/launches-$N.csv >> $S 2>&1
  rm -f /tmp/trace.bin $OUT/$N.plan
done
echo "end $(el) s" >> $S
cd $OUT && gzip -f launches-*.csv; tar czf extra.tgz log-*.txt launches-*.csv.gz *.plan.txt 2>/dev/null; rm -f log-*.txt launches-*.csv.gz *.plan.txt
cat $S
