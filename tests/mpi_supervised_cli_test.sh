#!/bin/sh
# The supervised job under mpirun with several devices per rank, through the
# `dpt` command: 2 ranks x 2 devices train the spirals twice in each towers
# mode, rank 0 writes each run, and the two runs' final checkpoints are
# bitwise identical (every rank also checks after each epoch that all ranks
# hold the same weights and optimizer state: a difference would fail the
# run). Async towers and a batch size the ranks x devices do not divide are
# refused with exit 2 and a message, before anything is written.
#
# usage: mpi_supervised_cli_test.sh DPT CKPT_COMPARE MPIRUN WORKDIR
# Exit 77 (skipped) when the build has no MPI or there is no mpirun. The
# environment (OMPI_ALLOW_RUN_AS_ROOT..., the TCP transport of the _tcp
# variant) comes from tests/CMakeLists.txt.
dpt="$1" cmp="$2" mpirun="$3" work="$4"
if ! "$dpt" info | grep -q "^  mpi    yes"; then
    echo "skipped: this build has no MPI"
    exit 77
fi
if [ -z "$mpirun" ] || ! command -v "$mpirun" >/dev/null 2>&1; then
    echo "skipped: no mpirun"
    exit 77
fi
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
passes=0 fails=0
ok() { echo "ok   $*"; passes=$((passes + 1)); }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }
train() { "$mpirun" --oversubscribe -np 2 "$dpt" train sp.conf "$@" 2>&1; }
printf 'job = supervised\ndataset = spirals\nspirals_points = 512\nhidden = 32,32\n' > sp.conf
printf 'epochs = 4\nbatch_size = 48\nnum_devices = 2\ngrad_clip = 1\n' >> sp.conf
last=checkpoints/checkpoint-00000004.safetensors

for mode in ps replicated; do
    for k in 1 2; do
        dir=${mode}_$k
        out=$(train --set towers_mode=$mode --set output_dir=$dir); rc=$?
        if [ $rc -eq 0 ] && [ -f "$dir/$last" ] && [ "$(wc -l < "$dir/result.jsonl")" -eq 4 ] &&
           [ "$(printf '%s\n' "$out" | grep -c "finished after iteration 4")" -eq 1 ]; then
            ok "2 ranks x 2 devices, $mode, run $k: rank 0 wrote the run" \
                "($(printf '%s\n' "$out" | grep -o "test accuracy [0-9.]*" | tail -1))"
        else
            bad "2 ranks x 2 devices, $mode, run $k: exit $rc"
            printf '%s\n' "$out" | tail -5
        fi
    done
    if "$cmp" "${mode}_1/$last" "${mode}_2/$last" >/dev/null; then
        ok "2 ranks x 2 devices, $mode: two runs end with bitwise-identical checkpoints"
    else
        bad "2 ranks x 2 devices, $mode: the two runs' checkpoints differ"
        "$cmp" "${mode}_1/$last" "${mode}_2/$last"
    fi
done

refused() { # refused DESCRIPTION PATTERN DIR ARGS...: exit 2, the message, nothing written
    what="$1" pattern="$2" dir="$3"
    shift 3
    out=$(train --set output_dir="$dir" "$@"); rc=$?
    if [ $rc -eq 2 ] && printf '%s\n' "$out" | grep -q -- "$pattern" && [ ! -e "$dir" ]; then
        ok "$what: refused (exit 2), nothing written"
    else
        bad "$what: exit $rc, or no \"$pattern\", or $dir written"
        printf '%s\n' "$out" | tail -5
    fi
}
refused "towers_mode = async under mpirun" \
    "towers_mode = async does not run under mpirun.*set towers_mode = ps or replicated" \
    async --set towers_mode=async
refused "batch_size 20 for 2 ranks x 4 devices" \
    "batch_size 20 must be divisible by the 2 ranks x num_devices 4" \
    b20 --set num_devices=4 --set batch_size=20

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
