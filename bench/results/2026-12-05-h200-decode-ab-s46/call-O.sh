#!/bin/bash
# Session 46, second call: call A's out-norm A/B did not win on every shape (0.5B -1.7%), so the knob stays off and
# this call measures main (60dedc0) with the defaults. Carry [".device/bin/kiln-s45.xz", ".device/kc45"] (main's
# binary; call A checked its knob-off ids against the references). 1. `kiln gate` with the defaults (its
# large-vocabulary model runs rewrite 9's argmax key on a GPU for the first time); 2. the issue's official command
# (`knobs: none`). Run as `KILN_COMMIT=<commit> bash call-O.sh` (the device tool does not set it).
set -u
T0=$(date +%s)
mkdir -p target
xz -d -c .device/bin/kiln-s45.xz > target/kiln && chmod +x target/kiln
(cd .device/kc45 && xz -d -f *.xz 2>/dev/null)
export KILN_CUDA_INCLUDE=/usr/local/cuda/include KILN_CACHE_DIR=$PWD/.device/kc45
S=$OUT/o-summary.txt
{ date -u; echo "commit $KILN_COMMIT"; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv; } > $S
el() { echo $(( $(date +%s) - T0 )); }
for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
  [ -f target/synth/$M-seed1/config.json ] || timeout 240 target/kiln synth --shape $M --seed 1 --out target/synth/$M-seed1 > $OUT/log-$M.txt 2>&1
  echo "synth $M ready at $(el) s" >> $S
done
echo "== gate start $(el) s" >> $S
timeout 150 target/kiln gate --synth-dir target/synth > $OUT/gate.log 2>&1
echo "rc $? end $(el) s" >> $S; grep -a -E 'FAIL|kiln gate:' $OUT/gate.log | tail -6 >> $S
R=2026-12-05-h200-decode-$KILN_COMMIT
echo "== official start $(el) s" >> $S
KILN_COMMIT=$KILN_COMMIT timeout $((590 - $(el))) target/kiln bench --shapes qwen2.5-0.5b,llama3.2-1b,llama3.1-8b --synth-root target/synth --prompt 128 --new-tokens 256 \
  --batches 1,2,4,8 --contexts 128,4096 --repeats 5 --fuse --torch --torch-rows first --torch-modes eager,compile --torch-repeats 3 \
  --out $OUT/$R > $OUT/official.txt 2>&1
echo "rc $? end $(el) s" >> $S
grep -a -E '^(qwen|llama)[^ ]* +1 +128 |read bandwidth:|knobs|rror|host syncs|launches per' $OUT/official.txt | cut -c1-200 | head -12 >> $S
echo "end $(el) s" >> $S
cd $OUT && tar czf extra.tgz log-*.txt official.txt 2>/dev/null; rm -f log-*.txt
cat $S
