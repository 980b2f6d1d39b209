#!/bin/sh
# Failures of APPO under mpirun (rank 0 learns, the other ranks sample;
# comm_timeout_s = 5), by role:
#   stopped_sampler  one of two sampler ranks stopped (SIGSTOP) early in the
#                    run: rank 0 goes on learning from the other until
#                    total_timesteps, writes its last checkpoint, then fails
#                    (exit 1) naming the stopped rank, which did not answer
#                    the end of the run; the healthy ranks are not blamed.
#   term_stopped     the only sampler rank stopped, then SIGTERM to rank 0:
#                    the iteration ends at once, rank 0 writes its checkpoint
#                    and exits 143, reporting the rank that did not answer;
#                    `dpt train --resume` goes on from that checkpoint.
#   term_healthy     SIGTERM to rank 0 with every rank healthy: exit 143,
#                    every rank answered.
#   term_sampler     SIGTERM to sampler rank 2 alone: it asks rank 0 to stop
#                    the run; rank 0 writes its checkpoint and exits 143,
#                    every rank answered.
# Each run is bounded (150 s, then SIGKILL 10 s later: a launcher that waits
# on a stopped rank cannot hold the test); the checks are on what the run did
# (exit codes, messages, files), never on how long it took. Each case prints
# its time, and a run that overstays lists the processes left.
#
# usage: fault_appo_test.sh DPT MPIEXEC WORK
# Skipped (77) without MPI in the build or without mpirun.
dpt="$1" mpiexec="$2" work="$3"
examples="$(cd "$(dirname "$0")/../examples" && pwd)"
if [ -z "$mpiexec" ] || [ ! -x "$mpiexec" ] || ! "$dpt" info | grep -q "^  mpi    yes"; then
    echo "skipped: no MPI in this build or no mpirun"
    exit 77
fi
# ok, bad, rank_pid (found before the cd into the work directory)
. "$(cd "$(dirname "$0")" && pwd)/fault_common.sh"
. "$(cd "$(dirname "$0")" && pwd)/unstick.sh"
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
conf="$examples/cartpole_appo.conf"
# A token in every output_dir: the processes of this test, and only they,
# match it.
token="fappo$$"
metric() { tail -1 "$1" | tr ',{}' '\n\n\n' | sed -n "s/^\"$2\"://p" | head -1; }

# start NAME NP ARGS...: the run in the background, output to NAME.out;
# sets $job.
start() {
    name="$1" np="$2"
    shift 2
    t_start=$(date +%s)
    timeout -k 10 150 "$mpiexec" --oversubscribe -np "$np" "$dpt" train "$conf" --quiet \
        --set comm_timeout_s=5 --set eval_episodes=0 --set output_dir="${token}_$name" "$@" \
        >"$name.out" 2>&1 </dev/null &
    job=$!
    unstick "$name.out" "output_dir=${token}_$name" "$job" </dev/null >/dev/null 2>&1 &
    # What is left of the run 140 s in, when it should long have ended.
    (sleep 140 && ps -o pid,stat,etime,wchan:20,args -p \
        "$(pgrep -f -- "output_dir=${token}_$name" | tr '\n' ',' | sed 's/,$//')" \
        >"$name.ps" 2>&1) </dev/null >/dev/null 2>&1 &
    watch=$!
}
# first_result NAME: waits (up to 60 s) for the run's first iteration.
first_result() {
    i=0
    while [ ! -s "${token}_$1/result.jsonl" ] && [ $i -lt 600 ]; do
        sleep 0.1
        i=$((i + 1))
    done
    [ -s "${token}_$1/result.jsonl" ]
}
# finish NAME: waits for the run; sets $rc, shows its last lines, resumes
# and kills what is left of it.
finish() {
    wait "$job"
    rc=$?
    pkill -P "$watch" 2>/dev/null
    kill "$watch" 2>/dev/null
    echo "== $1: exit $rc after $(($(date +%s) - t_start)) s"
    unstuck_note "$1.out"
    grep -v '^\[' "$1.out" | sed 's/^/   | /' | tail -8
    if [ -s "$1.ps" ]; then
        echo "   the processes 140 s in:"
        cut -c1-160 "$1.ps" | sed 's/^/   | /'
    fi
    left=$(pgrep -f -- "output_dir=${token}_$1" 2>/dev/null)
    if [ -n "$left" ]; then
        kill -CONT $left 2>/dev/null
        kill -KILL $left 2>/dev/null
    fi
}
# last_checkpoint NAME: the newest checkpoint's iteration ("" when none).
last_checkpoint() {
    ls "${token}_$1/checkpoints" 2>/dev/null | sed -n 's/^checkpoint-0*\([0-9][0-9]*\)\.safetensors$/\1/p' |
        sort -n | tail -1
}

