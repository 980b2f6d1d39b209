#!/bin/sh
# Failures of the sync_replicas job under mpirun by role (comm_timeout_s =
# 5; -np 3: rank 0 the service, ranks 1 and 2 one worker each, N = R = 2):
#   worker   rank 2 stopped (SIGSTOP) after the first epoch: the run ends
#            non-zero and the rank that waited for it (rank 0) names rank 2;
#            rank 0 is not blamed.
#   service  SIGTERM to rank 0 while rank 2 is stopped: rank 0 says why the
#            session cannot end and that the last checkpoint stands; that
#            checkpoint is complete and `dpt train --resume` continues it.
# Every case is bounded (a 90 s guard) and leaves no process behind.
#
# usage: fault_sr_test.sh DPT RUN_CHECK WORK
# Skipped (77) when the build has no MPI or there is no mpirun.
dpt="$1" check="$2" work="$3"
# ok, bad, rank_pid (found before the cd into the work directory)
. "$(cd "$(dirname "$0")" && pwd)/fault_common.sh"
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
if ! "$dpt" info | grep -q "^  mpi    yes"; then
    echo "skipped: this build has no MPI"
    exit 77
fi
if ! command -v mpirun >/dev/null 2>&1; then
    echo "skipped: no mpirun"
    exit 77
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
token="fsr$$"
printf 'job = sync_replicas\ndataset = spirals\nspirals_points = 2048\nhidden = 32\n' >sr.conf
printf 'total_num_replicas = 2\nreplicas_to_aggregate = 2\nepochs = 100000\n' >>sr.conf
printf 'comm_timeout_s = 5\ncheckpoint_every = 1\n' >>sr.conf

# start NAME: the run in the background (90 s guard), output in NAME.out;
# waits for its first checkpoint. Sets $job.
start() {
    timeout 90 mpirun --oversubscribe -np 3 "$dpt" train --quiet sr.conf \
        --set output_dir="${token}_$1" >"$1.out" 2>&1 &
    job=$!
    i=0
    while [ ! -e "${token}_$1/checkpoints/checkpoint-00000001.safetensors" ] && [ $i -lt 300 ]; do
        sleep 0.1
        i=$((i + 1))
    done
}
# finish NAME: waits for the run; $rc its exit; no process may be left.
finish() {
    wait "$job"
    rc=$?
    echo "== $1: exit $rc"
    sed 's/^/   | /' "$1.out" | tail -6
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

# ---- a worker rank stopped -----------------------------------------------------------
start worker
victim=$(rank_pid "${token}_worker" 2)
[ -n "$victim" ] && kill -STOP "$victim"
finish worker
if [ -n "$victim" ] && [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ]; then ok "worker: exit $rc"; else bad "worker: exit $rc (rank 2: '$victim')"; fi
if grep -q "worker 1 (rank 2) sent nothing for comm_timeout_s = 5 s" worker.out; then
    ok "worker: rank 0 names the stopped rank 2"
else
    bad "worker: the stopped rank 2 is not named"
fi
# The healthy ranks must not blame rank 0. (The stopped rank itself may: when
# mpirun ends the job it resumes that rank before it kills it, and the rank
# then reports its own wait, "worker 1 (rank 2): no token from rank 0".)
if grep "no word from the service\|no token from rank 0" worker.out | grep -qv "(rank 2)"; then
    bad "worker: the healthy rank 0 is blamed by a healthy rank"
else
    ok "worker: no healthy rank blames rank 0"
fi

# ---- SIGTERM to the service while a worker rank is stopped ---------------------------
start service
victim=$(rank_pid "${token}_service" 2)
chief=$(rank_pid "${token}_service" 0)
[ -n "$victim" ] && kill -STOP "$victim"
sleep 0.5
[ -n "$chief" ] && kill -TERM "$chief"
finish service
if [ -n "$chief" ] && [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ]; then ok "service: exit $rc"; else bad "service: exit $rc"; fi
if grep -q "stopped at global step [0-9]*, which waits for worker 1 (rank 2)" service.out &&
    grep -q "the last checkpoint stands" service.out; then
    ok "service: rank 0 says why it writes no checkpoint, naming rank 2"
else
    bad "service: no reason naming rank 2"
fi
d="${token}_service"
if line=$("$check" "$d" 2>&1); then ok "service: the run directory is complete ($line)"; else bad "service: $line"; fi
last=$(ls "$d/checkpoints" | grep '^checkpoint-.*\.safetensors$' | tail -1)
n=$(echo "$last" | sed 's/checkpoint-0*\([0-9][0-9]*\)\.safetensors/\1/')
if timeout 90 mpirun --oversubscribe -np 3 "$dpt" train --resume "$d" --quiet \
    --set stop_iters=$((n + 1)) >resume.out 2>&1 &&
    [ -e "$d/checkpoints/checkpoint-$(printf %08d $((n + 1))).safetensors" ]; then
    ok "service: --resume continues from $last to epoch $((n + 1))"
else
    bad "service: --resume from $last: $(tail -2 resume.out)"
fi

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
