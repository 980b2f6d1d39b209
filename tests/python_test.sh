#!/bin/sh
# The Python package (python/) against this build: pytest on python/tests
# with the build's libdpt (DPT_LIBRARY), its dpt command (DPT_BIN, which
# trains the runs the policy and model tests load), the corridor env plug-in
# (DPT_TEST_PLUGIN) and the Shaped-v0 plug-in, whose observations are images
# (DPT_TEST_SHAPED_PLUGIN), the package's sources on PYTHONPATH. Skipped
# (exit 77) where python3 (or $PYTHON) lacks numpy, gymnasium (>= 1.1) or
# pytest (pip install numpy gymnasium pytest), and in sanitizer builds, whose
# libdpt an uninstrumented python cannot load.
# usage: python_test.sh SOURCE_DIR LIBDPT DPT PLUGIN SHAPED_PLUGIN WORK_DIR [SANITIZER]
src="$1" lib="$2" dpt="$3" plugin="$4" shaped="$5" work="$6" sanitize="$7"
py="${PYTHON:-python3}"
if [ -n "$sanitize" ]; then
    echo "skipped: the libdpt of a sanitizer build ($sanitize) cannot be loaded by python"
    exit 77
fi
if ! command -v "$py" >/dev/null 2>&1; then
    echo "skipped: no $py"
    exit 77
fi
for m in numpy gymnasium pytest; do
    if ! "$py" -c "import $m" >/dev/null 2>&1; then
        echo "skipped: the $m package is not installed for $py (pip install numpy gymnasium pytest)"
        exit 77
    fi
done
if ! "$py" -c "from gymnasium.vector import AutoresetMode" >/dev/null 2>&1; then
    echo "skipped: $py has gymnasium $("$py" -c 'import gymnasium; print(gymnasium.__version__)'), the package needs >= 1.1"
    exit 77
fi
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
PYTHONPATH="$src/python${PYTHONPATH:+:$PYTHONPATH}" DPT_LIBRARY="$lib" DPT_BIN="$dpt" \
    DPT_TEST_PLUGIN="$plugin" DPT_TEST_SHAPED_PLUGIN="$shaped" PYTHONDONTWRITEBYTECODE=1 \
    exec "$py" -m pytest -q -rs -p no:cacheprovider --basetemp="$work/tmp" "$src/python/tests"
