#!/bin/sh
# Measure dpt's allreduce at P = 2 for docs/SCALING.md: per backend (threads;
# MPI over shared memory; MPI with Open MPI's TCP transport forced on the
# loopback interface), per algorithm (native, ring, tree), one sweep of the
# powers of 2 from 4 B to 64 MiB (the fit's training sizes) and, between
# them, 3 x 2^k from 12 B to 48 MiB (held out), measured in increasing order
# so that a held-out size and its two training neighbours are measured
# within seconds of each other (this VM's speed changes by up to 2x from
# one minute to the next). ROUNDS rounds of all of it, one after the other;
# scaling_fit.py keeps each size's fastest round. Writes one JSON object
# per line to OUTDIR/<transport>.jsonl and, with --ranks, P = 3..8 over MPI
# shared memory (algorithm auto, 4 KiB and 1 MiB) to OUTDIR/mpi-shm-p3-8.jsonl.
#
#   bench/scaling_run.sh [DPT] [OUTDIR] [REPS] [ROUNDS] [--ranks]
#   python3 bench/scaling_fit.py OUTDIR
set -eu
DPT=${1:-build/dpt}
OUT=${2:-scaling-out}
REPS=${3:-3}
ROUNDS=${4:-3}
RANKS=${5:-}
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
TCP="--mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo"
: >"$OUT/threads.jsonl"
: >"$OUT/mpi-shm.jsonl"
: >"$OUT/mpi-tcp.jsonl"
round=1
while [ "$round" -le "$ROUNDS" ]; do
    for alg in native ring tree; do
        SIZES="--min-bytes 4 --max-bytes 67108864 --half-octaves --reps $REPS --json"
        start=$(date +%s)
        "$DPT" bench allreduce --backend threads --participants 2 --algorithm $alg $SIZES \
            >>"$OUT/threads.jsonl"
        mpirun --oversubscribe -np 2 "$DPT" bench allreduce --backend mpi --algorithm $alg \
            $SIZES >>"$OUT/mpi-shm.jsonl"
        # shellcheck disable=SC2086
        mpirun --oversubscribe -np 2 $TCP "$DPT" bench allreduce --backend mpi \
            --algorithm $alg $SIZES >>"$OUT/mpi-tcp.jsonl"
        echo "round $round $alg: $(($(date +%s) - start)) s" >&2
    done
    round=$((round + 1))
done
if [ "$RANKS" = "--ranks" ]; then
    : >"$OUT/mpi-shm-p3-8.jsonl"
    for p in 3 4 5 6 7 8; do
        for b in 4096 1048576; do
            mpirun --oversubscribe -np $p "$DPT" bench allreduce --backend mpi \
                --min-bytes $b --max-bytes $b --iters 20 --reps 3 --json \
                >>"$OUT/mpi-shm-p3-8.jsonl"
        done
    done
fi
