#!/usr/bin/env bash
# ckpt_same.sh OLD_BUILD NEW_BUILD: trains the same short runs with two
# builds' `dpt` and compares their final checkpoints' tensors bitwise
# (tests/tools/ckpt_compare; metadata holds wall times and the commit, so
# whole files differ). A refactor that must not change what users see runs
# it against the build of the commit before it.
#   supervised (spirals, 2 towers), PPO (CartPole, 1 and 2 devices),
#   DD-PPO (2 worker threads), sync_replicas (N = R = 2, threads; spirals
#   and bags), and under mpirun: supervised (2 ranks), DD-PPO (2 ranks),
#   sync_replicas (3 ranks: 1 service + 2 workers).
set -euo pipefail
old=$(cd "$1" && pwd)
new=$(cd "$2" && pwd)
cmp="$new/tests/ckpt_compare"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
root=$(cd "$(dirname "$0")/.." && pwd)
fail=0
run() { # run NAME NP CONF SETS...
    local name=$1 np=$2 conf=$3
    shift 3
    for side in old new; do
        local bin=$old/dpt
        [ "$side" = new ] && bin=$new/dpt
        local out="$work/$name-$side"
        if [ "$np" -gt 1 ]; then
            mpirun --oversubscribe -np "$np" "$bin" train "$root/$conf" \
                --set output_dir="$out" "$@" >"$out.log" 2>&1
        else
            "$bin" train "$root/$conf" --set output_dir="$out" "$@" >"$out.log" 2>&1
        fi
    done
    local a b
    a=$(ls "$work/$name-old/checkpoints"/checkpoint-*.safetensors | tail -1)
    b=$(ls "$work/$name-new/checkpoints"/checkpoint-*.safetensors | tail -1)
    if "$cmp" "$a" "$b" >"$work/$name.cmp"; then
        echo "same: $name ($(basename "$a"))"
    else
        echo "DIFFERENT: $name: $(cat "$work/$name.cmp")"
        fail=1
    fi
}
run supervised 1 examples/fashion_mnist_mlp.conf --set dataset=spirals --set num_devices=2 \
    --set epochs=3
run ppo_1dev 1 examples/cartpole_ppo.conf --set stop_iters=4 --set num_devices=1
run ppo_2dev 1 examples/cartpole_ppo.conf --set stop_iters=4 --set num_devices=2
run ddppo_2w 1 examples/cartpole_ddppo.conf --set stop_iters=4 --set stop_reward=0
run sr_spirals 1 examples/fashion_mnist_sync_replicas.conf --set dataset=spirals \
    --set stop_iters=3 --set total_num_replicas=2 --set replicas_to_aggregate=2
run sr_bags 1 examples/fashion_mnist_sync_replicas.conf --set dataset=bags --set stop_iters=3 \
    --set total_num_replicas=2 --set replicas_to_aggregate=2
if command -v mpirun >/dev/null && [ -x "$new/tests/mpi_comm" ]; then
    run mpi_supervised 2 examples/fashion_mnist_mlp.conf --set dataset=spirals --set epochs=3
    run mpi_ddppo 2 examples/cartpole_ddppo.conf --set stop_iters=4 --set stop_reward=0 \
        --set num_workers=1
    run mpi_sr 3 examples/fashion_mnist_sync_replicas.conf --set dataset=spirals \
        --set stop_iters=3 --set total_num_replicas=2 --set replicas_to_aggregate=2
else
    echo "skipped: the mpirun cases (no MPI in this build)"
fi
exit $fail
