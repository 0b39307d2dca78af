#!/bin/bash
# Session 37 call A. Binary kiln-s37a at $KILN_COMMIT + the uncommitted KILN_L2_PERSIST knob (graph mode: an L2
# access-policy window on GEMV kernel nodes, hit ratio = set-aside / distinct windowed weight bytes; persisting hits,
# streaming misses). 1. ids with KILN_L2_PERSIST=max against the reference md5s; 2. kiln-only A/B, batch 1, context 128,
# two rounds: P0 off, PM max over every GEMV, PL max over the logits GEMV, PG max over gate/up, PH 24 MiB over all.
set -u
T0=$(date +%s)
B=$PWD/target/kiln-s37a
export KILN_CUDA_INCLUDE=/usr/local/cuda/include KILN_CACHE_DIR=$PWD/.device/kc37
(cd .device/kc37 && xz -d -k -f *.xz)
S=$OUT/a-summary.txt
{ date -u; echo "commit $KILN_COMMIT"; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv; } > $S
el() { echo $(( $(date +%s) - T0 )); }
IDS=$(seq -s, 1 128)
for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
  D=target/synth/$M-seed1
  [ -f $D/config.json ] || timeout 240 $B synth --shape $M --seed 1 --out $D > $OUT/log-$M.txt 2>&1
  echo "synth $M ready at $(el) s" >> $S
  for V in g s; do
    if [ $V = g ]; then SMP="--temperature 0"; else SMP="--temperature 0.8 --top-k 40 --seed 5"; fi
    KILN_L2_PERSIST=max timeout 60 $B run --model $D --fuse --prompt-ids $IDS --max-tokens 128 $SMP --device cuda > /tmp/ids-$M-$V.txt 2> /tmp/err-$M-$V.txt
    echo "run $M PM$V rc $? at $(el) s: $(md5sum < /tmp/ids-$M-$V.txt | cut -c1-12) $(wc -w < /tmp/ids-$M-$V.txt) ids" >> $S
    grep -a -i 'L2\|error\|panic\|trap\|illegal' /tmp/err-$M-$V.txt /tmp/ids-$M-$V.txt | head -3 | cut -c1-300 >> $S
    cp /tmp/ids-$M-$V.txt $OUT/ids-$M-$V.txt
  done
done
ab() {  # ab ROUND LIMIT
  for V in P0 PM PL PG PH; do
    [ $(el) -gt $2 ] && { echo "skip $V round $1 at $(el) s" >> $S; continue; }
    echo "-- $V round $1 start $(el) s" >> $S
    case $V in
      P0) E="KILN_L2_PERSIST=0" ;;
      PM) E="KILN_L2_PERSIST=max" ;;
      PL) E="KILN_L2_PERSIST=max KILN_L2_PERSIST_OPS=output" ;;
      PG) E="KILN_L2_PERSIST=max KILN_L2_PERSIST_OPS=ffn_gate_up" ;;
      PH) E="KILN_L2_PERSIST=24" ;;
    esac
    env $E timeout 150 $B bench --shapes qwen2.5-0.5b,llama3.2-1b,llama3.1-8b --synth-root target/synth --batches 1 \
      --contexts 128 --repeats 3 --fuse --out /tmp/b37a-$V-$1 > $OUT/bench-$V-$1.txt 2>&1
    echo "rc $? end $(el) s" >> $S
    grep -a -E '^(qwen|llama)[^ ]* +1 |read bandwidth|L2 pers|rror' $OUT/bench-$V-$1.txt | head -9 | cut -c1-300 >> $S
  done
}
ab 1 400
ab 2 540
echo "end $(el) s" >> $S
cd $OUT && tar czf extra.tgz bench-*.txt log-*.txt ids-*.txt 2>/dev/null; rm -f bench-*.txt log-*.txt ids-*.txt
ls -la $OUT >> $S
cat $S
