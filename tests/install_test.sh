#!/bin/sh
# Installs dpt into a scratch prefix and builds the user-written env of
# examples/custom_env against the INSTALLED headers and library only (as
# examples/custom_env/README.md tells a user to), then trains the plug-in
# with the installed dpt command.
# usage: install_test.sh BUILD_DIR SOURCE_DIR WORK_DIR [SANITIZER]
build="$1" src="$2" work="$3"
case "$4" in  # a sanitizer build's library needs the sanitizer's runtime
    address) san="-fsanitize=address,undefined" ;;
    thread)  san="-fsanitize=thread" ;;
    *)       san="" ;;
esac
rm -rf "$work" && mkdir -p "$work" || exit 1
prefix="$work/prefix"
fail() { echo "FAIL $*"; echo "0 passed, 1 failed"; exit 1; }
cmake --install "$build" --prefix "$prefix" > "$work/install.log" 2>&1 || fail "cmake --install"
[ -f "$prefix/include/dpt/env.h" ] && [ -f "$prefix/lib/libdpt.a" ] && [ -x "$prefix/bin/dpt" ] ||
    fail "installed files missing"
cc=${CC:-cc}
ex="$src/examples/custom_env"
$cc -std=c11 -O2 $san -I"$prefix/include" "$ex/corridor_env.c" "$ex/run_random.c" \
    -L"$prefix/lib" -ldpt -lm -lpthread -ldl -o "$work/example_custom_env" || fail "building example"
out=$("$work/example_custom_env" 8 2000) || fail "running example"
printf '%s\n' "$out" | grep -q "always right: 8 envs x 2000 steps" || fail "example output: $out"
$cc -std=c11 -O2 $san -fPIC -shared -I"$prefix/include" "$ex/corridor_env.c" \
    -o "$work/libcorridor_env.so" || fail "building the plug-in"
cd "$work" || exit 1
printf 'job = ppo\nenv = %s\nnum_envs_per_worker = 8\nsgd_minibatch_size = 256\nlr = 3e-4\ntotal_timesteps = 20480\neval_episodes = 3\noutput_dir = run\n' \
    "$work/libcorridor_env.so" > plug.conf
out=$("$prefix/bin/dpt" train plug.conf 2>&1) || fail "dpt train with the plug-in: $out"
printf '%s\n' "$out" | grep -q "evaluation: greedy policy, 3 episodes" || fail "no evaluation: $out"
echo "ok   installed headers + library build the example; installed dpt trains its plug-in"
echo "1 passed, 0 failed"
