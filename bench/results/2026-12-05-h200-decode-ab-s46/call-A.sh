#!/bin/bash
# Written in session 45 (no device lent that session; never run). The next session's first call: the output
# norm carried by its producer (KILN_FUSE_OUTPUT_NORM=1, plan time; lower::fuse rewrite 10), built in session 45.
# Carry: [".device/bin/kiln-s45.xz", ".device/kc45", ".device/kcc45"] (main e1cbcc3's binary, stripped, whose gate
# has the large-vocabulary model; its two kernel modules (`kiln kernels --modules both`, kernels/ as of 2fbc52d); kernel_check's CUBINs of main's kernels/: the default unit and
# the walk / tiles / tiles + walk variants, from `--compile-only` and nvrtc_cubin with KILN_CHECK_CACHE). Any
# later change to kernels/ makes them stale (a ~75 s NVRTC compile each on the device).
# 1. kernel_check: out_norm (the new kernels, bitwise against kiln_fused_linear / kiln_linear) and the GEMV
#    checks of the kernels whose epilogue code moved (linear, fused, dense, walk, tiles, norm_pass: same bits).
# 2. greedy ids of the 3 shapes and the 1B sampled, knob off (must be the references) and on (recorded: the
#    norm after the dot product may move a near-tie).
# 3. kiln gate with the knob on (device loop == one-step, eager == graph, GPU vs CPU reference).
# 4. scripts/ab_placement.py: off / on, 3 shapes, batch 1, ctx 128, pads 0 / 32 / 64 / 1024 MiB, two rounds as
#    the time allows (the table prints each arm's median and the paired per-pad ratio).
# ~450 s plus the start. The second call is call-B.sh (session 44's placement / unroll probe on this binary, then
# the gate with the defaults).
set -u
T0=$(date +%s)
mkdir -p target
xz -d -c .device/bin/kiln-s45.xz > target/kiln && chmod +x target/kiln
(cd .device/kc45 && xz -d -f *.xz 2>/dev/null); (cd .device/kcc45 && xz -d -f *.xz 2>/dev/null)
export KILN_CUDA_INCLUDE=/usr/local/cuda/include KILN_CACHE_DIR=$PWD/.device/kc45
S=$OUT/a-summary.txt
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv; } > $S
el() { echo $(( $(date +%s) - T0 )); }
KILN_CHECK_CACHE=$PWD/.device/kcc45 timeout 150 python3 scripts/kernel_check.py --dtypes bf16 \
  --only out_norm,linear,fused,dense,walk,tiles,norm_pass > $OUT/kcheck.txt 2>&1
echo "kernel_check rc $? at $(el) s" >> $S; grep -a -E "FAIL|passed|compiled|out_norm" $OUT/kcheck.txt | tail -40 >> $S
for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
  [ -f target/synth/$M-seed1/config.json ] || timeout 240 target/kiln synth --shape $M --seed 1 --out target/synth/$M-seed1 > $OUT/log-$M.txt 2>&1
  echo "synth $M ready at $(el) s" >> $S
done
IDS=$(seq -s, 1 128)
for K in 0 1; do
  for MR in qwen2.5-0.5b:fa75432c4925 llama3.2-1b:7b77fd2899f5 llama3.1-8b:3e62d770cd44; do
    M=${MR%:*}; R=${MR#*:}
    echo "ids $M greedy knob=$K: $(KILN_FUSE_OUTPUT_NORM=$K timeout 60 target/kiln run --model target/synth/$M-seed1 --fuse --prompt-ids $IDS --max-tokens 128 --temperature 0 --device cuda 2>$OUT/err-$K-$M.txt | md5sum | cut -c1-12) (ref $R)" >> $S
  done
  echo "ids 1B sampled knob=$K: $(KILN_FUSE_OUTPUT_NORM=$K timeout 40 target/kiln run --model target/synth/llama3.2-1b-seed1 --fuse --prompt-ids $IDS --max-tokens 128 --temperature 0.8 --top-k 40 --seed 5 --device cuda 2>>$OUT/err-$K-s.txt | md5sum | cut -c1-12) (ref 397e198de591)" >> $S
done
echo "ids done at $(el) s" >> $S
if [ $(el) -lt 330 ]; then
  echo "== gate (knob on) start $(el) s" >> $S
  KILN_FUSE_OUTPUT_NORM=1 timeout 120 target/kiln gate --synth-dir target/synth > $OUT/gate.log 2>&1
  echo "rc $? end $(el) s" >> $S; grep -a -E 'FAIL|kiln gate:' $OUT/gate.log | tail -6 >> $S
fi
# The A/B with the placement averaged out (the knob changes the arena, hence where later regions land):
# pads 0, 32, 64, 1024 MiB, arms in rotating order; a second round (its own table) if the time allows.
for R in 1 2; do
  [ $R = 2 ] && [ $(el) -gt 400 ] && { echo "no round 2 at $(el) s" >> $S; break; }
  echo "== ab round $R start $(el) s" >> $S
  timeout $(( 585 - $(el) )) python3 scripts/ab_placement.py --arm off=target/kiln --arm on=target/kiln:KILN_FUSE_OUTPUT_NORM=1 \
    --pads 0,32,64,1024 --rounds 1 --timeout 60 --out /tmp/ab45a-$R -- --shapes qwen2.5-0.5b,llama3.2-1b,llama3.1-8b \
    --synth-root target/synth --batches 1 --contexts 128 --repeats 3 --fuse >> $S 2>&1
  echo "ab round $R rc $? at $(el) s" >> $S
  mkdir -p $OUT/ab-$R && cp /tmp/ab45a-$R/* $OUT/ab-$R/ 2>/dev/null
done
echo "end $(el) s" >> $S
cd $OUT && tar czf extra.tgz log-*.txt err-*.txt ab-* 2>/dev/null; rm -rf log-*.txt err-*.txt ab-*
cat $S
