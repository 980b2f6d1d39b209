#!/bin/sh
# The trainer contract under mpirun, through `dpt train` (tests/
# test_trainer_contract.c runs it on threads): every job that runs there is
# started, stopped after 2 iterations, resumed to 4 and compared with an
# uninterrupted run of 4 (tensors bitwise for the synchronous jobs:
# supervised and ddppo on 2 ranks, sync_replicas with N = R = 2 on 3 ranks;
# appo and impala, asynchronous, must resume and reach iteration 4); its
# checkpoint names the job, the dataset or env and the model, and `dpt eval`
# evaluates it with no config. ppo is refused (exit 2) naming ddppo, and
# a config error is printed once (or by the one rank that has it). SIGTERM to
# mpirun during appo and sync_replicas runs ends every rank after one
# checkpoint, from which the run resumes.
# Skipped (77) without MPI.
# usage: mpi_contract_test.sh PATH_TO_DPT CKPT_COMPARE MPIEXEC WORK_DIR
dpt="$1" cmp="$2" mpiexec="$3" work="$4"
examples="$(cd "$(dirname "$0")/../examples" && pwd)"
if [ -z "$mpiexec" ] || [ ! -x "$mpiexec" ] || ! "$dpt" info | grep -q "^  mpi    yes"; then
    echo "skipped: no MPI in this build or no mpirun"
    exit 77
fi
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
passes=0 fails=0
ok()  { echo "ok   $*"; passes=$((passes + 1)); }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }
run() { # NP DIR CONF SETS...: one mpirun of dpt train; prints its output on failure
    np=$1 dir=$2 conf=$3
    shift 3
    "$mpiexec" --oversubscribe -np "$np" "$dpt" train "$conf" --quiet --set output_dir="$dir" \
        --set checkpoint_every=1 "$@" > "$dir.log" 2>&1
}
resume() { # NP DIR SETS...
    np=$1 dir=$2
    shift 2
    "$mpiexec" --oversubscribe -np "$np" "$dpt" train --resume "$dir" --quiet "$@" \
        >> "$dir.log" 2>&1
}
header() { # FILE: the safetensors header (JSON) of a checkpoint
    head -c 65536 "$1" | tr -d '\000'
}
contract() { # NAME NP BITWISE DATA_KEY DATA MODEL_KEY CONF SETS...
    name=$1 np=$2 bitwise=$3 dkey=$4 dval=$5 mkey=$6 conf=$7
    shift 7
    if ! run "$np" "$name-full" "$conf" --set stop_iters=4 "$@" ||
        ! run "$np" "$name-cut" "$conf" --set stop_iters=2 "$@" ||
        ! resume "$np" "$name-cut" --set stop_iters=4; then
        bad "$name: a run failed: $(tail -3 "$name-full.log" "$name-cut.log")"
        return
    fi
    a="$name-full/checkpoints/checkpoint-00000004.safetensors"
    b="$name-cut/checkpoints/checkpoint-00000004.safetensors"
    if [ ! -f "$a" ] || [ ! -f "$b" ]; then
        bad "$name: no checkpoint of iteration 4 ($(ls "$name-cut/checkpoints" | tr '\n' ' '))"
        return
    fi
    if [ "$bitwise" = 1 ]; then
        if "$cmp" "$a" "$b" > "$name.cmp"; then
            ok "$name on $np ranks: stopped at 2, resumed to 4 = uninterrupted 4 (bitwise)"
        else
            bad "$name: the resumed run differs: $(cat "$name.cmp")"
        fi
    else
        ok "$name on $np ranks: stopped at 2, resumed to 4"
    fi
    h=$(header "$b")
    if printf '%s' "$h" | grep -q "\"job\":\"$name\"" &&
        printf '%s' "$h" | grep -q "\"$dkey\":\"$dval\"" &&
        printf '%s' "$h" | grep -q "\"$mkey\":\"[^\"]"; then
        ok "$name: the checkpoint names job, $dkey = $dval and $mkey"
    else
        bad "$name: metadata lacks job, $dkey or $mkey"
    fi
    if "$dpt" eval "$name-cut" --episodes 2 > "$name.eval" 2>&1; then
        ok "$name: dpt eval of the checkpoint, no config"
    else
        bad "$name: dpt eval failed: $(tail -2 "$name.eval")"
    fi
}

spirals="--set dataset=spirals --set spirals_points=256 --set hidden=16,16 --set batch_size=32"
# shellcheck disable=SC2086
contract supervised 2 1 dataset spirals layers "$examples/fashion_mnist_mlp.conf" $spirals \
    --set epochs=10
contract ddppo 2 1 env CartPole-v1 policy_hidden "$examples/cartpole_ddppo.conf" \
    --set num_workers=1 --set stop_reward=0 --set num_envs_per_worker=2 \
    --set rollout_fragment_length=32 --set sgd_minibatch_size=16
# shellcheck disable=SC2086
contract sync_replicas 3 1 dataset spirals layers "$examples/fashion_mnist_sync_replicas.conf" \
    $spirals --set total_num_replicas=2 --set replicas_to_aggregate=2 --set epochs=10
contract appo 2 0 env CartPole-v1 policy_hidden "$examples/cartpole_appo.conf" \
    --set total_timesteps=1000000 --set min_sample_timesteps_per_iteration=2000
