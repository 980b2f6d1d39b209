#!/usr/bin/env python3
"""PPO on the minatar package with PyTorch, written in the CleanRL style: the
reference that bench/compare_minatar_ppo.sh runs beside dpt's
examples/minatar_<game>_ppo.conf.

    python3 bench/torch_minatar_ppo.py --game breakout --seed 1 --steps 2000000
                                       [--threads 2] [--json]

The same network, settings and bookkeeping as the dpt example:
  envs      128 minatar.Environment (sticky actions 0.1, ramping on), the
            game's minimal action set, stepped in turn (CleanRL's
            SyncVectorEnv); an env that ends is reset at once; no time limit.
  network   Conv2d(C, 32, 2, padding 'same') ReLU AvgPool2d(2) Flatten
            Linear(800, 64) ReLU, then an actor Linear(64, 64) Tanh
            Linear(64, 64) Tanh Linear(64, A) and a critic of the same hidden
            layers with 1 output; CleanRL's orthogonal init (gain sqrt 2,
            0.01 for the actor's output, 1 for the critic's), biases 0.
  PPO       128 steps per env per update (16384 samples), GAE gamma 0.99,
            lambda 0.95; 3 epochs of minibatches of 4096; advantages
            standardized per minibatch; clipped surrogate 0.2; clipped value
            loss 0.5 max((V - R)^2, (V_clip - R)^2) with clip 0.2; entropy
            0.01; value coefficient 0.5; global gradient norm 0.5; Adam lr
            3e-4 (constant), eps 1e-5.
Reports the mean return of the last 100 finished episodes and the wall time
(environment, inference and learning together), as dpt's run summary does.
Without torch or minatar it prints "skipped: ..." and exits 0.
"""
import argparse
import collections
import json
import logging
import time

NUM_ENVS, NUM_STEPS, MINIBATCH, EPOCHS = 128, 128, 4096, 3
GAMMA, LAMBDA, CLIP, VF_CLIP, ENT, VF, MAX_NORM, LR, EPS = (
    0.99, 0.95, 0.2, 0.2, 0.01, 0.5, 0.5, 3e-4, 1e-5)


