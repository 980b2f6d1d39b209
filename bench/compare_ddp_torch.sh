#!/bin/sh
# dpt across 2 MPI ranks x 1 device against PyTorch DistributedDataParallel
# (gloo, 2 processes x 1 thread) on the Fashion-MNIST MLP 784-256-128-10
# (ReLU), Adam, global batch 128 (64 per process on both sides), taking turns
# run by run; prints samples/s of the last of 2 epochs' training (evaluation
# excluded on both sides), the medians and the ratio.
#
#   bench/compare_ddp_torch.sh PYTHON [REPS] [DATA_DIR]
#
# PYTHON is an interpreter with torch 2.x (gloo); REPS rounds (default 3);
# DATA_DIR holds the Fashion-MNIST IDX files (default: the Debian package's).
# Needs a built ./build/dpt with MPI and mpirun. Under root, set
# OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1.
py="${1:-}" reps="${2:-3}" data="${3:-/usr/share/datasets/fashion-mnist}"
dpt=./build/dpt
here=$(dirname "$0")
[ -n "$py" ] || { echo "usage: $0 PYTHON [REPS] [DATA_DIR]"; exit 2; }
[ -x "$dpt" ] || { echo "build dpt first (make)"; exit 2; }
"$py" -c "import torch, torch.distributed as d; assert d.is_gloo_available()" 2>/dev/null ||
    { echo "skipped: $py has no torch with gloo"; exit 0; }
command -v mpirun >/dev/null 2>&1 || { echo "skipped: no mpirun"; exit 0; }
[ -d "$data" ] || { echo "skipped: no Fashion-MNIST in $data"; exit 0; }
fair="OMP_WAIT_POLICY=PASSIVE MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=4294967296"
fair="$fair OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell} OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1"
med() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
rate() { awk '{for (k = 1; k <= NF; k++) if ($k == "samples/s") print $(k-1)}'; }
dir=$(mktemp -d) || exit 1
sets="data_dir=$data epochs=2 num_devices=1 checkpoint_every=0 lr_schedule=constant lr_end=0"
dcmd="mpirun --oversubscribe -np 2 $dpt train examples/fashion_mnist_mlp.conf"
for s in $sets; do dcmd="$dcmd --set $s"; done
tcmd="env $fair $py $here/torch_ddp_mlp.py $data --procs 2 --batch 128 --epochs 2"
echo "# MLP 784-256-128-10, Adam, global batch 128, 2 processes x 1 thread, samples/s"
echo "# dpt:   $dcmd"
echo "# torch: $tcmd"
i=0
while [ $i -lt "$reps" ]; do
    d=$($dcmd 2>&1 | tr '\r' '\n' | grep 'epoch 2/2 .*test loss' | rate | tail -1)
    t=$($tcmd 2>&1 | tail -1 | rate)
    echo "run $i: dpt $d, torch DDP $t"
    echo "$d" >>"$dir/d"; echo "$t" >>"$dir/t"
    i=$((i + 1))
done
md=$(med <"$dir/d"); mt=$(med <"$dir/t")
echo "median: dpt $md, torch DDP $mt samples/s, dpt/DDP $(awk -v a="$md" -v b="$mt" 'BEGIN {printf "%.2f", a / b}')"
rm -rf "$dir"
