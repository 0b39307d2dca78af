#!/bin/bash
# Session 53: on the H200, the A/B over placements of what session 52 landed on H100 evidence only, and two levers
# built but never measured (bench/LEVERS.md "Built, never measured"), on 14db48a's binary:
#   part 1, Qwen2.5-0.5B, contexts 128 and 4096: base (the defaults) against
#     m1     the fused QKV-attention kernel at 202 registers (KILN_NVRTC_DEFINES=KILN_QKV_ATTN_MIN_BLOCKS=1, 4794b05's old),
#     nof11  QKV-RoPE outside the attention (KILN_FUSE_QKV_ATTN=0, plan time: lower::fuse rewrite 11 off),
#     unr4   four copies of the device-loop body (KILN_LOOP_UNROLL=4, plan time; default 2),
#     single all device regions in one allocation (KILN_ALLOC_SINGLE=1);
#   part 2, Llama-3.2-1B, context 128: base, unr4, single;
#   part 3 (if time is left): Nsight Compute's warp-state, scheduler, memory and source-counter sections of three
#     decode launches of the 0.5B's fused kiln_qkv_attention_bf16 (kernels serialized: no PDL overlap), so that
#     the kernel's own dependent chain can be read stall by stall.
# Carry: [".device/bin/kiln-s52b.xz", ".device/kc53"] (kc53: kc52's two modules plus the two built with
# KILN_QKV_ATTN_MIN_BLOCKS=1; scripts/device_cache.sh /tmp/kiln-s52b .device/kc53 KILN_QKV_ATTN_MIN_BLOCKS=1).
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
source scripts/device_prep.sh ${BIN:-.device/bin/kiln-s52b.xz} ${KC:-.device/kc53} > /tmp/prep.txt
B=target/kiln
S=$OUT/ab-summary.txt; { date -u; $B --version; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat /tmp/prep.txt; } > $S
for M in qwen2.5-0.5b $([[ ${PARTS:-123} == *2* ]] && echo llama3.2-1b); do
  [ -f target/synth/$M-seed1/config.json ] || timeout 100 $B synth --shape $M --seed 1 --out target/synth/$M-seed1 > $OUT/log-synth-$M.txt 2>&1
done
P=${PARTS:-123}  # which parts run (PARTS=3: the ncu sections only)
if [[ $P == *1* ]]; then
echo "== part 1 at $(el) s" >> $S
timeout $(( ${LIMIT1:-330} - $(el) )) python3 scripts/ab_placement.py --arm base=$B \
  --arm m1=$B:KILN_NVRTC_DEFINES=KILN_QKV_ATTN_MIN_BLOCKS=1 --arm nof11=$B:KILN_FUSE_QKV_ATTN=0 \
  --arm unr4=$B:KILN_LOOP_UNROLL=4 --arm single=$B:KILN_ALLOC_SINGLE=1 \
  --pads ${PADS:-0,32,1024} --rounds ${ROUNDS:-2} --timeout 60 --out /tmp/ab1 -- \
  --shapes qwen2.5-0.5b --synth-root target/synth --batches 1 --contexts 128,4096 --repeats 3 --fuse >> $S 2>&1
echo "part 1 rc $? at $(el) s" >> $S
fi
if [[ $P == *2* ]]; then
echo "== part 2 at $(el) s" >> $S
timeout $(( ${LIMIT2:-560} - $(el) )) python3 scripts/ab_placement.py --arm base=$B \
  --arm unr4=$B:KILN_LOOP_UNROLL=4 --arm single=$B:KILN_ALLOC_SINGLE=1 \
  --pads ${PADS:-0,32,1024} --rounds ${ROUNDS:-2} --timeout 60 --out /tmp/ab2 -- \
  --shapes llama3.2-1b --synth-root target/synth --batches 1 --contexts 128 --repeats 3 --fuse >> $S 2>&1
echo "part 2 rc $? at $(el) s" >> $S
fi
if [[ $P == *3* ]] && [ $(el) -lt ${NCU_BEFORE:-470} ]; then
  echo "== part 3 at $(el) s" >> $S
  NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  timeout $(( 585 - $(el) )) $NCU --clock-control none -k regex:qkv_attention --launch-skip 48 --launch-count 3 \
    --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section SourceCounters \
    --section LaunchStats --section Occupancy \
    $B run --model target/synth/qwen2.5-0.5b-seed1 --fuse --prompt-ids $(seq -s, 1 128) --max-tokens 8 --temperature 0 \
    --burst 0 --prefill-buckets 128 --max-context 512 --device cuda > $OUT/ncu-qkv-attn.txt 2> $OUT/ncu-qkv-attn.err
  echo "part 3 rc $? at $(el) s" >> $S
  grep -a -E 'Duration|Warp Cycles Per Issued|Issued Warp|No Eligible|Stall|Achieved Occupancy|Registers Per' $OUT/ncu-qkv-attn.txt | head -24 >> $S
fi
cd /tmp && tar czf $OUT/ab-logs.tgz ab1/*.log ab2/*.log 2>/dev/null
cat $S
