#!/bin/sh
# Distributed failures of `dpt train` (DD-PPO, comm_timeout_s = 5): a worker
# thread whose env fails; under mpirun, a rank killed (kill -9), a rank
# stopped (SIGSTOP) before its first collective and one stopped after it, a
# rank started with another config, a rank whose env fails. Every time the
# job must end non-zero within comm_timeout_s + 10 s with a message naming
# the failure, leave no process behind, and keep its last checkpoint
# loadable (tests/tools/run_check, then `dpt eval` on it).
#
# usage: fault_dist_test.sh DPT RUN_CHECK FAULT_ENV_PLUGIN WORK
# The MPI cases are skipped (with the reason) when the build has no MPI or
# there is no mpirun; the threads case always runs.
dpt="$1" check="$2" plugin="$3" work="$4"
# ok, bad, rank_pid (found before the cd into the work directory)
. "$(cd "$(dirname "$0")" && pwd)/fault_common.sh"
. "$(cd "$(dirname "$0")" && pwd)/unstick.sh"
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
timeout_s=5
limit=$((timeout_s + 10))
# A token in every output_dir: the processes of this run, and only they,
# match it.
token="fdist$$"
now_ms() { echo $(($(date +%s%N) / 1000000)); }

cat >dd.conf <<EOF
job = ddppo
env = CartPole-v1
num_workers = 1
num_envs_per_worker = 2
rollout_fragment_length = 64
sgd_minibatch_size = 64
num_sgd_iter = 4
total_timesteps = 100000000
checkpoint_every = 5
eval_episodes = 0
comm_timeout_s = $timeout_s
EOF

# start NAME COMMAND...: runs the command in the background under a 90 s
# guard, output to NAME.out; sets $job.
start() {
    name="$1"
    shift
    timeout -k 10 90 "$@" >"$name.out" 2>&1 &
    job=$!
    unstick "$name.out" "output_dir=${token}_$name" "$job" </dev/null >/dev/null 2>&1 &
}
# finish NAME: waits for $job; sets $rc and $secs (since $t0, in ms -> s).
finish() {
    wait "$job"
    rc=$?
    secs=$((($(now_ms) - t0 + 999) / 1000))
    echo "== $1: exit $rc, ${secs} s after the fault"
    unstuck_note "$1.out"
    sed 's/^/   | /' "$1.out" | tail -8
}
# wait_file PATH: up to 30 s.
wait_file() {
    i=0
    while [ ! -e "$1" ] && [ $i -lt 300 ]; do
        sleep 0.1
        i=$((i + 1))
    done
    [ -e "$1" ]
}
# expect NAME: the common checks of a failure case, with the message $2.
expect_failure() {
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ]; then ok "$1: exit $rc"; else bad "$1: exit $rc"; fi
    if [ "$secs" -le "$limit" ]; then
        ok "$1: ended ${secs} s after the fault (limit ${limit} s)"
    else
        bad "$1: ended ${secs} s after the fault (limit ${limit} s)"
    fi
    if grep -q -- "$2" "$1.out"; then ok "$1: says \"$2\""; else bad "$1: no \"$2\" in its output"; fi
    sleep 1
    left=$(pgrep -f -- "output_dir=${token}_$1" 2>/dev/null)
    if [ -z "$left" ]; then
        ok "$1: no process left"
    else
        bad "$1: processes left behind: $left (killed now)"
        kill -CONT $left 2>/dev/null
        kill -KILL $left 2>/dev/null
    fi
}
# last_checkpoint_ok NAME: the run directory holds only complete files and
# its newest checkpoint evaluates.
last_checkpoint_ok() {
    d="${token}_$1"
    line=$("$check" "$d" 2>&1)
    crc=$?
    last=$(ls "$d/checkpoints" 2>/dev/null | grep '^checkpoint-.*\.safetensors$' | tail -1)
    if [ "$crc" -eq 0 ] && [ -n "$last" ] && "$dpt" eval "$d/checkpoints/$last" --episodes 1 >eval.out 2>&1; then
        ok "$1: last checkpoint $last loads and evaluates ($line)"
    else
        bad "$1: last checkpoint: $line; $last; $(tail -2 eval.out)"
    fi
}

