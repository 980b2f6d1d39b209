#!/bin/sh
# Paired before/after timing of two builds of dpt on the towers benchmark
# (ps mode, 1 and 2 devices), the two runs of a pair back to back so that a
# noisy moment of the machine hits both; prints every pair and the medians of
# the per-pair ratios (new / old).
#
#   bench/ab_towers.sh OLD_DPT NEW_DPT [PAIRS] [SECONDS]
#
# OLD_DPT, NEW_DPT: two dpt executables (e.g. a build of the previous commit
# in a git worktree, and ./build/dpt); PAIRS defaults to 9, SECONDS (per run
# and configuration, in 4 rounds) to 4.
old="$1" new="$2" pairs="${3:-9}" secs="${4:-4}"
if [ ! -x "$old" ] || [ ! -x "$new" ]; then
    echo "usage: $0 OLD_DPT NEW_DPT [PAIRS] [SECONDS]" >&2
    exit 2
fi
rate() { # devices json-lines
    printf '%s\n' "$2" | sed -n "s/.*\"devices\":$1,.*\"samples_per_s\":\([0-9.]*\).*/\1/p"
}
med() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
dir=$(mktemp -d) || exit 1
echo "# $old vs $new: bench towers --mode ps --seconds $secs --rounds 4, $pairs pairs"
i=0
while [ $i -lt "$pairs" ]; do
    a=$("$old" bench towers --mode ps --seconds "$secs" --rounds 4 --json) || exit 1
    b=$("$new" bench towers --mode ps --seconds "$secs" --rounds 4 --json) || exit 1
    a1=$(rate 1 "$a") a2=$(rate 2 "$a") b1=$(rate 1 "$b") b2=$(rate 2 "$b")
    awk -v a1="$a1" -v b1="$b1" -v a2="$a2" -v b2="$b2" 'BEGIN {
        printf "pair %d: 1 device %.0f -> %.0f (%.3f), 2 devices %.0f -> %.0f (%.3f)\n",
               '"$i"', a1, b1, b1 / a1, a2, b2, b2 / a2 }'
    awk -v a="$a1" -v b="$b1" 'BEGIN {print b / a}' >> "$dir/r1"
    awk -v a="$a2" -v b="$b2" 'BEGIN {print b / a}' >> "$dir/r2"
    i=$((i + 1))
done
echo "median new/old: 1 device $(med < "$dir/r1"), 2 devices $(med < "$dir/r2")"
rm -rf "$dir"
