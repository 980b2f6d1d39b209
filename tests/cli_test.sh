#!/bin/sh
# Runs the built `dpt` binary and checks exit codes and messages.
# usage: cli_test.sh PATH_TO_DPT
dpt="$1"
fails=0 passes=0
expect() { # expect CODE PATTERN -- ARGS...
    code="$1" pattern="$2"; shift 3
    out=$("$dpt" "$@" 2>&1); rc=$?
    if [ "$rc" -ne "$code" ]; then
        echo "FAIL dpt $*: exit $rc, expected $code"; echo "$out" | head -5; fails=$((fails + 1))
    elif ! printf '%s\n' "$out" | grep -q -- "$pattern"; then
        echo "FAIL dpt $*: output lacks \"$pattern\""; echo "$out" | head -5; fails=$((fails + 1))
    else
        echo "ok   dpt $*"; passes=$((passes + 1))
    fi
}
expect 0 "features:"            -- info
expect 0 "gemm:"                -- info
expect 2 "unexpected argument"  -- info extra
expect 0 "usage: dpt COMMAND"   -- --help
expect 2 "usage: dpt COMMAND"   --
expect 2 "unknown command \"nope\"" -- nope
expect 0 "dpt "                 -- --version
expect 0 "usage: dpt demo"      -- demo --help
expect 2 "unknown argument"     -- demo --bogus
expect 2 "--epochs must be"     -- demo --epochs 0
expect 0 "test accuracy"        -- demo --epochs 2 --quiet
expect 2 "unknown benchmark"    -- bench nope
expect 0 "allreduce"            -- bench --help
echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
