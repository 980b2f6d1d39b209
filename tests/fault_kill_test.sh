#!/bin/sh
# kill -9 at random moments of a run that writes a checkpoint and a metrics
# row every iteration (5 ms each), then --resume, over and over. After every
# kill the run directory must hold only complete checkpoints and a complete
# config.conf (tests/tools/run_check), and no checkpoint older than the newest
# before the kill may be gone; every resume must go on; every run that
# reaches its end must have metrics rows 1, 2, ... N with none cut, missing
# or repeated, and the same weights, bitwise, as a run never killed. Then
# SIGINT and SIGTERM at random moments: a checkpoint of the iteration the
# run stopped at, and a resume that ends bitwise where the reference ends.
#
# usage: fault_kill_test.sh DPT RUN_CHECK CKPT_COMPARE WORK [KILLS [SEED]]
# KILLS defaults to 200; SEED (for the random moments) to the process id,
# printed so that a failure can be replayed.
dpt="$1" check="$2" cmp="$3" work="$4" target="${5:-200}" seed="${6:-$$}"
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
passes=0 fails=0
ok() { passes=$((passes + 1)); }
bad() {
    fails=$((fails + 1))
    echo "FAIL $*"
}

iters=200
cat >kill.conf <<EOF
job = ppo
env = CartPole-v1
seed = 3
num_envs_per_worker = 4
rollout_fragment_length = 64
sgd_minibatch_size = 64
num_sgd_iter = 2
policy_hidden = 64,64
total_timesteps = $((iters * 256))
checkpoint_every = 1
keep_checkpoints = 3
eval_episodes = 0
EOF
last=$(printf 'checkpoint-%08d.safetensors' $iters)

t0=$(date +%s%N)
if ! "$dpt" train kill.conf --set output_dir=ref --quiet >ref.out 2>&1; then
    cat ref.out
    echo "the reference run failed"
    exit 1
fi
t1=$(date +%s%N)
echo "reference run: $iters iterations in $(((t1 - t0) / 1000000)) ms; random moments from seed $seed"
t1=$(date +%s)

# Kill moments in ms, uniform in [5, 250): the run's start (loading a
# checkpoint, building envs) takes a few of them.
awk -v n="$((target * 2 + 50))" -v s="$seed" 'BEGIN { srand(s); for (i = 0; i < n; i++) printf "%d\n", 5 + int(rand() * 245) }' >delays

field() { # field NAME LINE: the value after NAME in run_check's line
    printf '%s\n' "$2" | awk -v k="$1" '{ for (i = 1; i < NF; i++) if ($i == k) print $(i + 1) }'
}

kills=0 lost=0 starts=0 runs=0 finished=0 mid_ckpt=0 mid_metrics=0 no_ckpt=0 ahead=0
dir="" fresh=1 newest=0
exec 3<delays
while [ "$kills" -lt "$target" ]; do
    if ! read -r ms <&3; then
        bad "ran out of kill moments"
        break
    fi
    if [ -z "$dir" ]; then
        runs=$((runs + 1))
        dir="run$runs" fresh=1 newest=0
    fi
    # A run with its config.conf is resumed; one killed before writing it
    # (its directory empty or holding a temporary) is started again.
    if [ "$fresh" -eq 1 ]; then
        "$dpt" train kill.conf --set output_dir="$dir" --quiet >"$dir.out" 2>&1 &
    else
        "$dpt" train --resume "$dir" --quiet >"$dir.out" 2>&1 &
    fi
    pid=$!
    starts=$((starts + 1))
    sleep "$(awk -v m="$ms" 'BEGIN { printf "%.3f", m / 1000 }')"
    if kill -KILL "$pid" 2>/dev/null; then
        { wait "$pid"; } 2>/dev/null
        kills=$((kills + 1))
        fresh=1
        [ -d "$dir" ] || continue
        line=$("$check" "$dir" 2>&1)
        if [ $? -ne 0 ]; then
            lost=$((lost + 1))
            bad "kill $kills ($dir, ${ms} ms): $line"
            dir=""
            continue
        fi
        now=$(field newest "$line")
        [ "$(field temporaries "$line")" -gt 0 ] && mid_ckpt=$((mid_ckpt + 1))
        [ "$(field cut_rows "$line")" -gt 0 ] && mid_metrics=$((mid_metrics + 1))
        [ "$(field checkpoints "$line")" -eq 0 ] && no_ckpt=$((no_ckpt + 1))
        [ "$(field last "$line")" -gt "$now" ] && ahead=$((ahead + 1))
        if [ "$now" -lt "$newest" ]; then
            lost=$((lost + 1))
            bad "kill $kills ($dir): newest checkpoint went from $newest to $now"
        else
            ok
        fi
        newest=$now
        [ "$(field config "$line")" -eq 1 ] && fresh=0
    else
        wait "$pid"
        rc=$?
        if [ "$rc" -ne 0 ]; then
            lost=$((lost + 1))
            bad "$dir: a start ended by itself with exit $rc: $(tail -3 "$dir.out")"
            dir=""
            continue
        fi
        finished=$((finished + 1))
        line=$("$check" "$dir" --final 2>&1)
        if [ $? -eq 0 ]; then ok; else bad "$dir finished: $line"; fi
        if [ "$(field last "$line")" -ne "$iters" ]; then
            bad "$dir finished at iteration $(field last "$line"), not $iters"
        fi
        if "$cmp" "ref/checkpoints/$last" "$dir/checkpoints/$last" >cmp.out 2>&1; then
            ok
        else
            bad "$dir: final weights differ from the run never killed: $(cat cmp.out)"
        fi
        rm -rf "$dir" "$dir.out"
        dir=""
    fi
