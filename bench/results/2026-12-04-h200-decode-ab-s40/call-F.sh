#!/bin/bash
# Session 40 call F. T = kiln-s40t (0ba7154: qkv_rope's inverse frequencies from the host, by value), M = kiln-s40m
# (main b554d4f). 1. ids of T; 2. kiln gate (all checks) on T; 3. kiln-only A/B M vs T, one round each; 4. the
# issue's official command on T (skipped if the gate failed); 5. the A/B's second round if time is left.
set -u
T0=$(date +%s)
mkdir -p target
for b in kiln-s40m kiln-s40t; do xz -d -c .device/bin/$b.xz > target/$b && chmod +x target/$b; done
export KILN_CUDA_INCLUDE=/usr/local/cuda/include
for d in kc40m kc40t; do (cd .device/$d && xz -d -f *.xz); done
S=$OUT/f-summary.txt
{ date -u; echo "commit $KILN_COMMIT"; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv; } > $S
el() { echo $(( $(date +%s) - T0 )); }
for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
  [ -f target/synth/$M-seed1/config.json ] || timeout 240 target/kiln-s40m synth --shape $M --seed 1 --out target/synth/$M-seed1 > $OUT/log-$M.txt 2>&1
  echo "synth $M ready at $(el) s" >> $S
done
IDS=$(seq -s, 1 128)
export KILN_CACHE_DIR=$PWD/.device/kc40t
for MR in qwen2.5-0.5b:fa75432c4925 llama3.2-1b:7b77fd2899f5 llama3.1-8b:3e62d770cd44; do
  M=${MR%:*}; R=${MR#*:}
  echo "ids $M greedy T: $(timeout 60 target/kiln-s40t run --model target/synth/$M-seed1 --fuse --prompt-ids $IDS --max-tokens 128 --temperature 0 --device cuda 2>/dev/null | md5sum | cut -c1-12) (ref $R)" >> $S
done
echo "ids 1B sampled T: $(timeout 40 target/kiln-s40t run --model target/synth/llama3.2-1b-seed1 --fuse --prompt-ids $IDS --max-tokens 128 --temperature 0.8 --top-k 40 --seed 5 --device cuda 2>/dev/null | md5sum | cut -c1-12) (ref 397e198de591)" >> $S
echo "== gate start $(el) s" >> $S
timeout 150 target/kiln-s40t gate --synth-dir target/synth > $OUT/gate.log 2>&1
G=$?; echo "rc $G end $(el) s" >> $S; grep -a -E 'FAIL|kiln gate:' $OUT/gate.log | tail -6 >> $S
ab() {
  case $2 in m) B=target/kiln-s40m; CD=kc40m;; t) B=target/kiln-s40t; CD=kc40t;; esac
  echo "-- $1 $2 start $(el) s" >> $S
  KILN_CACHE_DIR=$PWD/.device/$CD timeout 60 $B bench --shapes qwen2.5-0.5b,llama3.2-1b,llama3.1-8b --synth-root target/synth --batches 1 --contexts 128 \
    --repeats 3 --fuse --out /tmp/b40f-$1 > $OUT/bench-$1-$2.txt 2>&1
  echo "rc $? end $(el) s" >> $S
  grep -a -E '^(qwen|llama)[^ ]* +1 |read bandwidth:|rror' $OUT/bench-$1-$2.txt | head -4 | cut -c1-120 >> $S
}
ab 1 m; ab 1 t
if grep -q "0 failed" $OUT/gate.log; then
  R=2026-12-04-h200-decode-$KILN_COMMIT
  echo "== official start $(el) s" >> $S
  KILN_COMMIT=$KILN_COMMIT timeout $((592 - $(el))) target/kiln-s40t bench --shapes qwen2.5-0.5b,llama3.2-1b,llama3.1-8b --synth-root target/synth --prompt 128 --new-tokens 256 \
    --batches 1,2,4,8 --contexts 128,4096 --repeats 5 --fuse --torch --torch-rows first --torch-modes eager,compile --torch-repeats 3 \
    --out $OUT/$R > $OUT/official.txt 2>&1
  echo "rc $? end $(el) s" >> $S
  grep -a -E '^(qwen|llama)[^ ]* +1 +128 |read bandwidth:|rror|host syncs|launches per' $OUT/official.txt | head -12 >> $S
else
  echo "gate failed: no official run" >> $S
fi
[ $(el) -lt 540 ] && { ab 2 t; ab 2 m; }
echo "end $(el) s" >> $S
cd $OUT && tar czf extra.tgz log-*.txt bench-*.txt gate.log official.txt 2>/dev/null; rm -f log-*.txt bench-*.txt official.txt
ls $OUT >> $S
cat $S
