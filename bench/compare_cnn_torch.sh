#!/bin/sh
# dpt against PyTorch on this CPU, training two small CNNs: the Fashion-MNIST
# CNN (batch 256, cross-entropy, Adam) and Pgx's MinAtar PPO policy (batch
# 512, one PPO minibatch step, Adam), with 1 and 2 threads, the two programs
# taking turns run by run so that a noisy moment hits both, medians at the
# end.
#
#   bench/compare_cnn_torch.sh PYTHON [ROUNDS] [SECONDS]
#
# PYTHON is an interpreter with torch; without torch the script prints
# "skipped: ..." and exits 0. ROUNDS rounds (default 5); in each, for 1 then 2
# threads, bench/torch_cnn.py and `dpt bench cnn` each train both networks
# for SECONDS of timed steps per network (default 5, in 5 inner rounds whose
# median is the run's figure); which program goes first alternates from round
# to round. The table gives, per network and thread count, the median over
# the rounds of each program's samples/s and the ratio dpt/torch (> 1: dpt
# is faster). SECONDS 0.5 and ROUNDS 1 make a smoke test.
#
# Threads mean what each framework does with them: torch.set_num_threads
# (intra-op parallelism inside its kernels) for PyTorch; for dpt, the towers'
# data parallelism (ps mode, the batch split over N devices, each running the
# whole network on its share; dpt's GEMM runs one thread per call). PyTorch
# runs with the settings of the other comparisons: OMP/MKL/OpenBLAS threads =
# torch threads, OMP_WAIT_POLICY=PASSIVE and glibc's malloc thresholds raised
# (no page-fault storms). OPENBLAS_CORETYPE is left to the environment (the
# header prints the OpenBLAS kernel torch's dense layers ran): forcing an AVX2
# kernel on an AVX-512 CPU would hold PyTorch back where dpt is not. Needs a
# built ./build/dpt (or DPT=path/to/dpt).
py="$1" reps="${2:-5}" secs="${3:-5}"
here=$(dirname "$0")
dpt="${DPT:-./build/dpt}"
[ -n "$py" ] || { echo "usage: $0 PYTHON [ROUNDS] [SECONDS]"; exit 2; }
"$py" -c "import torch" 2>/dev/null || { echo "skipped: $py cannot import torch"; exit 0; }
[ -x "$dpt" ] || { echo "build dpt first (make), or set DPT=path/to/dpt"; exit 2; }
fair="OMP_WAIT_POLICY=PASSIVE MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=4294967296"
inner=5
med() { sort -n | awk '{a[NR]=$1} END {if (NR) print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
# rate NET < json lines: that network's samples_per_s
rate() { sed -n "s/.*\"net\":\"$1\".*\"samples_per_s\":\([0-9.]*\).*/\1/p"; }
# str KEY / num KEY < json lines: the first line's string or number under KEY
str() { sed -n "s/.*\"$1\":\"\([^\"]*\)\".*/\1/p" | head -1; }
num() { sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p" | head -1; }

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
cores=$(grep -c '^processor' /proc/cpuinfo)
grep -q '^flags.* avx512f' /proc/cpuinfo && isa="avx512f" || isa="no avx512f"
grep -q '^flags.* avx2' /proc/cpuinfo && isa="avx2, $isa"
echo "# CNN training samples/s, dpt against PyTorch, taking turns; dpt/torch > 1: dpt faster"
echo "# cpu: ${cpu:-unknown}, $cores logical cores ($isa)"
echo "# torch: env $fair OMP_NUM_THREADS=T MKL_NUM_THREADS=T OPENBLAS_NUM_THREADS=T $py $here/torch_cnn.py --threads T --seconds $secs --rounds $inner"
echo "# dpt:   $dpt bench cnn --devices T --seconds $secs --rounds $inner --json"
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT

# run_torch T / run_dpt T: one run of each program, its JSON lines on stdout.
run_torch() {
    env $fair OMP_NUM_THREADS=$1 MKL_NUM_THREADS=$1 OPENBLAS_NUM_THREADS=$1 \
        "$py" "$here/torch_cnn.py" --threads "$1" --seconds "$secs" --rounds $inner
}
run_dpt() { "$dpt" bench cnn --devices "$1" --seconds "$secs" --rounds $inner --json; }

i=0
while [ "$i" -lt "$reps" ]; do
    line="run $i:"
    for t in 1 2; do
        if [ $((i % 2)) -eq 0 ]; then
            tout=$(run_torch $t) || exit 1
            dout=$(run_dpt $t) || exit 1
        else
            dout=$(run_dpt $t) || exit 1
            tout=$(run_torch $t) || exit 1
        fi
        if [ "$i" -eq 0 ] && [ "$t" -eq 1 ]; then
            printf '%s\n' "$tout" | grep '^# torch'
            echo "# dpt gemm: $(printf '%s\n' "$dout" | str gemm);" \
                 "one-thread 512^3 GEMM peak $(printf '%s\n' "$dout" | num peak_gflops_per_core) GFLOP/s"
        fi
        for net in fashion minatar; do
            a=$(printf '%s\n' "$tout" | rate $net)
            b=$(printf '%s\n' "$dout" | rate $net)
            [ -n "$a" ] && [ -n "$b" ] || { echo "run $i: no figure for $net, $t thread(s)"; exit 1; }
            echo "$a" >> "$dir/torch.$net.$t"
            echo "$b" >> "$dir/dpt.$net.$t"
            line="$line $net/${t}t torch $a dpt $b;"
        done
    done
    echo "$line"
    i=$((i + 1))
done
printf '%-8s %-8s %12s %12s %10s\n' net threads torch dpt dpt/torch
for net in fashion minatar; do
    for t in 1 2; do
        a=$(med < "$dir/torch.$net.$t")
        b=$(med < "$dir/dpt.$net.$t")
        printf '%-8s %-8s %12s %12s %10s\n' "$net" "$t" "$a" "$b" \
            "$(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.2f", b / a}')"
    done
done
