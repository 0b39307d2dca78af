#!/bin/bash
# Session 37 call C. Device-loop copies per WHILE pass (KILN_LOOP_UNROLL, plan time; default 2) swept: 2, 4, 8, 16,
# two rounds, kiln-only bench at batch 1, context 128 (kiln-s37a: main 1083d57's engine, the L2 knob unset); and X:
# K 2 with the L2 set-aside at its maximum but no window (KILN_L2_PERSIST_OPS names no launch): the set-aside alone.
set -u
T0=$(date +%s)
B=$PWD/target/kiln-s37a
export KILN_CUDA_INCLUDE=/usr/local/cuda/include KILN_CACHE_DIR=$PWD/.device/kc37
(cd .device/kc37 && xz -d -k -f *.xz)
S=$OUT/c-summary.txt
{ date -u; echo "commit $KILN_COMMIT"; } > $S
el() { echo $(( $(date +%s) - T0 )); }
for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
  D=target/synth/$M-seed1
  [ -f $D/config.json ] || timeout 240 $B synth --shape $M --seed 1 --out $D > $OUT/log-$M.txt 2>&1
  echo "synth $M ready at $(el) s" >> $S
done
IDS=$(seq -s, 1 128)
for K in 8 16; do
  KILN_LOOP_UNROLL=$K timeout 60 $B run --model target/synth/llama3.2-1b-seed1 --fuse --prompt-ids $IDS --max-tokens 128 --temperature 0 --device cuda > /tmp/ids.txt 2>/tmp/err.txt
  echo "ids 1B K$K rc $?: $(md5sum < /tmp/ids.txt | cut -c1-12) $(wc -w < /tmp/ids.txt) ids (reference 7b77fd2899f5)" >> $S
done
ab() {  # ab ROUND LIMIT
  for K in 2 4 8 16 X; do
    [ $(el) -gt $2 ] && { echo "skip K$K round $1 at $(el) s" >> $S; continue; }
    echo "-- K$K round $1 start $(el) s" >> $S
    E="KILN_LOOP_UNROLL=$K"
    [ $K = X ] && E="KILN_LOOP_UNROLL=2 KILN_L2_PERSIST=max KILN_L2_PERSIST_OPS=no_such_launch"
    env $E timeout 150 $B bench --shapes qwen2.5-0.5b,llama3.2-1b,llama3.1-8b --synth-root target/synth --batches 1 \
      --contexts 128 --repeats 3 --fuse --out /tmp/b37c-$K-$1 > $OUT/bench-K$K-$1.txt 2>&1
    echo "rc $? end $(el) s" >> $S
    grep -a -E '^(qwen|llama)[^ ]* +1 |read bandwidth:|L2 pers|rror' $OUT/bench-K$K-$1.txt | head -8 | cut -c1-200 >> $S
  done
}
ab 1 300
ab 2 500
echo "end $(el) s" >> $S
cd $OUT && tar czf extra.tgz bench-*.txt log-*.txt 2>/dev/null; rm -f bench-*.txt log-*.txt
cat $S