contract impala 2 0 env CartPole-v1 policy_hidden "$examples/cartpole_impala.conf" \
    --set total_timesteps=1000000 --set min_sample_timesteps_per_iteration=2000

# A stop request to mpirun (SIGTERM, forwarded to every rank) during a run
# whose other ranks are roles: every rank ends after one checkpoint, written
# by rank 0, and the run resumes from it.
stop_run() { # NAME NP CONF SETS...
    name=$1 np=$2 conf=$3
    shift 3
    # mpirun kills the ranks odls_base_sigkill_timeout seconds after it
    # forwards the SIGTERM (1 by default): a loaded machine (a sanitizer
    # build) needs longer to agree on the stop and write the checkpoint.
    # (mpirun waits that long even when the ranks are done sooner.)
    "$mpiexec" --oversubscribe --mca odls_base_sigkill_timeout 5 -np "$np" "$dpt" train "$conf" \
        --set output_dir="$name" --set checkpoint_every=100000 "$@" > "$name.log" 2>&1 &
    pid=$!
    i=0
    while [ ! -s "$name/result.jsonl" ] && [ $i -lt 600 ]; do
        sleep 0.1
        i=$((i + 1))
    done
    kill -TERM $pid
    # A guard: a run that does not end within 60 s is killed (and fails).
    (sleep 60 && kill -KILL $pid) >/dev/null 2>&1 &
    guard=$!
    wait $pid
    kill $guard 2>/dev/null
    n=$(ls "$name/checkpoints" 2>/dev/null | grep -c '^checkpoint-')
    it=$(ls "$name/checkpoints" 2>/dev/null | sed -n 's/^checkpoint-0*\([0-9][0-9]*\)\.safetensors$/\1/p')
    left=$(pgrep -f -- "output_dir=$name" | wc -l)
    # (mpirun stops forwarding the ranks' output when told to end the job,
    # so the checkpoint's own stop_reason tells that the stop wrote it.)
    if [ "$n" -eq 1 ] && [ "$left" -eq 0 ] &&
        header "$name/checkpoints/checkpoint-$(printf %08d "$it").safetensors" |
        grep -q '"stop_reason":"stopped by a signal"'; then
        ok "$name: SIGTERM to mpirun: every rank ended after one checkpoint (iteration $it)"
    else
        bad "$name: SIGTERM to mpirun: $n checkpoints, $left processes left: $(tail -3 "$name.log")"
        return
    fi
    if resume "$np" "$name" --set stop_iters=$((it + 2)) &&
        [ -f "$name/checkpoints/checkpoint-$(printf %08d $((it + 2))).safetensors" ]; then
        ok "$name: resumed from it to iteration $((it + 2))"
    else
        bad "$name: the resume failed: $(tail -3 "$name.log")"
    fi
}
stop_run appo_stop 3 "$examples/cartpole_appo.conf" --set total_timesteps=100000000
# shellcheck disable=SC2086
stop_run sync_replicas_stop 3 "$examples/fashion_mnist_sync_replicas.conf" $spirals \
    --set total_num_replicas=2 --set replicas_to_aggregate=2 --set epochs=1000000

"$mpiexec" --oversubscribe -np 2 "$dpt" train "$examples/cartpole_ppo.conf" --quiet \
    --set output_dir=ppo > ppo.log 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q "ppo does not run under mpirun.*job = ddppo" ppo.log && [ ! -d ppo ]; then
    ok "ppo under mpirun: refused (exit 2) naming ddppo, no directory"
else
    bad "ppo under mpirun: exit $rc: $(tail -2 ppo.log)"
fi

# Under a launcher a failure every rank shares is printed once (rank 0), a
# rank that failed otherwise is named, and no directory is made.
"$mpiexec" --oversubscribe -np 3 "$dpt" train "$examples/cartpole_ddppo.conf" \
    --set nosuchkey=1 --set output_dir=once > once.log 2>&1
rc=$?
n=$(grep -c 'dpt train: .*unknown key "nosuchkey"' once.log)
if [ $rc -eq 2 ] && [ "$n" -eq 1 ] && [ ! -d once ]; then
    ok "a config error on 3 ranks: exit 2, printed once"
else
    bad "a config error on 3 ranks: exit $rc, printed $n times: $(grep 'dpt train' once.log)"
fi
printf '#!/bin/sh\nif [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then exec "$@" --set nosuchkey=1; fi\nexec "$@"\n' \
    > rank1.sh
chmod +x rank1.sh
"$mpiexec" --oversubscribe -np 3 ./rank1.sh "$dpt" train "$examples/cartpole_ddppo.conf" \
    --set output_dir=one > one.log 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q "dpt train: rank 1 could not start the run" one.log &&
    grep -q 'dpt train: rank 1: .*unknown key "nosuchkey"' one.log &&
    [ "$(grep -c 'dpt train' one.log)" -eq 2 ] && [ ! -d one ]; then
    ok "a config error on rank 1 alone: rank 0 names rank 1, rank 1 says why, exit 2"
else
    bad "a config error on rank 1 alone: exit $rc: $(grep 'dpt train' one.log)"
fi

echo "$passes passed, $fails failed"
[ $fails -eq 0 ]
