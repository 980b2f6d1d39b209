#!/bin/sh
# dpt against PyTorch DistributedDataParallel (gloo), 2 processes x 1 thread
# each, on the Fashion-MNIST MLP (784-256-128-10, ReLU), Adam, global batch
# 128 (64 rows per process), taking turns run by run; medians at the end.
#
#   bench/compare_ddp_torch.sh [PYTHON] [ROUNDS]
#
# PYTHON: an interpreter with torch (default python3); skipped (exit 0)
# without it, without mpirun or without the Fashion-MNIST files. dpt: one
# epoch of examples/fashion_mnist_mlp.conf under `mpirun -np 2` with one
# device per rank, samples/s of its training time (result.jsonl); PyTorch:
# bench/ddp_mlp.py, the same model, optimizer and batch on random data of
# the same shapes, 468 timed steps (one epoch) after 20 warm-up steps.
py="${1:-python3}" rounds="${2:-5}"
dpt=./build/dpt
here=$(dirname "$0")
[ -x "$dpt" ] || { echo "build dpt first (make)"; exit 2; }
"$py" -c "import torch.distributed" 2>/dev/null || { echo "skipped: $py has no torch"; exit 0; }
command -v mpirun >/dev/null || { echo "skipped: no mpirun"; exit 0; }
[ -f /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ] ||
    { echo "skipped: no Fashion-MNIST (apt-get install dataset-fashion-mnist)"; exit 0; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
med() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
dir=$(mktemp -d) || exit 1
echo "# CPU: $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1), $(nproc) cores"
echo "# torch: OMP_NUM_THREADS=1 $py $here/ddp_mlp.py --procs 2 --batch 128 --steps 468"
echo "# dpt:   mpirun --oversubscribe -np 2 $dpt train examples/fashion_mnist_mlp.conf" \
     "--set num_devices=1 --set epochs=1 --set checkpoint_every=0"
i=0
while [ $i -lt "$rounds" ]; do
    t=$(OMP_NUM_THREADS=1 "$py" "$here/ddp_mlp.py" --procs 2 --batch 128 --steps 468 \
        --port $((29531 + i)) 2>&1 | sed -n 's/^ddp samples\/s //p')
    rm -rf "$dir/run"
    mpirun --oversubscribe -np 2 "$dpt" train examples/fashion_mnist_mlp.conf --quiet \
        --set num_devices=1 --set epochs=1 --set checkpoint_every=0 --set tensorboard_dir=off \
        --set output_dir="$dir/run" >/dev/null 2>&1
    d=$(tail -1 "$dir/run/result.jsonl" | tr ',' '\n' | sed -n 's/^"samples_per_s"://p')
    echo "round $i: torch DDP $t samples/s, dpt $d samples/s"
    echo "$t" >> "$dir/t"
    echo "$d" >> "$dir/d"
    i=$((i + 1))
done
mt=$(med < "$dir/t")
md=$(med < "$dir/d")
echo "median: torch DDP $mt, dpt $md samples/s; dpt/DDP $(awk -v a="$md" -v b="$mt" 'BEGIN {printf "%.2f", a / b}')"
rm -rf "$dir"
