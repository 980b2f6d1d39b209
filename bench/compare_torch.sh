#!/bin/sh
# Side-by-side timings of dpt and PyTorch on this machine, interleaved run by
# run so that a noisy moment hits both, with medians at the end.
#
#   bench/compare_torch.sh PEERS_DIR [PYTHON] [REPS]
#
# PEERS_DIR holds the PyTorch reference programs torch_mlp.py and
# ppo_cartpole.py (the comparison scripts the figures were agreed on);
# PYTHON is an interpreter with torch (default python3); REPS rounds of MLP
# runs (default 7), each round PyTorch with 2 threads, dpt (1 and 2 devices)
# and PyTorch with 1 thread. PyTorch runs with the settings that make it
# fair on these VMs: OPENBLAS_NUM_THREADS = torch threads,
# OMP_WAIT_POLICY=PASSIVE, glibc's malloc thresholds raised (no page-fault
# storms) and OPENBLAS_CORETYPE=Haswell unless the environment sets another.
# Prints the commands it runs and one line per run; needs a built ./build/dpt.
peers="$1" py="${2:-python3}" reps="${3:-7}"
dpt=./build/dpt
[ -x "$dpt" ] || { echo "build dpt first (make)"; exit 2; }
[ -f "$peers/torch_mlp.py" ] || { echo "usage: $0 PEERS_DIR [PYTHON] [REPS]"; exit 2; }
"$py" -c "import torch" 2>/dev/null || { echo "skipped: $py has no torch"; exit 0; }
fair="OMP_WAIT_POLICY=PASSIVE MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=4294967296"
fair="$fair OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell}"
med() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
rate() { awk '{for (k = 1; k <= NF; k++) if ($k == "samples/s") print $(k-1)}'; }

echo "# MLP 784-512-512-10, batch 256, samples/s: PyTorch with 2 and 1 threads, dpt with"
echo "# 2 and 1 devices (ps), taking turns run by run"
echo "# torch: env $fair OPENBLAS_NUM_THREADS=T $py torch_mlp.py --model mlp --threads T --batch 256 --seconds 4"
echo "# dpt:   $dpt bench towers --mode ps --devices 2 --seconds 8 --json"
dir=$(mktemp -d) || exit 1
i=0
while [ $i -lt "$reps" ]; do
    t2=$(env $fair OPENBLAS_NUM_THREADS=2 "$py" "$peers/torch_mlp.py" --model mlp --threads 2 \
         --batch 256 --seconds 4 2>&1 | tail -1 | rate)
    out=$("$dpt" bench towers --mode ps --devices 2 --seconds 8 --json)
    d1=$(printf '%s\n' "$out" | sed -n 's/.*"devices":1,.*"samples_per_s":\([0-9.]*\).*/\1/p')
    d2=$(printf '%s\n' "$out" | sed -n 's/.*"devices":2,.*"samples_per_s":\([0-9.]*\).*/\1/p')
    t1=$(env $fair OPENBLAS_NUM_THREADS=1 "$py" "$peers/torch_mlp.py" --model mlp --threads 1 \
         --batch 256 --seconds 4 2>&1 | tail -1 | rate)
    echo "run $i: torch 2 threads $t2, dpt 2 devices $d2; torch 1 thread $t1, dpt 1 device $d1"
    echo "$t2" >> "$dir/t2"; echo "$d2" >> "$dir/d2"; echo "$t1" >> "$dir/t1"; echo "$d1" >> "$dir/d1"
    i=$((i + 1))
done
mt2=$(med < "$dir/t2"); md2=$(med < "$dir/d2"); mt1=$(med < "$dir/t1"); md1=$(med < "$dir/d1")
echo "median, 2 threads: torch $mt2, dpt $md2 samples/s, dpt/torch $(awk -v a="$md2" -v b="$mt2" 'BEGIN {printf "%.2f", a / b}')"
echo "median, 1 thread:  torch $mt1, dpt $md1 samples/s, dpt/torch $(awk -v a="$md1" -v b="$mt1" 'BEGIN {printf "%.2f", a / b}')"
rm -rf "$dir"

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
