# device_call_start.sh BINARY_XZ CACHE_DIR [SHAPE ...], sourced at the top of a device call (on the GPU machine):
# T0 and `el` (seconds since T0); scripts/device_prep.sh's unpack of the binary to target/kiln and its kernel-cache
# check; B (that binary); S ($OUT/summary.txt, begun with the date, kiln's version, the GPU and the cache check); and
# a synthetic model (seed 1) under target/synth for each SHAPE that lacks one (a warm machine keeps them).
#   source scripts/device_call_start.sh .device/bin/kiln-s64c.xz .device/kc64c qwen2.5-0.5b
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
source scripts/device_prep.sh "$1" "$2" > /tmp/prep.txt
B=$PWD/target/kiln
S=$OUT/summary.txt
{ date -u; $B --version; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat /tmp/prep.txt; } > $S
for shape in "${@:3}"; do
  [ -f target/synth/$shape-seed1/config.json ] ||
    timeout 240 $B synth --shape $shape --seed 1 --out target/synth/$shape-seed1 > /tmp/log-$shape.txt 2>&1
done
echo "synth ready at $(el) s" >> $S
