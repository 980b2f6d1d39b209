#!/bin/sh
# Formats every C source and header of the project with its .clang-format,
# or, with --check, lists the files that differ and exits 1 (CI runs this).
#   tools/format.sh [--check]
cd "$(dirname "$0")/.." || exit 2
fmt=${CLANG_FORMAT:-clang-format}
if ! command -v "$fmt" >/dev/null 2>&1; then
    echo "format: $fmt not found (Debian: apt-get install clang-format)" >&2
    exit 2
fi
files=$(git ls-files '*.c' '*.h' 2>/dev/null || find include src tools tests bench examples -name '*.[ch]')
if [ "$1" = "--check" ]; then
    bad=0
    for f in $files; do
        if ! "$fmt" --dry-run --Werror "$f" >/dev/null 2>&1; then
            echo "format: $f differs from .clang-format (run tools/format.sh)"
            bad=$((bad + 1))
        fi
    done
    n=$(echo "$files" | wc -w)
    echo "format: $((n - bad)) of $n files formatted"
    [ "$bad" -eq 0 ]
else
    for f in $files; do "$fmt" -i "$f"; done
fi
