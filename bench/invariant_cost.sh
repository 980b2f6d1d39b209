#!/bin/sh
# The cost of reduction_order = invariant against fast, each configuration
# run in turns with its fast twin so that a noisy moment of the machine hits
# both:
#   1. towers, MLP 784-256-128-10, batch 128, 1 and 2 devices, chunks of
#      CHUNK rows (dpt bench towers --invariant; medians over its rounds);
#   2. ppo, CartPole with examples/cartpole_ppo.conf's settings (4 envs x 128
#      steps, minibatches of 128, 4 epochs), 1 and 2 devices;
#   3. ddppo, CartPole, 2 worker threads x 4 envs x 128 steps, sync_frac = 1,
#      minibatches of 128 rows per worker (fast) = 256 global (invariant).
# The RL runs train STEPS env steps; their time is the run's time_total_s
# (iterations only), the median over REPS runs. cost = 1 - invariant
# throughput / fast throughput (the median over the turns of each pair's).
#
#   bench/invariant_cost.sh [DPT] [REPS] [STEPS] [CHUNK]
#
# Defaults: build/dpt, 5 reps, 50000 steps, chunks of 16 rows.
dpt="${1:-build/dpt}" reps="${2:-5}" steps="${3:-50000}" chunk="${4:-16}"
if [ ! -x "$dpt" ]; then
    echo "usage: $0 [DPT] [REPS] [STEPS] [CHUNK]" >&2
    exit 2
fi
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
echo "# dpt reduction_order = invariant against fast on ${cpu:-an unknown CPU}"
echo "# $("$dpt" info | grep "^gemm:")"
echo "# command: $0 $dpt $reps $steps $chunk"
echo
echo "## towers (dpt bench towers --mode ps --batch 128 --hidden 256,128 --invariant $chunk)"
"$dpt" bench towers --mode ps --batch 128 --hidden 256,128 --invariant "$chunk" --seconds 10 \
    --rounds 5 | grep -v "^#" || exit 1
echo

cat > "$dir/ppo.conf" <<EOF
job = ppo
env = CartPole-v1
seed = 1
num_envs_per_worker = 4
rollout_fragment_length = 128
sgd_minibatch_size = 128
num_sgd_iter = 4
lr = 2.5e-4
adam_eps = 1e-5
grad_clip = 0.5
policy_hidden = 64,64
checkpoint_every = 0
eval_episodes = 0
reduction_chunk = $chunk
EOF
cat > "$dir/ddppo.conf" <<EOF
job = ddppo
env = CartPole-v1
seed = 1
num_workers = 2
num_envs_per_worker = 4
rollout_fragment_length = 128
num_sgd_iter = 4
lr = 2.5e-4
adam_eps = 1e-5
grad_clip = 0.5
policy_hidden = 64,64
sync_frac = 1
checkpoint_every = 0
eval_episodes = 0
reduction_chunk = $chunk
EOF
# secs CONFIG ARGS...: the run's time_total_s.
secs() {
    conf="$1"
    shift
    rm -rf "$dir/run"
    "$dpt" train "$dir/$conf" --quiet --set output_dir="$dir/run" --set total_timesteps="$steps" \
        "$@" >/dev/null 2>&1 || { echo "FAILED: dpt train $conf $*" >&2; exit 1; }
    tail -1 "$dir/run/result.jsonl" | sed -n 's/.*"time_total_s":\([0-9.e+-]*\).*/\1/p'
}
med() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
echo "## RL jobs ($steps env steps per run, $reps turns; seconds are medians)"
printf '%-32s %10s %10s %8s\n' "job" "fast_s" "invar_s" "cost"
for cfg in "ppo 1" "ppo 2" "ddppo 2"; do
    set -- $cfg
    job=$1 n=$2
    : > "$dir/f" && : > "$dir/i" && : > "$dir/c"
    r=0
    while [ $r -lt "$reps" ]; do
        if [ "$job" = ppo ]; then
            f=$(secs ppo.conf --set num_devices="$n" --set reduction_order=fast) || exit 1
            i=$(secs ppo.conf --set num_devices="$n" --set reduction_order=invariant) || exit 1
        else
            f=$(secs ddppo.conf --set sgd_minibatch_size=128 --set reduction_order=fast) || exit 1
            i=$(secs ddppo.conf --set sgd_minibatch_size=256 --set reduction_order=invariant) ||
                exit 1
        fi
        echo "$f" >> "$dir/f"
        echo "$i" >> "$dir/i"
        awk -v f="$f" -v i="$i" 'BEGIN { print 1 - f / i }' >> "$dir/c"
        r=$((r + 1))
    done
    what="$job, $n $([ "$job" = ppo ] && echo devices || echo workers)"
    awk -v w="$what" -v f="$(med < "$dir/f")" -v i="$(med < "$dir/i")" -v c="$(med < "$dir/c")" \
        'BEGIN { printf "%-32s %10.3f %10.3f %7.1f%%\n", w, f, i, 100 * c }'
done
