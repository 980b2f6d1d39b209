#!/bin/sh
# Installs dpt into a scratch prefix and builds the user-written env of
# examples/custom_env against the INSTALLED headers and library only (as
# examples/custom_env/README.md tells a user to), then trains the plug-in
# with the installed dpt command. Then builds examples/embed_train.c against
# the installed shared library twice, as README.md tells a user to: with
# pkg-config (dpt.pc) and with CMake's find_package(dpt) (dpt::dpt, and
# dpt::dpt_static once more), and runs each for 2048 steps.
# usage: install_test.sh BUILD_DIR SOURCE_DIR WORK_DIR [SANITIZER]
build="$1" src="$2" work="$3"
case "$4" in  # a sanitizer build's library needs the sanitizer's runtime
    address) san="-fsanitize=address,undefined" ;;
    thread)  san="-fsanitize=thread" ;;
    *)       san="" ;;
esac
rm -rf "$work" && mkdir -p "$work" || exit 1
prefix="$work/prefix"
passes=0
fail() { echo "FAIL $*"; echo "$passes passed, 1 failed"; exit 1; }
ok() { echo "ok   $*"; passes=$((passes + 1)); }
cmake --install "$build" --prefix "$prefix" > "$work/install.log" 2>&1 || fail "cmake --install"
for f in include/dpt/env.h include/dpt/dpt.h include/dpt/version.h lib/libdpt.a lib/libdpt.so \
    lib/libdpt.so.0 lib/pkgconfig/dpt.pc lib/cmake/dpt/dptConfig.cmake \
    lib/cmake/dpt/dptConfigVersion.cmake lib/cmake/dpt/dptTargets.cmake; do
    [ -f "$prefix/$f" ] || fail "installed file missing: $f"
done
[ -x "$prefix/bin/dpt" ] || fail "installed file missing: bin/dpt"
[ ! -e "$prefix/include/dpt/version.h.in" ] || fail "version.h.in installed"
ok "installed: bin/dpt, include/dpt/*.h, lib/libdpt.a, lib/libdpt.so.0, dpt.pc, lib/cmake/dpt"
cc=${CC:-cc}
ex="$src/examples/custom_env"
# The static library by name: -ldpt alone would take libdpt.so.
$cc -std=c11 -O2 $san -I"$prefix/include" "$ex/corridor_env.c" "$ex/run_random.c" \
    "$prefix/lib/libdpt.a" -lm -lpthread -ldl -o "$work/example_custom_env" || fail "building example"
out=$("$work/example_custom_env" 8 2000) || fail "running example"
printf '%s\n' "$out" | grep -q "always right: 8 envs x 2000 steps" || fail "example output: $out"
$cc -std=c11 -O2 $san -fPIC -shared -I"$prefix/include" "$ex/corridor_env.c" \
    -o "$work/libcorridor_env.so" || fail "building the plug-in"
cd "$work" || exit 1
printf 'job = ppo\nenv = %s\nnum_envs_per_worker = 8\nsgd_minibatch_size = 256\nlr = 3e-4\ntotal_timesteps = 20480\neval_episodes = 3\noutput_dir = run\n' \
    "$work/libcorridor_env.so" > plug.conf
out=$("$prefix/bin/dpt" train plug.conf 2>&1) || fail "dpt train with the plug-in: $out"
printf '%s\n' "$out" | grep -q "evaluation: greedy policy, 3 episodes" || fail "no evaluation: $out"
ok "installed headers + library build the example; installed dpt trains its plug-in"

# ---- embed_train.c through pkg-config, linked to libdpt.so ---------------------
embed="$src/examples/embed_train.c"
if ! command -v pkg-config >/dev/null 2>&1; then
    echo "skipped: embed_train through pkg-config (no pkg-config)"
else
    export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
    v=$(pkg-config --modversion dpt) || fail "pkg-config --modversion dpt"
    flags=$(pkg-config --cflags --libs dpt) || fail "pkg-config --cflags --libs dpt"
    pkg-config --static --libs dpt > /dev/null || fail "pkg-config --static --libs dpt"
    # shellcheck disable=SC2086
    $cc -std=c11 -O2 $san "$embed" $flags -Wl,-rpath,"$prefix/lib" -o embed_pc ||
        fail "building embed_train with: $flags"
    readelf -d embed_pc 2>/dev/null | grep -q "NEEDED.*libdpt\.so\.0" ||
        fail "embed_pc is not linked to libdpt.so.0"
    cat > ver.c << 'CEOF'
#include <dpt/dpt.h>
#include <stdio.h>
#include <string.h>
int main(void)
{
    printf("%d.%d.%d %s\n", DPT_VERSION_MAJOR, DPT_VERSION_MINOR, DPT_VERSION_PATCH, dpt_version());
    return strcmp(DPT_VERSION_STRING, dpt_version()) != 0;
}
CEOF
    # shellcheck disable=SC2086
    $cc -std=c11 $san ver.c $flags -Wl,-rpath,"$prefix/lib" -o ver || fail "building ver.c"
    vout=$(./ver) || fail "DPT_VERSION_STRING differs from dpt_version(): $vout"
    [ "$vout" = "$v $v" ] || fail "version macros: $vout, pkg-config: $v"
    out=$(./embed_pc 2048 2>&1) || fail "running embed_train (pkg-config): $out"
    line=$(printf '%s\n' "$out" | grep "after 2048 steps") || fail "embed_train (pkg-config) output: $out"
    ok "pkg-config dpt $v ($flags): $line"
fi

# ---- embed_train.c through find_package(dpt), dpt::dpt and dpt::dpt_static -------
mkdir -p app && cat > app/CMakeLists.txt << CEOF
cmake_minimum_required(VERSION 3.20)
project(app C)
find_package(dpt 0.2 REQUIRED)
add_executable(app "$embed")
target_link_libraries(app PRIVATE dpt::dpt)
add_executable(app_static "$embed")
target_link_libraries(app_static PRIVATE dpt::dpt_static)
CEOF
cmake -S app -B app/build -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_FLAGS="$san" -DCMAKE_EXE_LINKER_FLAGS="$san" > app.log 2>&1 ||
    fail "configuring a project with find_package(dpt): $(tail -20 app.log)"
cmake --build app/build >> app.log 2>&1 || fail "building it: $(tail -20 app.log)"
readelf -d app/build/app 2>/dev/null | grep -q "NEEDED.*libdpt\.so\.0" ||
    fail "app (dpt::dpt) is not linked to libdpt.so.0"
for a in app app_static; do
    out=$("app/build/$a" 2048 2>&1) || fail "running $a: $out"
    line=$(printf '%s\n' "$out" | grep "after 2048 steps") || fail "$a output: $out"
    ok "find_package(dpt), $a: $line"
done
echo "$passes passed, 0 failed"
