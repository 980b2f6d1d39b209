#!/bin/sh
# `dpt train` refuses env plug-ins built for another env ABI (DPT_ENV_ABI_VERSION
# in dpt/env.h) with the reason and exit 2: a newer one, the previous one (ABI
# 2: no obs_shape after obs_dim, so every later field of the class sits
# elsewhere), and one from before the ABI was numbered. A matching plug-in
# trains (cli_test.sh).
# usage: env_abi_test.sh PATH_TO_DPT WORK_DIR NEWER_PLUGIN OLD_PLUGIN ABI [PREVIOUS_PLUGIN]
dpt="$1" work="$2" newer="$3" old="$4" abi="$5" prev="$6"
fails=0 passes=0
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
refused() { # refused PLUGIN PLUGIN_ABI
    printf 'job = ppo\nenv = %s\ntotal_timesteps = 2048\noutput_dir = run\n' "$1" > abi.conf
    out=$("$dpt" train abi.conf 2>&1); rc=$?
    want="env plug-in $1 was built for env ABI $2, this dpt has $abi; rebuild it against this dpt's headers"
    if [ "$rc" -ne 2 ]; then
        echo "FAIL plug-in of env ABI $2: exit $rc, expected 2"; echo "$out" | tail -5
        fails=$((fails + 1))
    elif ! printf '%s\n' "$out" | grep -qF -- "$want"; then
        echo "FAIL plug-in of env ABI $2: output lacks \"$want\""; echo "$out" | tail -5
        fails=$((fails + 1))
    else
        echo "ok   plug-in of env ABI $2 refused (exit 2): $(printf '%s\n' "$out" | grep -F "$want" | head -1)"
        passes=$((passes + 1))
    fi
}
refused "$newer" $((abi + 1))
if [ -n "$prev" ]; then refused "$prev" $((abi - 1)); fi
refused "$old" 0
echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
