#!/bin/bash
# device_cache.sh BINARY DIR [DEFINES]: kiln's kernel cache for a device call, built on the CPU machine with NVRTC
# from the CUDA 13 wheels (bench/README.md "Device calls"), then checked: BINARY must report both modules
# "already cached" under the device's include path, or the device compiles every run (~55 s per module; session
# 49's kc49 was keyed by the wheel's include path and cost session 50's A/B every run).
#   scripts/device_cache.sh target/kiln-s50 .device/kc50               # kiln's kernels
#   scripts/device_cache.sh target/kiln-s50 .device/kc50t KILN_TRACE=1 # traced kernels (call-D)
# The cache key covers the kernel sources, the arch, NVRTC's version and every option, the include path among them,
# so the device side must set KILN_CUDA_INCLUDE=/usr/local/cuda/include too (and KILN_NVRTC_DEFINES alike).
set -eu
B=$1 DIR=$2 DEFS=${3:-}
INC=/usr/local/cuda/include
WHEEL=$(cd "$(dirname "$0")/.." && pwd)/target/ci-cuda13/nvidia/cu13
[ -e $INC/cuda_bf16.h ] || { echo "$INC/cuda_bf16.h missing: ln -s $WHEEL/include $INC (as root)" >&2; exit 1; }
export LD_LIBRARY_PATH=$WHEEL/lib KILN_CUDA_INCLUDE=$INC KILN_CACHE_DIR=$DIR KILN_NVRTC_DEFINES=$DEFS
mkdir -p "$DIR"
(cd "$DIR" && for f in *.xz; do [ -e "$f" ] && xz -d -f "$f"; done; true)
"$B" kernels --modules both
hits=$("$B" kernels --modules both | grep -c "already cached" || true)
[ "$hits" = 2 ] || { echo "device_cache: $B does not find its own cache in $DIR" >&2; exit 1; }
(cd "$DIR" && xz -T2 -6 -f *.cubin)
ls -la "$DIR"