done
exec 3<&-
# The last run: resumed once more without a kill, it must finish the same.
if [ -n "$dir" ]; then
    if [ "$fresh" -eq 0 ]; then
        "$dpt" train --resume "$dir" --quiet >"$dir.out" 2>&1
    else
        "$dpt" train kill.conf --set output_dir="$dir" --quiet >"$dir.out" 2>&1
    fi
    rc=$?
    line=$("$check" "$dir" --final 2>&1)
    crc=$?
    if [ "$rc" -eq 0 ] && [ "$crc" -eq 0 ] && "$cmp" "ref/checkpoints/$last" "$dir/checkpoints/$last" >cmp.out 2>&1; then
        ok
        finished=$((finished + 1))
    else
        bad "$dir: the last resume (exit $rc): $line $(cat cmp.out 2>/dev/null)"
    fi
fi
t2=$(date +%s)

# SIGINT and SIGTERM at random moments (20 to 260 ms) of runs that write
# no checkpoint of their own (checkpoint_every = 0): each must finish its
# iteration, write a checkpoint of it and exit 130 or 143 (0 when it
# finished first); the resumed run must end with the reference's weights.
nsig=${FAULT_SIGNALS:-20} signals=0 caught=0 sig_done=0
awk -v n="$nsig" -v s="$seed" 'BEGIN { srand(s + 1); for (i = 0; i < n; i++) printf "%d\n", 20 + int(rand() * 240) }' >sig_delays
exec 3<sig_delays
while read -r ms <&3; do
    signals=$((signals + 1))
    sig=INT want=130
    [ $((signals % 2)) -eq 0 ] && sig=TERM want=143
    d="sig$signals"
    "$dpt" train kill.conf --set output_dir="$d" --set checkpoint_every=0 --quiet >"$d.out" 2>&1 &
    pid=$!
    sleep "$(awk -v m="$ms" 'BEGIN { printf "%.3f", m / 1000 }')"
    kill -"$sig" "$pid" 2>/dev/null
    wait "$pid"
    rc=$?
    line=$("$check" "$d" 2>&1)
    crc=$?
    if [ "$rc" -eq 0 ]; then
        sig_done=$((sig_done + 1))
    elif [ "$rc" -eq "$want" ] && [ "$crc" -eq 0 ] &&
        [ "$(field newest "$line")" -eq "$(field last "$line")" ] && [ "$(field last "$line")" -gt 0 ]; then
        caught=$((caught + 1))
    else
        bad "SIG$sig after ${ms} ms: exit $rc (want $want); $line; $(tail -2 "$d.out")"
        continue
    fi
    "$dpt" train --resume "$d" --quiet >"$d.out" 2>&1
    rc=$?
    if [ "$rc" -eq 0 ] && "$cmp" "ref/checkpoints/$last" "$d/checkpoints/$last" >cmp.out 2>&1; then
        ok
        rm -rf "$d" "$d.out"
    else
        bad "SIG$sig after ${ms} ms: the resumed run (exit $rc): $(cat cmp.out)"
    fi
done
exec 3<&-
t3=$(date +%s)
echo "signals: $caught of $signals caught with a checkpoint of the iteration they stopped" \
    "($sig_done came after the run had finished), every run resumed to the reference's" \
    "weights; $((t3 - t2)) s"
echo "kills: $((kills - lost)) survived of $kills: $mid_ckpt during a checkpoint write, $ahead" \
    "with metrics rows past the newest checkpoint (cut back on resume), $mid_metrics with a" \
    "metrics row cut short, $no_ckpt before the first checkpoint; $starts starts; runs that" \
    "finished with the weights of the run never killed: $finished of $runs; $((t2 - t1)) s"
echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
