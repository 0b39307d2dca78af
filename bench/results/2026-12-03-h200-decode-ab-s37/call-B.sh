#!/bin/bash
# Session 37 call B. 1. kiln gate on kiln-s37a (main 1083d57's engine; the L2 knob is off unless set);
# 2. SASS of the 1B's hot kernels (tile-packed module) with their local-memory (spill) instructions.
set -u
T0=$(date +%s)
B=$PWD/target/kiln-s37a
export KILN_CUDA_INCLUDE=/usr/local/cuda/include KILN_CACHE_DIR=$PWD/.device/kc37
(cd .device/kc37 && xz -d -k -f *.xz)
S=$OUT/b-summary.txt
{ date -u; echo "commit $KILN_COMMIT"; } > $S
el() { echo $(( $(date +%s) - T0 )); }
for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
  D=target/synth/$M-seed1
  [ -f $D/config.json ] || timeout 240 $B synth --shape $M --seed 1 --out $D > $OUT/log-$M.txt 2>&1
  echo "synth $M ready at $(el) s" >> $S
done
C=.device/kc37/kernels-sm_90a-nvrtc13.0-226ef55bc115bd12c0713408.cubin
CU=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
for K in kiln_gated_linear_bf16 kiln_qkv_rope_bf16 kiln_fused_linear_bf16_bf16 kiln_linear_argmax_bf16_f32_o3 kiln_attention_cluster_g1_bf16; do
  $CU -sass -fun $K $C > $OUT/sass-$K.txt 2>&1
  echo "$K: $(grep -c . $OUT/sass-$K.txt) lines, STL $(grep -c 'STL' $OUT/sass-$K.txt), LDL $(grep -c 'LDL' $OUT/sass-$K.txt), BAR $(grep -c 'BAR' $OUT/sass-$K.txt)" >> $S
done
echo "== gate at $(el) s" >> $S
timeout 240 $B gate --synth-dir target/synth > $OUT/gate.log 2>&1
echo "rc $? end $(el) s" >> $S; grep -a -E 'FAIL|kiln gate:' $OUT/gate.log | tail -6 >> $S
echo "end $(el) s" >> $S
cd $OUT && tar czf extra.tgz sass-*.txt log-*.txt 2>/dev/null; rm -f sass-*.txt log-*.txt
cat $S
