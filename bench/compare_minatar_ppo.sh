#!/bin/sh
# dpt PPO against a PyTorch PPO in the CleanRL style on MinAtar, side by side:
# for each game and seed, dpt trains examples/minatar_<game>_ppo.conf for
# STEPS env steps (no evaluation episodes, so both times are training alone),
# then bench/torch_minatar_ppo.py trains the same network with the same
# settings on the minatar package. dpt's encoder is given the reference's
# init (CleanRL's orthogonal, gain sqrt 2; the heads have it already), which
# the examples leave at the layers' default (docs/BENCHMARKS.md, "MinAtar"). Prints each run's mean return over the
# last 100 training episodes and its wall time, then the means per game and
# the ratio of the mean wall times.
#   bench/compare_minatar_ppo.sh DPT PYTHON [STEPS] [SEEDS] [GAMES]
# Defaults: 2000000 steps, seeds "1 2 3", games "breakout space_invaders".
# PYTHON needs torch, numpy and minatar (pip install --no-deps minatar==1.0.15).
dpt="$1" py="$2" steps="${3:-2000000}" seeds="${4:-1 2 3}" games="${5:-breakout space_invaders}"
if [ -z "$dpt" ] || [ -z "$py" ]; then
    echo "usage: $0 DPT PYTHON [STEPS] [SEEDS] [GAMES]" >&2
    exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cpu=$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
isa=$(grep -m1 -o -w "avx512f" /proc/cpuinfo || echo "avx2 or less")
echo "# $cpu ($isa); $("$dpt" info | head -1); $("$py" -c 'import torch; print("torch", torch.__version__)' 2>/dev/null)"
echo "# $steps env steps per run; return = mean of the last 100 training episodes"
printf '%-15s %5s %12s %10s %12s %10s\n' game seed dpt_return dpt_s torch_return torch_s
net="conv(32,k=2,pad=same,init=orthogonal,gain=1.4142135) relu avgpool(2) flatten"
net="$net dense(64,init=orthogonal,gain=1.4142135) relu"
rows="$work/rows"
: >"$rows"
for game in $games; do
    for seed in $seeds; do
        out=$("$dpt" train "$here/../examples/minatar_${game}_ppo.conf" --set seed="$seed" \
            --set "network=$net" \
            --set total_timesteps="$steps" --set evaluation_interval=1000000000 --set eval_episodes=0 \
            --set checkpoint_every=0 --set output_dir="$work/dpt_${game}_$seed" 2>&1) || {
            echo "dpt failed: $out" >&2
            exit 1
        }
        # "dpt train: N env steps in T s (R steps/s); return X (mean of last 100 episodes), ..."
        line=$(printf '%s\n' "$out" | grep "env steps in")
        dsec=$(printf '%s\n' "$line" | sed -E 's/.* in ([0-9.]+) s .*/\1/')
        dret=$(printf '%s\n' "$line" | sed -E 's/.*; return ([-0-9.]+) \(mean of last 100.*/\1/')
        tj=$("$py" "$here/torch_minatar_ppo.py" --game "$game" --seed "$seed" --steps "$steps" --json) || {
            echo "torch failed: $tj" >&2
            exit 1
        }
        case "$tj" in skipped*) echo "$tj"; exit 0 ;; esac
        tret=$(printf '%s\n' "$tj" | sed -E 's/.*"return_last100": ([-0-9.naN]+).*/\1/')
        tsec=$(printf '%s\n' "$tj" | sed -E 's/.*"wall_s": ([0-9.]+).*/\1/')
        printf '%-15s %5s %12s %10s %12s %10s\n' "$game" "$seed" "$dret" "$dsec" "$tret" "$tsec"
        echo "$game $dret $dsec $tret $tsec" >>"$rows"
    done
done
echo "# means per game"
awk '{ n[$1]++; dr[$1] += $2; ds[$1] += $3; tr[$1] += $4; ts[$1] += $5 }
     END { for (g in n) printf "%-15s dpt return %.2f in %.1f s; torch return %.2f in %.1f s; dpt/torch return %.3f; torch/dpt time %.1fx\n",
           g, dr[g]/n[g], ds[g]/n[g], tr[g]/n[g], ts[g]/n[g], (tr[g] ? dr[g]/tr[g] : 0), ts[g]/ds[g] }' "$rows"
