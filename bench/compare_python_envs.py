#!/usr/bin/env python3
"""dpt's environments from Python against Gymnasium's, side by side.

1. Stepping: dpt.gym.make_vec("CartPole-v1", 8) against
   gymnasium.vector.SyncVectorEnv of 8 gymnasium CartPole-v1, random actions,
   the same number of steps, in turns; env steps per second, medians.
2. Training: Stable-Baselines3's PPO (its defaults, MlpPolicy) for the same
   number of steps on dpt.gym.make("CartPole-v1") and on gymnasium's
   CartPole-v1: wall time and the mean return of 20 greedy episodes after.
   Skipped (with the reason) without stable_baselines3.

usage: bench/compare_python_envs.py [--steps N] [--reps R] [--sb3-steps N]
Needs numpy, gymnasium and the dpt package (pip install ./python); prints
"skipped: ..." and exits 0 without them.
"""
import argparse
import statistics
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200000, help="env steps per stepping run")
    ap.add_argument("--reps", type=int, default=5, help="stepping runs of each, in turns")
    ap.add_argument("--sb3-steps", type=int, default=50000, help="PPO training steps")
    a = ap.parse_args()
    try:
        import numpy as np
        import gymnasium as gym
        import dpt
    except ImportError as e:
        print("skipped: %s (needs numpy, gymnasium and the dpt package)" % e)
        return 0
    n = 8
    print("# numpy %s, gymnasium %s, dpt %s" % (np.__version__, gym.__version__,
                                                getattr(dpt, "__version__", "?")))

    def stepping(make):
        envs = make()
        envs.reset(seed=1)
        rng = np.random.default_rng(1)
        calls = a.steps // n
        acts = rng.integers(0, 2, size=(calls, n))
        t0 = time.perf_counter()
        for k in range(calls):
            envs.step(acts[k])
        dt = time.perf_counter() - t0
        envs.close()
        return calls * n / dt

    dpt_make = lambda: dpt.gym.make_vec("CartPole-v1", num_envs=n)
    gym_make = lambda: gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * n)
    print("## stepping: 8 CartPole-v1 envs, random actions, %d steps per run" % a.steps)
    print("%-4s %16s %16s %8s" % ("rep", "dpt_steps/s", "gym_steps/s", "ratio"))
    d, g = [], []
    for r in range(a.reps):
        d.append(stepping(dpt_make))
        g.append(stepping(gym_make))
        print("%-4d %16.0f %16.0f %8.2f" % (r + 1, d[-1], g[-1], d[-1] / g[-1]))
    md, mg = statistics.median(d), statistics.median(g)
    print("median: dpt make_vec %.0f, SyncVectorEnv %.0f env steps/s: %.2fx" % (md, mg, md / mg))

    try:
        import stable_baselines3 as sb3
        from stable_baselines3.common.evaluation import evaluate_policy
    except ImportError as e:
        print("## Stable-Baselines3 PPO: skipped (%s)" % e)
        return 0
    print("## Stable-Baselines3 %s PPO (defaults, MlpPolicy, seed 1), %d steps"
          % (sb3.__version__, a.sb3_steps))
    print("%-10s %10s %14s" % ("env", "wall_s", "greedy_return"))
    for name, make in (("dpt", lambda: dpt.gym.make("CartPole-v1")),
                       ("gymnasium", lambda: gym.make("CartPole-v1"))):
        env = make()
        model = sb3.PPO("MlpPolicy", env, seed=1, verbose=0, device="cpu")
        t0 = time.perf_counter()
        model.learn(total_timesteps=a.sb3_steps)
        dt = time.perf_counter() - t0
        mean, _ = evaluate_policy(model, make(), n_eval_episodes=20, deterministic=True)
        print("%-10s %10.2f %14.1f" % (name, dt, mean))
    return 0


if __name__ == "__main__":
    sys.exit(main())
