#!/bin/sh
# TensorBoard's own readers on the event files of dpt runs (PPO, a PPO run
# resumed from an older checkpoint, supervised): every scalar at its step with its value, as in
# result.jsonl. Skipped (exit 77) where python3 or the tensorboard package
# is missing (pip install tensorboard); PYTHON picks the interpreter.
# usage: tensorboard_test.sh PATH_TO_DPT WORK_DIR
dpt="$1" work="$2"
py="${PYTHON:-python3}"
here=$(cd "$(dirname "$0")" && pwd) || exit 1
if ! command -v "$py" >/dev/null 2>&1; then
    echo "skipped: no $py"
    exit 77
fi
if ! "$py" -c "import tensorboard" >/dev/null 2>&1; then
    echo "skipped: the tensorboard package is not installed for $py (pip install tensorboard)"
    exit 77
fi
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
cat > ppo.conf <<'CONF'
job = ppo
env = CartPole-v1
num_envs_per_worker = 4
rollout_fragment_length = 64
sgd_minibatch_size = 64
total_timesteps = 2560
checkpoint_every = 2
eval_episodes = 0
CONF
printf 'job = supervised\ndataset = spirals\nspirals_points = 512\nhidden = 16\nepochs = 3\n' > sup.conf
run() {
    if ! "$dpt" "$@" --quiet > out.txt 2>&1; then
        echo "FAIL dpt $*"
        cat out.txt
        exit 1
    fi
}
run train ppo.conf --set output_dir=ppo
# Stopped after iteration 5 whose checkpoint is lost (as after a kill): the
# resume goes on from 4 and iteration 5 must not show twice.
run train ppo.conf --set output_dir=resumed --set stop_iters=5
rm resumed/checkpoints/checkpoint-00000005.safetensors
run train --resume resumed --set stop_iters=0
run train sup.conf --set output_dir=sup
exec "$py" "$here/tensorboard_readback.py" ppo:timesteps_total resumed:timesteps_total \
    sup:training_iteration
