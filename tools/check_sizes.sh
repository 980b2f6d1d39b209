#!/bin/sh
# The size rules of the code (STYLE: one module a file, one job a function):
#   files in src/ at most 900 lines (src/nn/gemm_kernels.c excepted: its
#   kernels are one per ISA and block shape);
#   functions in src/train, src/rl and src/parallel at most 120 lines,
#   counted from the `{` at column 0 that opens them to the `}` at column 0
#   that closes them (the project's format).
# Lists what breaks them; --check exits 1 when something does (CI).
#   tools/check_sizes.sh [--check]
cd "$(dirname "$0")/.." || exit 2
bad=0
for f in $(find src -name '*.[ch]' | sort); do
    [ "$f" = src/nn/gemm_kernels.c ] && continue
    n=$(wc -l <"$f")
    if [ "$n" -gt 900 ]; then
        echo "size: $f has $n lines (at most 900)"
        bad=$((bad + 1))
    fi
done
for f in $(find src/train src/rl src/parallel -name '*.c' | sort); do
    out=$(awk -v file="$f" '
        /^\{/ { start = NR; name = prev }
        /^\}/ && start { len = NR - start + 1; if (len > 120) printf "size: %s:%d: %s is %d lines (at most 120)\n", file, start, name, len; start = 0 }
        { if ($0 !~ /^[ \t]*$/) prev = $0 }' "$f")
    if [ -n "$out" ]; then
        echo "$out"
        bad=$((bad + $(echo "$out" | wc -l)))
    fi
done
if [ "$1" = "--check" ] && [ "$bad" -gt 0 ]; then
    echo "size: $bad file(s) or function(s) over the limits"
    exit 1
fi
echo "size: done ($bad over the limits)"
