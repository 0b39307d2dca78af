# device_prep.sh BINARY_XZ CACHE_DIR [DEFINES], sourced by a device call before its runs (GPU machine side of
# scripts/device_cache.sh): unpacks the carried binary to target/kiln (every time: a warm machine keeps the last
# call's target/kiln, which may be another commit's) and the carried kernel cache in place, exports
# KILN_CUDA_INCLUDE, KILN_CACHE_DIR and KILN_NVRTC_DEFINES as the cache was keyed, and prints how many of the two
# modules the binary finds cached; on a miss it compiles them once into the cache, so that the runs after it hit
# (session 50's call-E lost every run to a miss). Sourced, it sets only the variables above and
# KILN_PREP_HITS: until session 61 it set KC, the name its callers give the cache directory, which sent
# session 61's call-tracecost.sh to a directory named "2" and a compile per run.
#   source scripts/device_prep.sh .device/bin/kiln-s49.xz .device/kc50 > /tmp/prep.txt
mkdir -p target
xz -d -c "$1" > target/kiln && chmod +x target/kiln
[ -d "$2" ] || echo "device_prep: no kernel cache directory '$2' (not carried, or the wrong argument): each run below may compile"
(cd "$2" 2>/dev/null && for f in *.xz; do [ -e "$f" ] && xz -d -f "$f"; done; true)
export KILN_CUDA_INCLUDE=/usr/local/cuda/include KILN_CACHE_DIR=$PWD/$2 KILN_NVRTC_DEFINES=${3:-}
KILN_PREP_HITS=$(timeout 10 target/kiln kernels --modules both 2>&1 | grep -c 'already cached')
echo "kernel cache $2: $KILN_PREP_HITS of 2 modules cached"
if [ "$KILN_PREP_HITS" != 2 ]; then
  timeout 200 target/kiln kernels --modules both 2>&1
  echo "  (compiled once here, so the runs below hit the cache)"
fi