# ---- one process: a worker thread's env fails -------------------------------------
t0=$(now_ms)
start thread env DPT_TEST_FAIL_AT=3000 "$dpt" train --quiet dd.conf --set env="$plugin" --set num_workers=2 \
    --set checkpoint_every=1 --set output_dir="${token}_thread"
finish thread
expect_failure thread "returned reward nan (not finite)"
if [ "$rc" -eq 2 ]; then ok "thread: exit 2 (bad input: the env's numbers)"; else bad "thread: exit $rc, not 2"; fi
# The failed worker aborts the workers' communicator: the other does not
# wait for comm_timeout_s.
if [ "$secs" -le 3 ]; then ok "thread: the other worker did not wait for the timeout"; else bad "thread: took ${secs} s"; fi
last_checkpoint_ok thread

# ---- under mpirun ------------------------------------------------------------------
if ! "$dpt" info | grep -q "^  mpi    yes"; then
    echo "skipped: the MPI cases (this build has no MPI)"
elif ! command -v mpirun >/dev/null 2>&1; then
    echo "skipped: the MPI cases (no mpirun)"
else
    # A rank killed after the first checkpoints.
    start killed mpirun --oversubscribe -np 2 "$dpt" train --quiet dd.conf --set output_dir="${token}_killed"
    wait_file "${token}_killed/checkpoints/checkpoint-00000005.safetensors"
    victim=$(rank_pid "${token}_killed" 1)
    t0=$(now_ms)
    [ -n "$victim" ] && kill -KILL "$victim"
    finish killed
    expect_failure killed "signal 9"
    last_checkpoint_ok killed

    # A rank stopped as it starts, before any collective (inside MPI_Init).
    start stop_early mpirun --oversubscribe -np 2 "$dpt" train --quiet dd.conf --set output_dir="${token}_stop_early"
    victim="" i=0
    while [ -z "$victim" ] && [ $i -lt 2000 ]; do
        victim=$(rank_pid "${token}_stop_early" 1)
        i=$((i + 1))
    done
    t0=$(now_ms)
    [ -n "$victim" ] && kill -STOP "$victim"
    finish stop_early
    expect_failure stop_early "joining the MPI world of 2 ranks did not complete within comm_timeout_s = 5 s"
    if [ ! -e "${token}_stop_early/config.conf" ]; then
        ok "stop_early: nothing was written"
    else
        bad "stop_early: a run directory was written"
    fi

    # A rank stopped after the first checkpoints: the collective times out.
    start stop_late mpirun --oversubscribe -np 2 "$dpt" train --quiet dd.conf --set output_dir="${token}_stop_late"
    wait_file "${token}_stop_late/checkpoints/checkpoint-00000005.safetensors"
    victim=$(rank_pid "${token}_stop_late" 1)
    t0=$(now_ms)
    [ -n "$victim" ] && kill -STOP "$victim"
    finish stop_late
    expect_failure stop_late "timed out after 5 s; not arrived: rank 1"
    last_checkpoint_ok stop_late

    # A rank with another config: every rank refuses it (exit 2), nothing written.
    t0=$(now_ms)
    start config mpirun --oversubscribe -np 1 "$dpt" train --quiet dd.conf --set output_dir="${token}_config" : \
        -np 1 "$dpt" train --quiet dd.conf --set output_dir="${token}_config" --set lr=0.001
    finish config
    expect_failure config "differing from rank 0: lr (rank 1)"
    if [ "$rc" -eq 2 ]; then ok "config: exit 2"; else bad "config: exit $rc, not 2"; fi
    if [ ! -e "${token}_config" ]; then ok "config: nothing was written"; else bad "config: a run directory was written"; fi

    # A rank whose env fails: it aborts the job; rank 0 does not wait.
    t0=$(now_ms)
    start rank_env mpirun --oversubscribe -np 1 "$dpt" train --quiet dd.conf --set env="$plugin" --set checkpoint_every=1 \
        --set output_dir="${token}_rank_env" : -np 1 env DPT_TEST_FAIL_AT=3000 "$dpt" train --quiet dd.conf \
        --set env="$plugin" --set checkpoint_every=1 --set output_dir="${token}_rank_env"
    finish rank_env
    expect_failure rank_env "returned reward nan (not finite)"
    last_checkpoint_ok rank_env
fi

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
