#!/bin/sh
# Paired before/after timing of two builds of dpt on pinned workloads of
# five benchmarks, the two runs of a pair back to back so that a noisy
# moment of the machine hits both; prints every pair and, per figure, the
# median of the per-pair ratios (new / old) with their spread (min..max).
#
#   bench/ab_pairs.sh OLD_DPT NEW_DPT [PAIRS]
#
# Workloads (the same on both builds):
#   ppo     dpt bench ppo --steps 100000 --seeds 1 --devices 1   wall time (lower is better)
#   ddppo   dpt bench ddppo --workers 2 --iterations 40 --reps 1  env steps/s, 1 and 2 workers
#   towers  dpt bench towers --mode ps --seconds 3 --rounds 3     samples/s, 1 and 2 devices
#   appo    dpt bench appo --seeds 1 --steps 1000000              env steps/s of job appo
#   sr      dpt bench sync-replicas --stragglers --rounds 3       step time, N = R = 4, no
#                                                                 straggler (lower is better)
# Ratios are oriented so that > 1 means the new build is faster.
old="$1" new="$2" pairs="${3:-9}"
if [ ! -x "$old" ] || [ ! -x "$new" ]; then
    echo "usage: $0 OLD_DPT NEW_DPT [PAIRS]" >&2
    exit 2
fi
field() { # NAME JSON_LINES [FILTER]: the numeric value of "NAME" on the lines matching FILTER
    printf '%s\n' "$2" | grep -- "${3:-.}" | sed -n "s/.*\"$1\":\([0-9.eE+-]*\).*/\1/p" | head -1
}
stats() { sort -n | awk '{a[NR]=$1} END {m=(NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2);
    printf "median %.3f (min %.3f, max %.3f, %d pairs)", m, a[1], a[NR], NR}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.4f\n", b / a}'; }
dir=$(mktemp -d) || exit 1
echo "# $old (old) vs $new (new), $pairs interleaved pairs; ratios new/old, > 1 = new faster"
echo "# cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores," \
     "flags: $(grep -m1 '^flags' /proc/cpuinfo | grep -o 'avx512f\|avx2\|fma' | sort -u | tr '\n' ' ')"
i=1
while [ $i -le "$pairs" ]; do
    for b in old new; do
        eval exe=\$$b
        "$exe" bench ppo --steps 100000 --seeds 1 --devices 1 --json > "$dir/ppo.$b" || exit 1
        "$exe" bench ddppo --workers 2 --iterations 40 --reps 1 --json > "$dir/dd.$b" || exit 1
        "$exe" bench towers --mode ps --seconds 3 --rounds 3 --json > "$dir/tw.$b" || exit 1
        "$exe" bench appo --seeds 1 --steps 1000000 --json > "$dir/ap.$b" || exit 1
        "$exe" bench sync-replicas --stragglers --rounds 3 --json > "$dir/sr.$b" || exit 1
    done
    po=$(field wall_s "$(cat "$dir/ppo.old")") pn=$(field wall_s "$(cat "$dir/ppo.new")")
    d1o=$(field env_steps_per_s "$(cat "$dir/dd.old")" '"workers":1,') d1n=$(field env_steps_per_s "$(cat "$dir/dd.new")" '"workers":1,')
    d2o=$(field env_steps_per_s "$(cat "$dir/dd.old")" '"workers":2,') d2n=$(field env_steps_per_s "$(cat "$dir/dd.new")" '"workers":2,')
    t1o=$(field samples_per_s "$(cat "$dir/tw.old")" '"devices":1,') t1n=$(field samples_per_s "$(cat "$dir/tw.new")" '"devices":1,')
    t2o=$(field samples_per_s "$(cat "$dir/tw.old")" '"devices":2,') t2n=$(field samples_per_s "$(cat "$dir/tw.new")" '"devices":2,')
    ao=$(field steps_per_s "$(cat "$dir/ap.old")" '"job":"appo"') an=$(field steps_per_s "$(cat "$dir/ap.new")" '"job":"appo"')
    so=$(field step_ms "$(cat "$dir/sr.old")" 'median.*"no straggler, N=4 R=4"') sn=$(field step_ms "$(cat "$dir/sr.new")" 'median.*"no straggler, N=4 R=4"')
    ratio "$pn" "$po" >> "$dir/r_ppo"          # wall time: old/new
    ratio "$d1o" "$d1n" >> "$dir/r_dd1"
    ratio "$d2o" "$d2n" >> "$dir/r_dd2"
    ratio "$t1o" "$t1n" >> "$dir/r_tw1"
    ratio "$t2o" "$t2n" >> "$dir/r_tw2"
    ratio "$ao" "$an" >> "$dir/r_ap"
    ratio "$sn" "$so" >> "$dir/r_sr"           # step time: old/new
    echo "pair $i: ppo wall ${po}s -> ${pn}s; ddppo 1w $d1o -> $d1n, 2w $d2o -> $d2n steps/s;" \
         "towers 1d $t1o -> $t1n, 2d $t2o -> $t2n samples/s; appo $ao -> $an steps/s;" \
         "sync_replicas step ${so} -> ${sn} ms"
    i=$((i + 1))
done
echo "ppo (wall time, old/new):     $(stats < "$dir/r_ppo")"
echo "ddppo 1 worker (steps/s):     $(stats < "$dir/r_dd1")"
echo "ddppo 2 workers (steps/s):    $(stats < "$dir/r_dd2")"
echo "towers ps 1 device:           $(stats < "$dir/r_tw1")"
echo "towers ps 2 devices:          $(stats < "$dir/r_tw2")"
echo "appo (steps/s):               $(stats < "$dir/r_ap")"
echo "sync_replicas (step, old/new): $(stats < "$dir/r_sr")"
rm -rf "$dir"
