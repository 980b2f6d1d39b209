#!/bin/sh
# Runs every libFuzzer target of fuzz/ on a scratch copy of its seed corpus
# (fuzz/corpus/<target>/; the tree is not modified), each for an equal share
# of a total time budget. Prints per target the executions (libFuzzer's
# number_of_executed_units) and the result; on a crash, leak, timeout or
# out-of-memory prints the input as base64 and exits 1.
#   fuzz/run.sh [BUILD_DIR [SECONDS_TOTAL]]     (defaults: build-fuzz 240)
# Build the targets first: make fuzz.
set -u
cd "$(dirname "$0")/.." || exit 2
build=${1:-build-fuzz}
total=${2:-240}
# target:max_len (bytes): enough for every seed and for the structures
# each reader cares about, small enough to keep runs fast.
targets="config:4096 safetensors:8192 idx:8192 csv:4096 env:1024 metrics:4096 tfevents:4096 network:1024"
n=$(echo "$targets" | wc -w)
share=$((total / n))
[ "$share" -ge 1 ] || share=1

for t in $targets; do
    bin="$build/fuzz/fuzz_${t%%:*}"
    if [ ! -x "$bin" ]; then
        echo "fuzz: $bin is missing (run make fuzz first)" >&2
        exit 2
    fi
done

scratch=$(mktemp -d "${TMPDIR:-/tmp}/dpt_fuzz_run.XXXXXX") || exit 2
trap 'rm -rf "$scratch"' EXIT
export TMPDIR="$scratch"
failed=0
printf '%-12s %10s %8s  %s\n' target execs seconds result
for t in $targets; do
    name=${t%%:*}
    max_len=${t#*:}
    mkdir -p "$scratch/$name/corpus" "$scratch/$name/artifacts"
    cp fuzz/corpus/"$name"/* "$scratch/$name/corpus/"
    log="$scratch/$name/log"
    t0=$(date +%s)
    "$build/fuzz/fuzz_$name" -max_total_time="$share" -max_len="$max_len" -timeout=10 \
        -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$scratch/$name/artifacts/" "$scratch/$name/corpus" >"$log" 2>&1
    rc=$?
    secs=$(($(date +%s) - t0))
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    found=$(ls "$scratch/$name/artifacts/" 2>/dev/null)
    if [ "$rc" -eq 0 ] && [ -z "$found" ]; then
        printf '%-12s %10s %8s  %s\n' "$name" "${execs:-?}" "$secs" ok
        continue
    fi
    failed=1
    printf '%-12s %10s %8s  %s\n' "$name" "${execs:-?}" "$secs" "FAILED (libFuzzer exit $rc)"
    echo "---- fuzz_$name: the end of libFuzzer's output ----"
    tail -n 60 "$log"
    for a in $found; do
        echo "---- fuzz_$name: input $a (base64; replay: base64 -d > f && $build/fuzz/fuzz_$name f) ----"
        base64 "$scratch/$name/artifacts/$a"
    done
done
exit "$failed"
