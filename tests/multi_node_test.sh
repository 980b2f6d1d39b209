#!/bin/sh
# The commands of docs/MULTI_NODE.md, on one machine: a hostfile, hosts on
# the command line, and the TCP transport forced on the loopback interface;
# each must train and leave one run directory written by rank 0.
#
# usage: multi_node_test.sh DPT WORKDIR   (exit 77 without MPI)
dpt="$1" work="$2"
"$dpt" info | grep -q "^  mpi    yes" && command -v mpirun >/dev/null 2>&1 || { echo "skipped: no MPI"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
here=$(dirname "$0")
cp "$here/../examples/cartpole_ddppo.conf" dd.conf 2>/dev/null ||
    cp "$OLDPWD/$here/../examples/cartpole_ddppo.conf" dd.conf || exit 1
fails=0
run() { # run NAME MPIRUN-ARGS...: the docs' command with a short run
    name=$1
    shift
    out=$(mpirun --oversubscribe "$@" "$dpt" train dd.conf --set num_workers=1 \
        --set total_timesteps=4096 --set output_dir="$name" 2>&1)
    rc=$?
    if [ $rc -eq 0 ] && [ "$(wc -l < "$name/result.jsonl")" -eq 4 ] &&
       [ "$(printf '%s\n' "$out" | grep -c "finished after iteration 4")" -eq 1 ]; then
        echo "ok   $name: mpirun $*"
    else
        echo "FAIL $name (exit $rc): mpirun $*"
        printf '%s\n' "$out" | tail -5
        fails=$((fails + 1))
    fi
}
printf 'localhost slots=2\n' > hosts
run run_hostfile --hostfile hosts -np 2
run run_hosts -H localhost:2 -np 2
run run_tcp --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo -H localhost:2 -np 2
echo "$((3 - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
