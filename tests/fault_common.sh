# Sourced by the distributed fault tests (fault_dist, fault_sr, fault_appo):
# the pass and fail counters, and the process of one rank of a run.
passes=0 fails=0
ok() {
    passes=$((passes + 1))
    echo "ok   $*"
}
bad() {
    fails=$((fails + 1))
    echo "FAIL $*"
}
# rank_pid DIR RANK: the process of that rank of the run writing to DIR.
rank_pid() {
    for p in $(pgrep -f -- "output_dir=$1" 2>/dev/null); do
        if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -q "^OMPI_COMM_WORLD_RANK=$2\$"; then
            echo "$p"
            return
        fi
    done
}
