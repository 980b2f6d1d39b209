#!/bin/sh
# Side-by-side timings of dpt and PyTorch on this machine, interleaved run by
# run so that a noisy moment hits both, with medians at the end.
#
#   bench/compare_torch.sh PEERS_DIR [PYTHON] [REPS]
#
# PEERS_DIR holds the PyTorch reference programs torch_mlp.py and
# ppo_cartpole.py (the comparison scripts the figures were agreed on);
# PYTHON is an interpreter with torch (default python3); REPS pairs of MLP
# runs (default 7). PyTorch runs with the settings that make it fair on
# these VMs: OPENBLAS_NUM_THREADS = torch threads, OMP_WAIT_POLICY=PASSIVE
# and glibc's malloc thresholds raised (no page-fault storms).
# Prints the commands it runs and one line per run; needs a built ./build/dpt.
peers="$1" py="${2:-python3}" reps="${3:-7}"
dpt=./build/dpt
[ -x "$dpt" ] || { echo "build dpt first (make)"; exit 2; }
[ -f "$peers/torch_mlp.py" ] || { echo "usage: $0 PEERS_DIR [PYTHON] [REPS]"; exit 2; }
"$py" -c "import torch" 2>/dev/null || { echo "skipped: $py has no torch"; exit 0; }
fair="OMP_WAIT_POLICY=PASSIVE MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=4294967296"
med() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

echo "# MLP 784-512-512-10, batch 256, 2 threads / 2 devices (ps), samples/s"
echo "# torch: env $fair OPENBLAS_NUM_THREADS=2 $py torch_mlp.py --model mlp --threads 2 --batch 256 --seconds 4"
echo "# dpt:   $dpt bench towers --mode ps --devices 2 --seconds 4 --json"
tt=$(mktemp) && td=$(mktemp) || exit 1
i=0
while [ $i -lt "$reps" ]; do
    t=$(env $fair OPENBLAS_NUM_THREADS=2 "$py" "$peers/torch_mlp.py" --model mlp --threads 2 \
        --batch 256 --seconds 4 2>&1 | tail -1 | awk '{for (k = 1; k <= NF; k++) if ($k == "samples/s") print $(k-1)}')
    d=$("$dpt" bench towers --mode ps --devices 2 --seconds 4 --json |
        sed -n 's/.*"devices":2,.*"samples_per_s":\([0-9.]*\).*/\1/p')
    echo "run $i: torch $t  dpt $d"
    echo "$t" >> "$tt"; echo "$d" >> "$td"
    i=$((i + 1))
done
mt=$(med < "$tt"); md=$(med < "$td")
echo "median: torch $mt samples/s, dpt $md samples/s, dpt/torch $(awk -v a="$md" -v b="$mt" 'BEGIN {printf "%.2f", a / b}')"
rm -f "$tt" "$td"

echo
echo "# PPO, CleanRL's CartPole settings, 500k steps, seed 1: wall seconds"
echo "# torch: env $fair OPENBLAS_NUM_THREADS=1 $py ppo_cartpole.py --seed 1 --threads 1"
echo "# dpt:   $dpt bench ppo --seeds 1 --devices 1  and  --devices 2"
t=$(env $fair OPENBLAS_NUM_THREADS=1 "$py" "$peers/ppo_cartpole.py" --seed 1 --threads 1 2>&1 |
    sed -n 's/^RESULT.* wall=\([0-9.]*\)s.*/\1/p')
d1=$("$dpt" bench ppo --seeds 1 --devices 1 --json | sed -n 's/.*"wall_s":\([0-9.]*\).*/\1/p')
d2=$("$dpt" bench ppo --seeds 1 --devices 2 --json | sed -n 's/.*"wall_s":\([0-9.]*\).*/\1/p')
echo "torch $t s, dpt (1 device) $d1 s, dpt (2 devices) $d2 s;" \
     "speed-ups $(awk -v t="$t" -v a="$d1" -v b="$d2" 'BEGIN {printf "%.1fx and %.1fx", t / a, t / b}')"
