# device_official_if_h200.sh BINARY_XZ CACHE_DIR, sourced first by a device call that must not spend an H200 on
# anything but the official command: writes the GPU's name to $OUT/gpu.txt; on an H200 it runs the official
# command (bench/results/2026-12-05-s52-calls/call-official.sh with BIN / KC, GATE_BEFORE 450 unless set) and returns
# 0, elsewhere it returns 1 at once, so that the caller goes on with its H100 work:
#   source scripts/device_official_if_h200.sh .device/bin/kiln-s63.xz .device/kc63 && exit
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
if grep -q H200 $OUT/gpu.txt; then
  BIN=$1 KC=$2 GATE_BEFORE=${GATE_BEFORE:-450} bash bench/results/2026-12-05-s52-calls/call-official.sh
  true
else
  false
fi
