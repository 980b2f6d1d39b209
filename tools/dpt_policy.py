#!/usr/bin/env python3
"""Rebuilds a dpt PPO / DD-PPO policy from a checkpoint, with the standard
library only, and steps it: the reference for reading dpt's RL checkpoints
from Python (docs/CHECKPOINTS.md).

The checkpoint's metadata says what to build: obs_dim, action_kind,
num_actions or action_dim, policy_hidden, and for recurrent policies
use_lstm, lstm_cell_size, lstm_use_prev_action, lstm_use_prev_reward and
lstm_prev_reward_scale. The tensors are params.<variable> (F32).

  policy = Policy("run/checkpoints/checkpoint-00000100.safetensors")
  policy.reset()                        # at the start of every episode
  action, value, out = policy.step(obs) # greedy action, V(obs), logits or mean
  policy.observe(action, reward)        # what the env answered (recurrent
                                        # policies feed it to the next step)

As a command: python3 dpt_policy.py CHECKPOINT reads one line per step from
standard input, "reset" (an episode starts), or the observation's values,
optionally followed by "| REWARD", the reward the previous step earned; it
prints the greedy action, the value and the actor's output of each step, and
takes the printed action as the previous action of the next step.
"""
import json
import math
import struct
import sys


def read_dpt(path):
    """The F32 tensors "params.<name>" of a dpt checkpoint as
    {name: (values, shape)}, and its metadata."""
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    data = raw[8 + n:]
    params = {}
    for name, t in header.items():
        if not name.startswith("params.") or t["dtype"] != "F32":
            continue
        begin, end = t["data_offsets"]
        values = struct.unpack("<%df" % ((end - begin) // 4), data[begin:end])
        params[name[len("params."):]] = (values, t["shape"])
    return params, meta


def linear(params, name, x):
    """y = W x + b of the variables name.weight [O, I], name.bias [O]."""
    w, (rows, cols) = params[name + ".weight"]
    b, _ = params[name + ".bias"]
    return [b[i] + sum(w[i * cols + j] * x[j] for j in range(cols)) for i in range(rows)]


def sigmoid(z):
    return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))


class Policy:
    def __init__(self, path):
        self.p, self.meta = read_dpt(path)
        m = self.meta
        self.obs_dim = int(m["obs_dim"])
        self.discrete = m["action_kind"] == "discrete"
        self.out_dim = int(m["num_actions"] if self.discrete else m["action_dim"])
        # An MLP stack is named as PyTorch's nn.Sequential: linear layers at
        # even positions, tanh after each hidden one.
        self.layers = 2 * len(m["policy_hidden"].split(",")) + 1
        self.lstm = m.get("use_lstm") == "true"
        if self.lstm:
            self.H = int(m["lstm_cell_size"])
            self.prev_action = m["lstm_use_prev_action"] == "true"
            self.prev_reward = m["lstm_use_prev_reward"] == "true"
            self.reward_scale = float(m.get("lstm_prev_reward_scale", "1"))
        self.reset()

    def reset(self):
        """The start of an episode: zero state, no previous action or reward."""
        if self.lstm:
            self.h = [0.0] * self.H
            self.c = [0.0] * self.H
            self.last_action = None
            self.last_reward = 0.0

    def observe(self, action, reward):
        """The action taken and the reward received, for the next step."""
        if self.lstm:
            self.last_action = action
            self.last_reward = reward

    def _mlp(self, prefix, x):
        for i in range(0, self.layers, 2):
            x = linear(self.p, "%s.%d" % (prefix, i), x)
            if i + 1 < self.layers:
                x = [math.tanh(v) for v in x]
        return x

    def _lstm_step(self, x):
        """One step of dpt's LSTM (include/dpt/lstm.h): gates i, f, g, o."""
        H = self.H
        wih, (_, cols) = self.p["lstm.weight_ih"]
        whh, _ = self.p["lstm.weight_hh"]
        bias, _ = self.p["lstm.bias"]
        z = [bias[r] + sum(wih[r * cols + j] * x[j] for j in range(cols)) +
             sum(whh[r * H + j] * self.h[j] for j in range(H)) for r in range(4 * H)]
        c = [sigmoid(z[H + k]) * self.c[k] + sigmoid(z[k]) * math.tanh(z[2 * H + k])
             for k in range(H)]
        self.h = [sigmoid(z[3 * H + k]) * math.tanh(c[k]) for k in range(H)]
        self.c = c
        return self.h

    def step(self, obs):
        """The greedy action for obs, the value, and the actor's output
        (logits, or the mean of box actions); advances a recurrent state."""
        x = [float(v) for v in obs]
        if self.lstm:
            if self.prev_action:
                if self.discrete:
                    onehot = [0.0] * self.out_dim
                    if self.last_action is not None:
                        onehot[int(self.last_action)] = 1.0
                    x += onehot
                else:
                    x += list(self.last_action or [0.0] * self.out_dim)
            if self.prev_reward:
                x.append(self.last_reward * self.reward_scale)
            x = self._lstm_step(x)
        out = self._mlp("actor", x)
        value = self._mlp("critic", x)[0]
        action = max(range(len(out)), key=lambda k: out[k]) if self.discrete else out
        return action, value, out


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: dpt_policy.py CHECKPOINT < steps")
    policy = Policy(sys.argv[1])
    prev = None
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        if line == "reset":
            policy.reset()
            prev = None
            continue
        obs, _, reward = line.partition("|")
        if prev is not None:
            policy.observe(prev, float(reward) if reward.strip() else 0.0)
        action, value, out = policy.step(obs.split())
        print(action if policy.discrete else " ".join("%.9g" % a for a in action),
              "%.9g" % value, " ".join("%.9g" % v for v in out))
        prev = action


if __name__ == "__main__":
    main()
