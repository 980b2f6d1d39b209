#!/bin/sh
# Failure scenarios of the MPI and hier collectives (tests/mpi_timeout.c):
# a late rank, a stopped rank (then dpt_comm_mpi_abort ends the job), a hier
# thread that never arrives, and a rank in another collective. Checks the
# exit status of mpirun, the time taken, the messages, and that no process
# is left behind.
#
# usage: mpi_timeout_test.sh MPIRUN PROGRAM WORKDIR
# Exit 77 (skipped) when the build has no MPI or there is no mpirun.
# The environment (OMPI_ALLOW_RUN_AS_ROOT..., sanitizer settings) comes
# from tests/CMakeLists.txt.

mpirun=$1
prog=$2
work=$3

if ! "$prog" probe; then
    echo "skipped: this build has no MPI"
    exit 77
fi
if [ -z "$mpirun" ] || ! command -v "$mpirun" >/dev/null 2>&1; then
    echo "skipped: no mpirun"
    exit 77
fi
mkdir -p "$work" || exit 1

passed=0
failed=0
# A token on every command line: the processes of this run, and only they,
# match it.
token="mpi_timeout_token_$$"

ok() {
    passed=$((passed + 1))
    echo "ok: $1"
}
fail() {
    failed=$((failed + 1))
    echo "FAILED: $1"
}

now_ms() {
    echo $(($(date +%s%N) / 1000000))
}

# run NAME NP MODE: runs the mode under a 60 s guard; sets $rc, $secs, $out.
run() {
    out="$work/$1.out"
    t0=$(now_ms)
    timeout 60 "$mpirun" --oversubscribe -np "$2" "$prog" "$3" "$token-$1" >"$out" 2>&1
    rc=$?
    t1=$(now_ms)
    secs=$(((t1 - t0) / 1000))
    echo "== $1: mpirun -np $2 $prog $3: exit $rc after ${secs} s"
    sed 's/^/   | /' "$out"
}

has() {
    if grep -F -q -- "$2" "$out"; then
        ok "$1: output has \"$2\""
    else
        fail "$1: output lacks \"$2\""
    fi
}

leftovers() {
    pids=$(pgrep -f -- "$token-$1")
    if [ -z "$pids" ]; then
        ok "$1: no process left"
    else
        fail "$1: processes left behind: $pids (killed now)"
        kill -KILL $pids 2>/dev/null
    fi
}

# (a) rank 1 late by 4 s, timeout 1 s.
run late 2 late
if [ "$rc" -eq 0 ]; then ok "late: mpirun exit 0"; else fail "late: mpirun exit $rc"; fi
if [ "$secs" -lt 30 ]; then ok "late: ended in ${secs} s"; else fail "late: took ${secs} s"; fi
has late "rank 0: allreduce after"
has late "DPT_ETIMEDOUT: comm rank 0: allreduce #1 (4 floats) timed out after 1 s; not arrived: rank 1 (did not respond)"
has late "rank 1: barrier after"
has late "aborted: rank 0 failed: allreduce #1 (4 floats) timed out"
leftovers late

# (b) rank 1 stopped; rank 0 reports it and aborts the job.
run stop 2 stop
if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ]; then
    ok "stop: mpirun exit $rc (non-zero, not the guard's 124)"
else
    fail "stop: mpirun exit $rc"
fi
# timeout 1 s + grace 0.5 s, then MPI_Abort: well within timeout + 15 s.
if [ "$secs" -lt 16 ]; then ok "stop: ended in ${secs} s"; else fail "stop: took ${secs} s"; fi
has stop "rank 0: allreduce after"
has stop "timed out after 1 s; not arrived: rank 1 (did not respond)"
has stop "rank 0: calling dpt_comm_mpi_abort(3)"
if grep -q "dpt_comm_mpi_abort returned" "$out"; then
    fail "stop: dpt_comm_mpi_abort returned"
else
    ok "stop: dpt_comm_mpi_abort did not return"
fi
leftovers stop

# (c) hier, 2 threads per process, rank 3 never arrives.
run hier 2 hier
if [ "$rc" -eq 0 ]; then ok "hier: mpirun exit 0"; else fail "hier: mpirun exit $rc"; fi
if [ "$secs" -lt 30 ]; then ok "hier: ended in ${secs} s"; else fail "hier: took ${secs} s"; fi
has hier "rank 2: allreduce after"
has hier "timed out after 1 s waiting for rank 3 (group of 2)"
has hier "rank 0: allreduce after"
has hier "aborted: process 1 failed"
has hier "rank 1: allreduce after"
if grep -q "UNEXPECTED" "$out"; then fail "hier: a rank saw something unexpected"; fi
leftovers hier

# (d) -np 3: rank 1 in another collective, rank 2 absent.
run other 3 other
if [ "$rc" -eq 0 ]; then ok "other: mpirun exit 0"; else fail "other: mpirun exit $rc"; fi
has other "not arrived: rank 1 (in barrier #1), rank 2 (did not respond)"
leftovers other

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
