# Sourced by the tests that stop a rank (SIGSTOP) under mpirun.
#
# unstick OUT PATTERN JOB: runs until process JOB (the launcher, or the
# timeout around it) ends. Once OUT (the run's output) shows that rank 0 has
# asked the launcher to end the job (MPI_Abort), the launcher gets 20 s;
# after that, every stopped process whose command line matches PATTERN is
# resumed (SIGCONT) and listed in OUT.unstuck. Open MPI's mpirun can, rarely
# (about one run in a hundred here), wait for ever on a stopped rank after
# MPI_Abort; resumed, the rank takes its pending SIGTERM and the launcher
# ends the job. This is the launcher's behaviour, not dpt's: the tests check
# what dpt did before it asked (its exit code, messages and files), and say
# when the launcher needed this.
# Start it in the background with its output redirected:
#   unstick NAME.out "output_dir=DIR" "$job" </dev/null >/dev/null 2>&1 &
unstick() {
    u_waited=0
    while kill -0 "$3" 2>/dev/null; do
        if [ "$u_waited" -ge 0 ] && grep -q "MPI_ABORT was invoked" "$1" 2>/dev/null; then
            u_waited=$((u_waited + 1))
            if [ "$u_waited" -ge 200 ]; then
                for u_p in $(pgrep -f -- "$2" 2>/dev/null); do
                    if [ "$(cut -d' ' -f3 "/proc/$u_p/stat" 2>/dev/null)" = T ]; then
                        kill -CONT "$u_p" 2>/dev/null && echo "$u_p" >>"$1.unstuck"
                    fi
                done
                u_waited=-1
            fi
        fi
        sleep 0.1
    done
}
# unstuck_note OUT: a line saying that the launcher needed stopped ranks
# resumed, when it did.
unstuck_note() {
    if [ -s "$1.unstuck" ]; then
        echo "note: 20 s after rank 0's MPI_Abort the launcher had not ended the job; its stopped" \
            "process(es) $(tr '\n' ' ' <"$1.unstuck")were resumed so that it could"
    fi
}
