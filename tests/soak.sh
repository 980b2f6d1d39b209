#!/bin/sh
# Soak (`make soak`, not in CI): DD-PPO with 2 worker threads and a
# checkpoint every iteration for SOAK_MINUTES (default 60), twice at once:
#   ref    one uninterrupted process;
#   chain  stopped by SIGTERM and resumed every SOAK_RESUME_MINUTES (5).
# Every 10 s it samples each process's resident memory (VmRSS) and open file
# descriptors. At the end both are stopped, the one behind is resumed up to
# the other's iteration, and:
#   - ref's RSS after minute SOAK_WARMUP_MINUTES (5) grows <= 1 MiB over
#     its value then, and its descriptor count never changes after it;
#   - each chain segment's descriptor count stays at its first value;
#   - the final weights of ref and chain are bitwise equal.
# The processes run under `nice` so that other work on the machine goes
# first (the figures do not depend on speed).
#
# usage: soak.sh DPT CKPT_COMPARE WORK
dpt="$1" cmp="$2" work="$3"
minutes="${SOAK_MINUTES:-60}" every="${SOAK_RESUME_MINUTES:-5}" warm="${SOAK_WARMUP_MINUTES:-5}"
# Seconds, for a short trial run (SOAK_SECONDS=90 SOAK_RESUME_SECONDS=30
# SOAK_WARMUP_MINUTES=0.5).
total_s="${SOAK_SECONDS:-$((minutes * 60))}" every_s="${SOAK_RESUME_SECONDS:-$((every * 60))}"
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
fails=0
bad() {
    fails=$((fails + 1))
    echo "FAIL $*"
}

cat >soak.conf <<EOF
job = ddppo
env = CartPole-v1
num_workers = 2
num_envs_per_worker = 4
rollout_fragment_length = 128
sgd_minibatch_size = 128
num_sgd_iter = 4
total_timesteps = 100000000000
checkpoint_every = 1
keep_checkpoints = 3
eval_episodes = 0
EOF

now() { date +%s; }
rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null; }
# Open descriptors, less those of a write under way at that moment (a
# checkpoint every iteration keeps one open a good part of the time, and
# the directory is opened to fsync it): everything in the work directory
# but the two metrics files, which stay open.
fds() {
    for f in /proc/"$1"/fd/*; do
        readlink "$f" 2>/dev/null
    done | grep -v -e "^$PWD/" -e '\.tmp-' >/tmp/soak_fds.$$
    n=$(wc -l </tmp/soak_fds.$$)
    for f in /proc/"$1"/fd/*; do
        readlink "$f" 2>/dev/null
    done | grep -c -e '/result\.jsonl$' -e '/progress\.csv$' | awk -v n="$n" '{ print n + $1 }'
    rm -f /tmp/soak_fds.$$
}
newest() { ls "$1/checkpoints" | grep '^checkpoint-.*\.safetensors$' | tail -1 | tr -cd '0-9' | sed 's/^0*//'; }

start=$(now)
nice -n 19 "$dpt" train soak.conf --set output_dir=ref --quiet >ref.out 2>&1 &
ref=$!
nice -n 19 "$dpt" train soak.conf --set output_dir=chain --quiet >chain.out 2>&1 &
chain=$!
segment=1 seg_start=$start
echo "minute,ref_rss_kib,ref_fds,chain_segment,chain_rss_kib,chain_fds" >samples.csv
echo "soak: $total_s s, chain resumed every $every_s s, warm-up $warm min; samples every 10 s in $work/samples.csv"
while [ $(($(now) - start)) -lt "$total_s" ]; do
    sleep 10
    t=$(($(now) - start))
    if ! kill -0 "$ref" 2>/dev/null; then
        bad "ref ended early: $(tail -3 ref.out)"
        break
    fi
    if [ $(($(now) - seg_start)) -ge "$every_s" ]; then
        kill -TERM "$chain"
        wait "$chain"
        rc=$?
        [ "$rc" -eq 143 ] || bad "chain segment $segment: exit $rc after SIGTERM, not 143: $(tail -3 chain.out)"
        segment=$((segment + 1)) seg_start=$(now)
        nice -n 19 "$dpt" train --resume chain --quiet >chain.out 2>&1 &
        chain=$!
        sleep 2
    fi
    echo "$(awk -v t="$t" 'BEGIN { printf "%.2f", t / 60 }'),$(rss_kib "$ref"),$(fds "$ref"),$segment,$(rss_kib "$chain"),$(fds "$chain")" >>samples.csv
done
kill -TERM "$ref" "$chain"
wait "$ref"
rc_ref=$?
wait "$chain"
rc_chain=$?
[ "$rc_ref" -eq 143 ] || bad "ref: exit $rc_ref after SIGTERM: $(tail -3 ref.out)"
[ "$rc_chain" -eq 143 ] || bad "chain: exit $rc_chain after SIGTERM: $(tail -3 chain.out)"

# Memory and descriptors of ref after the warm-up; descriptors per segment.
awk -F, -v w="$warm" 'NR > 1 && $1 >= w && $2 != "" {
        if (base == "") { base = $2; fd = $3 }
        if ($2 > max) max = $2
        if ($3 != fd) fdchange++
        n++
    }
    END {
        printf "ref after minute %s: %d samples, RSS %d KiB then, max %d KiB (growth %d KiB), descriptors %d, changed %d times\n", w, n, base, max, max - base, fd, fdchange
        exit !(n > 0 && max - base <= 1024 && fdchange == 0)
    }' samples.csv || bad "ref: memory grew more than 1 MiB or descriptors changed after the warm-up"
# The first sample of a segment may come before it has opened its files.
awk -F, 'NR > 1 && $5 != "" {
        if (!($4 in seen)) seen[$4] = 1
        else if (!($4 in fd)) fd[$4] = $6
        else if ($6 != fd[$4]) changed++
    }
    END {
        printf "chain: %d segments, descriptor count changed within a segment %d times\n", length(fd), changed
        exit changed != 0
    }' samples.csv || bad "chain: descriptors changed within a segment"

# The same iteration on both sides, then the weights.
a=$(newest ref) b=$(newest chain)
target=$a
[ "$b" -gt "$target" ] && target=$b
echo "stopped at iteration $a (ref) and $b (chain); both go on to $target"
for d in ref chain; do
    "$dpt" train --resume "$d" --set stop_iters="$target" --quiet >"$d.end.out" 2>&1 ||
        bad "$d: resuming to iteration $target failed: $(tail -3 "$d.end.out")"
done
f=$(printf 'checkpoints/checkpoint-%08d.safetensors' "$target")
if "$cmp" "ref/$f" "chain/$f" >cmp.out 2>&1; then
    echo "final weights: bitwise equal at iteration $target ($(($(now) - start)) s in all)"
else
    bad "final weights differ at iteration $target: $(cat cmp.out)"
fi
[ "$fails" -eq 0 ] && echo "soak: passed" || echo "soak: $fails failures"
[ "$fails" -eq 0 ]
