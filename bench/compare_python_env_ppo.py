#!/usr/bin/env python3
"""PPO on an environment stepped in Python: dpt.Trainer(config, env=...) against
Stable-Baselines3's PPO, the same settings on the same env, taking turns.

Both train on Gymnasium's own CartPole-v1 (or --env), stepped in Python (dpt:
its external-env loop; SB3: DummyVecEnv), with one of two sets of settings:

  sb3 (the default): Stable-Baselines3's PPO defaults on one env: 2048 steps
      per update, 10 epochs of minibatches of 64, Adam at 3e-4 (eps 1e-5),
      gamma 0.99, GAE lambda 0.95, clip 0.2 (no value clipping), no entropy
      bonus, value loss 0.5, gradient norm 0.5;
  cleanrl: CleanRL's settings for CartPole on 8 envs: 128 steps per env and
      update, 4 epochs of minibatches of 256, Adam at 2.5e-4 decayed linearly
      to 0, clip 0.2 (the value too), entropy 0.01, otherwise as above.

Both use tanh MLPs 64-64 for actor and critic and normalize advantages per
minibatch. Every env is wrapped in the same timer, so each run's share of
time inside the envs (reset and step) is measured the same way. After each
run, 20 greedy episodes (seeds 1000..1019) give its return.

usage: bench/compare_python_env_ppo.py [--steps N] [--reps R] [--env ID]
                                       [--settings sb3|cleanrl]
prints one row per run and the medians; "skipped: ..." (exit 0) without
gymnasium, stable_baselines3 or torch.
"""
import argparse
import statistics
import sys
import time

PRESETS = {
    "sb3": dict(n_envs=1, n_steps=2048, batch=64, epochs=10, lr=3e-4, linear=False, gamma=0.99,
                lam=0.95, clip=0.2, clip_vf=None, ent=0.0, vf=0.5, max_grad=0.5, hidden=[64, 64]),
    "cleanrl": dict(n_envs=8, n_steps=128, batch=256, epochs=4, lr=2.5e-4, linear=True,
                    gamma=0.99, lam=0.95, clip=0.2, clip_vf=0.2, ent=0.01, vf=0.5, max_grad=0.5,
                    hidden=[64, 64]),
}
SETTINGS = PRESETS["sb3"]


def timed_env(gym, env_id, clock):
    """gym.make(env_id) whose reset and step add their time to clock[0]."""

    class Timed(gym.Wrapper):
        def step(self, action):
            t0 = time.perf_counter()
            out = self.env.step(action)
            clock[0] += time.perf_counter() - t0
            return out

        def reset(self, **kw):
            t0 = time.perf_counter()
            out = self.env.reset(**kw)
            clock[0] += time.perf_counter() - t0
            return out

    return Timed(gym.make(env_id))


def greedy_return(gym, env_id, act, episodes=20):
    env = gym.make(env_id)
    total = 0.0
    for k in range(episodes):
        obs, _ = env.reset(seed=1000 + k)
        done = False
        while not done:
            obs, r, te, tr, _ = env.step(act(obs))
            total += r
            done = te or tr
    env.close()
    return total / episodes


def run_dpt(gym, env_id, steps, seed):
    import dpt

    s = SETTINGS
    clock = [0.0]
    envs = [timed_env(gym, env_id, clock) for _ in range(s["n_envs"])]
    cfg = {"job": "ppo", "seed": seed, "num_envs_per_worker": s["n_envs"],
           "rollout_fragment_length": s["n_steps"], "sgd_minibatch_size": s["batch"],
           "num_sgd_iter": s["epochs"], "lr": s["lr"],
           "lr_schedule": "linear" if s["linear"] else "constant", "adam_eps": 1e-5,
           "gamma": s["gamma"], "lambda": s["lam"], "clip_param": s["clip"],
           "vf_clip_param": s["clip_vf"] or 0, "entropy_coeff": s["ent"], "vf_loss_coeff": s["vf"],
           "grad_clip": s["max_grad"], "policy_hidden": s["hidden"], "total_timesteps": steps}
    t0 = time.perf_counter()
    with dpt.Trainer(cfg, env=envs) as t:
        while not t.train()["done"]:
            pass
        wall = time.perf_counter() - t0
        import tempfile

        with tempfile.TemporaryDirectory() as d:
            policy = dpt.load(t.save(d + "/final.safetensors"))
    ret = greedy_return(gym, env_id, lambda o: int(policy.predict(o)[0]))
    return wall, clock[0] / wall, ret