# ---- stopped_sampler: -np 3, rank 2 stopped after the first iteration ------------
start stopped_sampler 3 --set total_timesteps=1000000 --set checkpoint_every=10
victim=""
first_result stopped_sampler && victim=$(rank_pid "${token}_stopped_sampler" 2)
if [ -n "$victim" ]; then
    kill -STOP "$victim"
    at=$(wc -l <"${token}_stopped_sampler/result.jsonl")
    finish stopped_sampler
    kill -CONT "$victim" 2>/dev/null
    steps=$(metric "${token}_stopped_sampler/result.jsonl" timesteps_total)
    its=$(wc -l <"${token}_stopped_sampler/result.jsonl")
    if [ "$steps" = "1000000" ] && [ "$its" -gt "$at" ]; then
        ok "stopped_sampler: rank 0 learned on from rank 1 (iteration $at -> $its, 1M steps)"
    else
        bad "stopped_sampler: the learner stopped at $steps steps (iteration $at -> $its)"
    fi
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ]; then
        ok "stopped_sampler: exit $rc"
    else
        bad "stopped_sampler: exit $rc"
    fi
    if grep -q "dpt train: rank 2 did not answer the end of the run within 5 s" stopped_sampler.out; then
        ok "stopped_sampler: rank 0 names rank 2, which did not answer the end of the run"
    else
        bad "stopped_sampler: rank 2 is not named"
    fi
    if grep "did not answer\|timed out\|failed" stopped_sampler.out | grep -q "rank 1\b\|ranks"; then
        bad "stopped_sampler: a healthy rank is blamed"
    else
        ok "stopped_sampler: no healthy rank is blamed"
    fi
    if [ "$(last_checkpoint stopped_sampler)" = "$its" ]; then
        ok "stopped_sampler: the last iteration's checkpoint was written"
    else
        bad "stopped_sampler: last checkpoint $(last_checkpoint stopped_sampler), last iteration $its"
    fi
else
    finish stopped_sampler
    bad "stopped_sampler: rank 2 of the run not found"
fi

# ---- term_stopped: -np 2, rank 1 stopped, then SIGTERM to rank 0 ----------------
start term_stopped 2 --set total_timesteps=50000000 --set checkpoint_every=1000
victim="" learner=""
if first_result term_stopped; then
    victim=$(rank_pid "${token}_term_stopped" 1)
    learner=$(rank_pid "${token}_term_stopped" 0)
fi
if [ -n "$victim" ] && [ -n "$learner" ]; then
    kill -STOP "$victim"
    sleep 1
    kill -TERM "$learner"
    finish term_stopped
    kill -CONT "$victim" 2>/dev/null
    if [ "$rc" -eq 143 ]; then ok "term_stopped: exit 143"; else bad "term_stopped: exit $rc, not 143"; fi
    if grep -q "after the stop request: rank 1 did not answer the end of the run" term_stopped.out; then
        ok "term_stopped: reports that rank 1 did not answer the end of the run"
    else
        bad "term_stopped: no report naming rank 1"
    fi
    its=$(wc -l <"${token}_term_stopped/result.jsonl")
    last=$(last_checkpoint term_stopped)
    if [ -n "$last" ] && [ "$last" = "$its" ]; then
        ok "term_stopped: checkpoint of the last iteration ($last) written"
        t_start=$(date +%s)
        out=$(timeout -k 10 150 "$mpiexec" --oversubscribe -np 2 "$dpt" train --resume \
            "${token}_term_stopped" --quiet --set stop_iters=$((last + 2)) 2>&1 </dev/null)
        rrc=$?
        echo "== term_stopped --resume: exit $rrc after $(($(date +%s) - t_start)) s"
        now=$(metric "${token}_term_stopped/result.jsonl" training_iteration)
        if [ "$rrc" -eq 0 ] && [ "$now" = "$((last + 2))" ]; then
            ok "term_stopped: --resume went on from iteration $last to $now"
        else
            bad "term_stopped: --resume: exit $rrc, iteration $now"
            printf '%s\n' "$out" | tail -3
        fi
    else
        bad "term_stopped: checkpoint $last, last iteration $its"
    fi
else
    finish term_stopped
    bad "term_stopped: the ranks of the run not found"
fi

# ---- term_healthy: -np 3, SIGTERM to rank 0 -----------------------------------------
start term_healthy 3 --set total_timesteps=50000000 --set checkpoint_every=1000
learner=""
first_result term_healthy && learner=$(rank_pid "${token}_term_healthy" 0)
if [ -n "$learner" ]; then
    kill -TERM "$learner"
    finish term_healthy
    if [ "$rc" -eq 143 ]; then ok "term_healthy: exit 143"; else bad "term_healthy: exit $rc, not 143"; fi
    if grep -q "did not answer" term_healthy.out; then
        bad "term_healthy: a rank is said not to have answered"
    else
        ok "term_healthy: every rank answered the end of the run"
    fi
    if [ -n "$(last_checkpoint term_healthy)" ]; then
        ok "term_healthy: checkpoint written"
    else
        bad "term_healthy: no checkpoint"
    fi
else
    finish term_healthy
    bad "term_healthy: rank 0 of the run not found"
fi

# ---- term_sampler: -np 3, SIGTERM to sampler rank 2 alone ------------------------------
start term_sampler 3 --set total_timesteps=50000000 --set checkpoint_every=1000
asker=""
first_result term_sampler && asker=$(rank_pid "${token}_term_sampler" 2)
if [ -n "$asker" ]; then
    kill -TERM "$asker"
    finish term_sampler
    if [ "$rc" -eq 143 ]; then ok "term_sampler: exit 143"; else bad "term_sampler: exit $rc, not 143"; fi
    if grep -q "sampler rank 2 asked to stop the run" term_sampler.out; then
        ok "term_sampler: rank 0 stopped the run at rank 2's request"
    else
        bad "term_sampler: no stop at rank 2's request"
    fi
    if grep -q "did not answer" term_sampler.out; then
        bad "term_sampler: a rank is said not to have answered"
    else
        ok "term_sampler: every rank answered the end of the run"
    fi
    if [ -n "$(last_checkpoint term_sampler)" ]; then
        ok "term_sampler: checkpoint written"
    else
        bad "term_sampler: no checkpoint"
    fi
else
    finish term_sampler
    bad "term_sampler: rank 2 of the run not found"
fi

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
