#!/bin/sh
# `dpt check-env`: every built-in env passes (exit 0); each plug-in of
# tests/broken_env_plugin.c is flagged (exit 1) by its rule and no other;
# bad usage exits 2.
# usage: check_env_test.sh DPT GOOD_PLUGIN BROKEN_1.so ... BROKEN_5.so
dpt="$1" good="$2"
shift 2
passes=0 fails=0
ok() {
    passes=$((passes + 1))
    echo "ok   $*"
}
bad() {
    fails=$((fails + 1))
    echo "FAIL $*"
}
minatar=""
for g in Asterix Breakout Freeway Seaquest SpaceInvaders; do
    minatar="$minatar MinAtar/$g-v0 MinAtar/$g-v1"
done
# shellcheck disable=SC2086 # (the MinAtar names are split on purpose)
for env in CartPole-v1 Acrobot-v1 MountainCar-v0 Pendulum-v1 StatelessCartPole-v1 RepeatPrevious-v0 $minatar "$good"; do
    out=$("$dpt" check-env "$env" --steps 5000 2>&1)
    rc=$?
    if [ "$rc" -eq 0 ] && printf '%s\n' "$out" | grep -q "every rule holds"; then
        ok "$(basename "$env") passes"
    else
        bad "$env: exit $rc"
        printf '%s\n' "$out"
    fi
done
out=$("$dpt" check-env RepeatPrevious-v0 --set env_config.num_tokens=5 --set env_config.k=4 --steps 5000 2>&1)
[ $? -eq 0 ] && ok "RepeatPrevious-v0 with num_tokens=5, k=4 passes" || bad "RepeatPrevious-v0 configured: $out"
n=0
for rule in determinism state-in-block writes-obs finite in-bounds; do
    n=$((n + 1))
    plugin="$1"
    shift
    out=$("$dpt" check-env "$plugin" --steps 5000 2>&1)
    rc=$?
    fl=$(printf '%s\n' "$out" | grep -c "^  FAIL")
    if [ "$rc" -eq 1 ] && printf '%s\n' "$out" | grep -q "^  FAIL  $rule .*at step" && [ "$fl" -eq 1 ]; then
        ok "broken plug-in $n is flagged by rule $rule: $(printf '%s\n' "$out" | grep '^  FAIL' | cut -c1-110)"
    else
        bad "broken plug-in $n: exit $rc, $fl rules broken, expected $rule only"
        printf '%s\n' "$out"
    fi
done
out=$("$dpt" check-env MinAtar/Seaquest-v1 --set env_config.sticky_action_prob=0 --set env_config.difficulty_ramping=false --set env_config.max_episode_steps=50 --steps 5000 2>&1)
[ $? -eq 0 ] && ok "MinAtar/Seaquest-v1 without sticky actions or ramping, 50-step episodes, passes" || bad "Seaquest configured: $out"
out=$("$dpt" check-env MinAtar/Breakout-v1 --set env_config.sticky_action_prob=1.5 2>&1)
[ $? -eq 2 ] && printf '%s' "$out" | grep -q "sticky_action_prob" && ok "sticky_action_prob = 1.5: exit 2" || bad "sticky 1.5: $out"
out=$("$dpt" check-env MinAtar/Pong-v1 2>&1)
[ $? -eq 2 ] && printf '%s' "$out" | grep -q "MinAtar/Pong-v1" && ok "an unknown name with a slash (a plug-in path): exit 2" || bad "MinAtar/Pong-v1: $out"
out=$("$dpt" check-env Nope-v0 2>&1)
[ $? -eq 2 ] && ok "an unknown env: exit 2" || bad "unknown env: $out"
out=$("$dpt" check-env RepeatPrevious-v0 --set env_config.kk=1 2>&1)
[ $? -eq 2 ] && printf '%s' "$out" | grep -q "no such parameter" && ok "an unknown env_config name: exit 2" || bad "env_config.kk: $out"
out=$("$dpt" check-env CartPole-v1 --set lr=1 2>&1)
[ $? -eq 2 ] && ok "--set of a non-env key: exit 2" || bad "--set lr: $out"
out=$("$dpt" check-env CartPole-v1 --steps 1 2>&1)
[ $? -eq 2 ] && ok "--steps 1: exit 2" || bad "--steps 1: $out"
out=$("$dpt" check-env 2>&1)
[ $? -eq 2 ] && ok "no env: exit 2 with the usage" || bad "no env: $out"
echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