def run_sb3(gym, env_id, steps, seed):
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv

    s = SETTINGS
    clock = [0.0]
    venv = DummyVecEnv([lambda: timed_env(gym, env_id, clock)] * s["n_envs"])
    model = PPO("MlpPolicy", venv, n_steps=s["n_steps"], batch_size=s["batch"],
                n_epochs=s["epochs"],
                learning_rate=(lambda f: s["lr"] * f) if s["linear"] else s["lr"],
                gamma=s["gamma"], gae_lambda=s["lam"], clip_range=s["clip"],
                clip_range_vf=s["clip_vf"],
                ent_coef=s["ent"], vf_coef=s["vf"], max_grad_norm=s["max_grad"],
                policy_kwargs=dict(net_arch=dict(pi=s["hidden"], vf=s["hidden"]),
                                   activation_fn=torch.nn.Tanh),
                seed=seed, device="cpu", verbose=0)
    t0 = time.perf_counter()
    model.learn(total_timesteps=steps)
    wall = time.perf_counter() - t0
    venv.close()
    ret = greedy_return(gym, env_id, lambda o: int(model.predict(o, deterministic=True)[0]))
    return wall, clock[0] / wall, ret


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200000, help="env steps per training run")
    ap.add_argument("--reps", type=int, default=3, help="runs of each, in turns")
    ap.add_argument("--env", default="CartPole-v1", help="a Gymnasium id (Discrete actions)")
    ap.add_argument("--settings", choices=sorted(PRESETS), default="sb3")
    a = ap.parse_args()
    global SETTINGS
    SETTINGS = PRESETS[a.settings]
    try:
        import gymnasium as gym
        import stable_baselines3
        import torch
        import dpt
    except ImportError as e:
        print("skipped: %s (pip install gymnasium stable-baselines3 torch ./python)" % e)
        return 0
    print("# dpt %s, Stable-Baselines3 %s, PyTorch %s (%d threads), Gymnasium %s" %
          (dpt.__version__, stable_baselines3.__version__, torch.__version__,
           torch.get_num_threads(), gym.__version__))
    print("# %s x %d stepped in Python, %d steps per run, settings %s: %s" %
          (a.env, SETTINGS["n_envs"], a.steps, a.settings, SETTINGS))
    print("%-4s %9s %9s %7s %9s %9s %7s %7s" % ("rep", "dpt_s", "dpt_env%", "dpt_ret", "sb3_s",
                                               "sb3_env%", "sb3_ret", "ratio"))
    rows = []
    for rep in range(1, a.reps + 1):
        d = run_dpt(gym, a.env, a.steps, rep)
        s = run_sb3(gym, a.env, a.steps, rep)
        rows.append((d, s))
        print("%-4d %9.2f %9.1f %7.1f %9.2f %9.1f %7.1f %7.2f" %
              (rep, d[0], 100 * d[1], d[2], s[0], 100 * s[1], s[2], s[0] / d[0]), flush=True)
    med = statistics.median
    dw, sw = med(r[0][0] for r in rows), med(r[1][0] for r in rows)
    print("median: dpt %.2f s (%.0f%% in the env, return %.1f), SB3 %.2f s (%.0f%% in the env, "
          "return %.1f): dpt %.2fx faster" %
          (dw, 100 * med(r[0][1] for r in rows), med(r[0][2] for r in rows), sw,
           100 * med(r[1][1] for r in rows), med(r[1][2] for r in rows), sw / dw))
    return 0


if __name__ == "__main__":
    sys.exit(main())
