#!/usr/bin/env python3
"""MinAtar stepping: dpt's C games against the minatar package, side by side.

For each game (-v1, sticky actions and ramping on, random actions, an
observation produced every step), in turns, R times:
  dpt      `dpt bench env --env MinAtar/<Game>-v1 --envs 16`: the vectorized
           runner on one thread (auto-reset, the [channels, 10, 10] float
           observation of every env every step); steps per CPU second;
  package  minatar.Environment: act(a) then state() (its (10, 10, channels)
           booleans) every step, reset at the end of an episode; steps per
           CPU second of this process (time.process_time).
Prints the medians and dpt's ratio; both are one core's figures.

usage: bench/compare_minatar_env.py DPT [--steps N] [--reps R]
Needs numpy and the minatar package (pip install --no-deps minatar==1.0.15);
prints "skipped: ..." and exits 0 without them.
"""
import argparse
import json
import logging
import platform
import statistics
import subprocess
import time

GAMES = {"Asterix": "asterix", "Breakout": "breakout", "Freeway": "freeway",
         "Seaquest": "seaquest", "SpaceInvaders": "space_invaders"}


def cpu_name():
    """The model name, and the widest vector extension (Zen 3 has AVX2 only,
    Zen 4 AVX-512)."""
    name, flags = platform.processor() or "unknown CPU", ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                elif line.startswith("flags"):
                    flags = line
                    break
    except OSError:
        pass
    isa = "AVX-512" if " avx512f" in flags else "AVX2" if " avx2" in flags else "no AVX2"
    return "%s (%s)" % (name, isa)


def package_rate(minatar, np, module, steps, seed):
    env = minatar.Environment(module)  # sticky 0.1, ramping on: the defaults
    env.seed(seed)
    actions = env.minimal_action_set()
    rng = np.random.default_rng(seed)
    picks = rng.integers(len(actions), size=steps)
    env.reset()
    t0 = time.process_time()
    for i in range(steps):
        _, done = env.act(actions[picks[i]])
        env.state()
        if done:
            env.reset()
    return steps / (time.process_time() - t0)


def dpt_rate(dpt, game, steps):
    out = subprocess.run([dpt, "bench", "env", "--env", "MinAtar/%s-v1" % game, "--envs", "16",
                          "--steps", str(steps), "--reps", "1", "--json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["env_steps_per_cpu_s"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dpt", help="the dpt command")
    ap.add_argument("--steps", type=int, default=20000, help="package steps per run")
    ap.add_argument("--reps", type=int, default=5, help="runs of each, in turns")
    a = ap.parse_args()
    try:
        import numpy as np
        logging.disable(logging.WARNING)  # (it warns when matplotlib is missing)
        import minatar
    except ImportError as e:
        print("skipped: %s (needs numpy and minatar)" % e)
        return 0
    print("# %s; Python %s, minatar 1.0.15, numpy %s; one core each" % (
        cpu_name(), platform.python_version(), np.__version__))
    print("%-14s %16s %16s %8s" % ("game", "dpt steps/s", "package steps/s", "ratio"))
    for game, module in GAMES.items():
        ours, theirs = [], []
        for r in range(a.reps):
            ours.append(dpt_rate(a.dpt, game, 4000000))
            theirs.append(package_rate(minatar, np, module, a.steps, r))
        o, t = statistics.median(ours), statistics.median(theirs)
        print("%-14s %16.0f %16.0f %7.0fx" % (game, o, t, o / t), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