def build(torch, channels, actions):
    nn = torch.nn

    def init(layer, gain):
        nn.init.orthogonal_(layer.weight, gain)
        nn.init.zeros_(layer.bias)
        return layer

    g = 2 ** 0.5
    # padding 'same' for the even kernel: the extra row and column at the
    # bottom and right, as XLA's SAME and dpt's pad=same.
    enc = nn.Sequential(nn.ZeroPad2d((0, 1, 0, 1)), init(nn.Conv2d(channels, 32, 2), g), nn.ReLU(),
                        nn.AvgPool2d(2), nn.Flatten(), init(nn.Linear(800, 64), g), nn.ReLU())
    actor = nn.Sequential(init(nn.Linear(64, 64), g), nn.Tanh(), init(nn.Linear(64, 64), g),
                          nn.Tanh(), init(nn.Linear(64, actions), 0.01))
    critic = nn.Sequential(init(nn.Linear(64, 64), g), nn.Tanh(), init(nn.Linear(64, 64), g),
                           nn.Tanh(), init(nn.Linear(64, 1), 1.0))
    return enc, actor, critic


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--game", default="breakout",
                    choices=["asterix", "breakout", "freeway", "seaquest", "space_invaders"])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--steps", type=int, default=2000000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", action="store_true", help="one JSON line at the end")
    a = ap.parse_args()
    try:
        import numpy as np
        import torch
        logging.disable(logging.WARNING)  # (minatar warns when matplotlib is missing)
        import minatar
    except ImportError as e:
        print("skipped: %s (needs torch, numpy and minatar)" % e)
        return 0
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    rng = np.random.default_rng(a.seed)
    envs = []
    for i in range(NUM_ENVS):
        e = minatar.Environment(a.game)
        e.seed(a.seed * 1000 + i)
        e.reset()
        envs.append(e)
    action_set = envs[0].minimal_action_set()
    channels = envs[0].state_shape()[2]
    enc, actor, critic = build(torch, channels, len(action_set))
    params = list(enc.parameters()) + list(actor.parameters()) + list(critic.parameters())
    opt = torch.optim.Adam(params, lr=LR, eps=EPS)

    def observe():
        return torch.from_numpy(
            np.stack([e.state() for e in envs]).transpose(0, 3, 1, 2).astype(np.float32))

    obs_buf = torch.zeros((NUM_STEPS, NUM_ENVS, channels, 10, 10))
    act_buf = torch.zeros((NUM_STEPS, NUM_ENVS), dtype=torch.long)
    logp_buf = torch.zeros((NUM_STEPS, NUM_ENVS))
    rew_buf = torch.zeros((NUM_STEPS, NUM_ENVS))
    done_buf = torch.zeros((NUM_STEPS, NUM_ENVS))
    val_buf = torch.zeros((NUM_STEPS, NUM_ENVS))
    ep_ret = np.zeros(NUM_ENVS)
    finished = collections.deque(maxlen=100)
    episodes = 0
    obs = observe()
    done = torch.zeros(NUM_ENVS)
    steps = 0
    t0 = time.perf_counter()
    while steps < a.steps:
        for t in range(NUM_STEPS):
            obs_buf[t], done_buf[t] = obs, done
            with torch.no_grad():
                h = enc(obs)
                logits, value = actor(h), critic(h).squeeze(1)
                dist = torch.distributions.Categorical(logits=logits)
                action = dist.sample()
            act_buf[t], logp_buf[t], val_buf[t] = action, dist.log_prob(action), value
            rewards, dones = np.zeros(NUM_ENVS), np.zeros(NUM_ENVS)
            for i, e in enumerate(envs):
                r, d = e.act(action_set[int(action[i])])
                ep_ret[i] += r
                rewards[i] = r
                if d:
                    finished.append(ep_ret[i])
                    episodes += 1
                    ep_ret[i] = 0.0
                    e.reset()
                    dones[i] = 1.0
            rew_buf[t] = torch.from_numpy(rewards)
            obs, done = observe(), torch.from_numpy(dones).float()
        steps += NUM_STEPS * NUM_ENVS
        # GAE, as CleanRL: done[t] marks that obs[t] starts a new episode.
        with torch.no_grad():
            next_value = critic(enc(obs)).squeeze(1)
            adv = torch.zeros_like(rew_buf)
            last = torch.zeros(NUM_ENVS)
            for t in reversed(range(NUM_STEPS)):
                nonterminal = 1.0 - (done if t == NUM_STEPS - 1 else done_buf[t + 1])
                nv = next_value if t == NUM_STEPS - 1 else val_buf[t + 1]
                delta = rew_buf[t] + GAMMA * nv * nonterminal - val_buf[t]
                last = delta + GAMMA * LAMBDA * nonterminal * last
                adv[t] = last
            ret = adv + val_buf
        b_obs = obs_buf.reshape((-1, channels, 10, 10))
        b_act, b_logp = act_buf.reshape(-1), logp_buf.reshape(-1)
        b_adv, b_ret, b_val = adv.reshape(-1), ret.reshape(-1), val_buf.reshape(-1)
        n = b_obs.shape[0]
        for _ in range(EPOCHS):
            perm = torch.from_numpy(rng.permutation(n))
            for s in range(0, n, MINIBATCH):
                mb = perm[s:s + MINIBATCH]
                h = enc(b_obs[mb])
                dist = torch.distributions.Categorical(logits=actor(h))
                v = critic(h).squeeze(1)
                ratio = (dist.log_prob(b_act[mb]) - b_logp[mb]).exp()
                ma = b_adv[mb]
                ma = (ma - ma.mean()) / (ma.std() + 1e-8)
                pg = torch.max(-ma * ratio, -ma * ratio.clamp(1 - CLIP, 1 + CLIP)).mean()
                vc = b_val[mb] + (v - b_val[mb]).clamp(-VF_CLIP, VF_CLIP)
                vl = 0.5 * torch.max((v - b_ret[mb]) ** 2, (vc - b_ret[mb]) ** 2).mean()
                loss = pg - ENT * dist.entropy().mean() + VF * vl
                opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params, MAX_NORM)
                opt.step()
    wall = time.perf_counter() - t0
    mean100 = float(np.mean(finished)) if finished else float("nan")
    if a.json:
        print(json.dumps({"impl": "torch", "game": a.game, "seed": a.seed, "steps": steps,
                          "wall_s": round(wall, 2), "return_last100": round(mean100, 3),
                          "episodes": episodes, "threads": a.threads}))
    else:
        print("torch PPO %s seed %d: %d steps in %.1f s (%.0f steps/s); return %.2f "
              "(mean of last 100 episodes), %d episodes" % (
                  a.game, a.seed, steps, wall, steps / wall, mean100, episodes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
