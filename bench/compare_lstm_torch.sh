#!/bin/sh
# The LSTM layer of dpt against PyTorch's nn.LSTM on this machine: forward +
# backward of batch 64, 20 steps, 16 inputs, cell sizes 64 and 256, with 1 and
# 2 threads, the runs interleaved so that a noisy moment hits both, medians
# at the end.
#
#   bench/compare_lstm_torch.sh [PYTHON] [REPS] [SECONDS]
#
# PYTHON is an interpreter with torch (default python3); without torch the
# script prints "skipped: no torch" and exits 0. REPS rounds (default 5), each
# running, for 1 then 2 threads, bench/torch_lstm.py and `dpt bench lstm`
# for SECONDS of timed iterations each (default 2, shared by the two cell
# sizes). Each run reports its median ms per forward + backward; the table
# gives the median of those over the rounds.
#
# Threads mean what each framework does with them: torch.set_num_threads
# (intra-op parallelism inside its kernels) for PyTorch; for dpt, data
# parallelism as its towers use it (each thread runs its own layer on half
# the sequences, then the gradients are summed; dpt's GEMM itself runs one
# thread per call). PyTorch runs with the settings that make it fair on these
# VMs (as bench/compare_torch.sh): OMP/MKL/OpenBLAS threads = torch threads,
# OMP_WAIT_POLICY=PASSIVE, glibc's malloc thresholds raised, and
# OPENBLAS_CORETYPE=Haswell unless the environment sets another. Needs a
# built ./build/dpt (or DPT=path/to/dpt).
py="${1:-python3}" reps="${2:-5}" secs="${3:-2}"
here=$(dirname "$0")
dpt="${DPT:-./build/dpt}"
"$py" -c "import torch" 2>/dev/null || { echo "skipped: no torch ($py cannot import torch)"; exit 0; }
[ -x "$dpt" ] || { echo "build dpt first (make), or set DPT=path/to/dpt"; exit 2; }
fair="OMP_WAIT_POLICY=PASSIVE MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=4294967296"
fair="$fair OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell}"
sizes="--batch 64 --seq 20 --input 16 --hidden 64 --hidden 256"
med() { sort -n | awk '{a[NR]=$1} END {if (NR) print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
# ms HIDDEN < json lines: the median_ms of that cell size
ms() { sed -n "s/.*\"hidden\":$1,.*\"median_ms\":\([0-9.]*\).*/\1/p"; }

echo "# LSTM forward + backward, batch 64, seq 20, input 16: median ms per iteration"
echo "# torch: env $fair OMP_NUM_THREADS=T MKL_NUM_THREADS=T OPENBLAS_NUM_THREADS=T $py bench/torch_lstm.py $sizes --threads T --seconds $secs"
echo "# dpt:   $dpt bench lstm $sizes --threads T --seconds $secs --json"
"$dpt" bench lstm --hidden 64 --seconds 0.01 | sed -n 's/^# dpt bench lstm: .*gemm /# dpt gemm: /p'
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
i=0
while [ "$i" -lt "$reps" ]; do
    line="run $i:"
    for t in 1 2; do
        tout=$(env $fair OMP_NUM_THREADS=$t MKL_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t \
               "$py" "$here/torch_lstm.py" $sizes --threads $t --seconds "$secs") || exit 1
        [ "$i" -eq 0 ] && [ "$t" -eq 1 ] && printf '%s\n' "$tout" | grep '^# torch'
        dout=$("$dpt" bench lstm $sizes --threads $t --seconds "$secs" --json) || exit 1
        for h in 64 256; do
            a=$(printf '%s\n' "$tout" | ms $h)
            b=$(printf '%s\n' "$dout" | ms $h)
            [ -n "$a" ] && [ -n "$b" ] || { echo "run $i: no figure for hidden $h, $t thread(s)"; exit 1; }
            echo "$a" >> "$dir/torch.$t.$h"
            echo "$b" >> "$dir/dpt.$t.$h"
            line="$line h$h/${t}t torch $a dpt $b;"
        done
    done
    echo "$line"
    i=$((i + 1))
done
printf '%-7s %-8s %10s %10s %11s\n' hidden threads torch_ms dpt_ms torch/dpt
for t in 1 2; do
    for h in 64 256; do
        a=$(med < "$dir/torch.$t.$h")
        b=$(med < "$dir/dpt.$t.$h")
        printf '%-7s %-8s %10s %10s %11s\n' "$h" "$t" "$a" "$b" \
            "$(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.2f", a / b}')"
    done
done
