#!/bin/sh
# PPO with an LSTM policy against the same run with a feed-forward (MLP)
# policy (use_lstm = false), on StatelessCartPole-v1
# (examples/stateless_cartpole_lstm.conf) or on the config in $CONF, one
# seed after another: the runs are sequential, never side by side, so their
# times compare. Prints per run the env steps until the mean return
# (RLlib's episode_reward_mean, the last 100 episodes) first reached
# TARGET, the mean return at the end, the greedy evaluation of the final
# policy (20 episodes, dpt eval), and the wall time of the training run.
#   usage: [CONF=FILE] bench/lstm_vs_mlp.sh [DPT [WORK_DIR [SEEDS [TARGET [--set KEY=VALUE ...]]]]]
#   defaults: build/dpt, bench_lstm_vs_mlp, "1 2 3", 400; --set options go to
#   every run (e.g. --set total_timesteps=200000 for a quick look)
args="$*"
dpt=${1:-build/dpt} work=${2:-bench_lstm_vs_mlp} seeds=${3:-"1 2 3"} target=${4:-400}
shift $(($# < 4 ? $# : 4))
conf=${CONF:-$(dirname "$0")/../examples/stateless_cartpole_lstm.conf}
[ -f "$conf" ] || { echo "lstm_vs_mlp: no config $conf" >&2; exit 2; }
env=$(sed -n 's/^env *= *//p' "$conf")
[ -x "$dpt" ] || { echo "lstm_vs_mlp: $dpt is not an executable (build first: make)" >&2; exit 2; }
[ -e "$work" ] && { echo "lstm_vs_mlp: $work exists; give another WORK_DIR" >&2; exit 2; }
mkdir -p "$work" || exit 1

# The first timesteps_total whose episode_reward_mean >= target, and the
# last episode_reward_mean, from a run's progress.csv.
summarize() {
    awk -F, -v target="$target" '
        NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
        { ts = $col["timesteps_total"]; r = $col["episode_reward_mean"]
          if (hit == "" && r + 0 >= target) hit = ts; last = r; steps = ts }
        END { printf "%s %.1f %s", (hit == "" ? "-" : hit), last, steps }' "$1"
}

job=$(sed -n 's/^job *= *//p' "$conf")
echo "$env ($(basename "$conf"), job $job${*:+, and $*}), target mean return $target"
echo "$("$dpt" --version | head -1); $(nproc) cores"
printf '%-6s %5s %16s %12s %12s %10s\n' policy seed steps_to_target final_return greedy_eval time_s
for policy in lstm mlp; do
    [ "$policy" = lstm ] && use=true || use=false
    for seed in $seeds; do
        dir="$work/$policy-seed$seed"
        t0=$(date +%s.%N)
        out=$("$dpt" train "$conf" --set use_lstm=$use --set seed="$seed" --set output_dir="$dir" \
              "$@" --quiet 2>&1) || { echo "lstm_vs_mlp: $policy seed $seed failed:"; echo "$out"; exit 1; }
        t1=$(date +%s.%N)
        ev=$("$dpt" eval "$dir" --episodes 20 | sed -n 's/.*mean return \(-\{0,1\}[0-9.]*\).*/\1/p')
        sum=$(summarize "$dir/progress.csv")
        printf '%-6s %5s %16s %12s %12s %10.1f\n' "$policy" "$seed" "${sum%% *}" \
            "$(echo "$sum" | cut -d' ' -f2)" "${ev:--}" "$(awk "BEGIN { print $t1 - $t0 }")"
    done
done
echo "command: bench/lstm_vs_mlp.sh $args"
