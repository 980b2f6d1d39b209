#!/usr/bin/env python3
"""The policy of a dpt RL checkpoint (ppo, ddppo, appo, impala), rebuilt from
the checkpoint alone with numpy: the reference for reading dpt's RL
checkpoints from Python (docs/CHECKPOINTS.md).

    policy = dpt.load("runs/ppo-CartPole-v1-20261123-101500")  # or a .safetensors file
    actions, state = policy.predict(obs)          # obs [n, obs_dim] (or [obs_dim])
    policy.weights["actor.0.weight"]              # the variables, as numpy arrays

The checkpoint's metadata says what to build: obs_dim, action_kind,
num_actions or action_dim, policy_hidden, and for recurrent policies
use_lstm, lstm_cell_size, lstm_use_prev_action, lstm_use_prev_reward and
lstm_prev_reward_scale. The variables are the tensors params.<name> (F32;
in an appo or impala checkpoint of several policies, whose metadata
appo.policies names them, policy.<policy>.params.<name>: `policy` picks one,
by default the first of appo.policies_to_train):
actor.0, actor.2, ... and critic.0, ... as PyTorch's nn.Sequential names them
(tanh between), log_std, and lstm.weight_ih [4H, I], lstm.weight_hh [4H, H],
lstm.bias [4H] (gates i, f, g, o). Sums are in double precision, so greedy
actions are those of dpt's own policy except on near-ties.

A policy with an encoder has the metadata network (a description in the
model language, docs/MODELS.md, with no output layer) and obs_shape "C,H,W",
and the variables encoder.<i>.weight and encoder.<i>.bias: the observations,
as [n, C, H, W] images, go through the encoder's layers (dpt.network), and
its output rows, flattened, take the place of the observations as the input
of the LSTM or of the actor and critic. An encoder with a batchnorm layer is
refused, as the RL jobs refuse it.

A recurrent policy carries a State (h, c and the previous actions) from
step to step: predict returns it, and takes it back with the next
observations, with `reward` (the rewards of the previous step, which it
feeds when lstm_use_prev_reward is set) and `episode_start` (rows whose
episode starts: zero state, no previous action or reward).

As a command, `python3 policy.py CHECKPOINT` (or `python3 -m dpt.policy`)
reads one line per step from standard input: "reset" (an episode starts), or
the observation's values, optionally followed by "| REWARD", the reward the
previous step earned. It prints the greedy action, the value and the actor's
output of each step, and takes the printed action as the previous action of
the next step.
"""
import json
import os
import re
import stat
import struct
import sys
from typing import NamedTuple

import numpy as np

try:  # the package's libdpt hashes fast; the file also runs on its own
    from . import _lib as _dptlib
except ImportError:
    _dptlib = None
try:  # the model language, for a policy with an encoder (network.py beside this file)
    from . import network as _network
except ImportError:
    try:
        import network as _network
    except ImportError:
        _network = None

__all__ = ["Policy", "State", "load", "read_checkpoint", "find_checkpoint"]

DTYPES = {"F32": "<f4", "I32": "<i4", "U8": "u1", "I64": "<i8", "F64": "<f8"}
MAX_HEADER = 100 << 20
RL_JOBS = ("ppo", "ddppo", "appo", "impala")
SUPERVISED_JOBS = ("supervised", "sync_replicas")  # dpt.load gives a dpt.Model


def fnv1a64(data):
    """64-bit FNV-1a of `data` (libdpt's when the package has one)."""
    if _dptlib is not None:
        try:
            return _dptlib.fnv1a64(data)
        except (ImportError, OSError):
            pass
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def read_checkpoint(path, verify=True):
    """The tensors of a safetensors file as {name: read-only numpy array}
    and its metadata {key: str}. With verify, a file that has dpt's
    "dpt.checksum" must match it (docs/CHECKPOINTS.md). ValueError names
    the file and the problem."""
    with open(path, "rb") as f:
        # A device or a pipe (/dev/zero) is refused before anything is read,
        # as dpt eval refuses it; a regular file's size bounds the header.
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("checkpoint %s: not a regular file" % path)
        head = f.read(8)
        if len(head) < 8:
            raise ValueError("checkpoint %s: truncated, or not a safetensors file" % path)
        (n,) = struct.unpack_from("<Q", head)
        if n == 0 or n > MAX_HEADER or 8 + n > st.st_size:
            raise ValueError("checkpoint %s: header length %d does not fit the file's %d bytes: "
                             "truncated, or not a safetensors file" % (path, n, st.st_size))
        raw = head + f.read(st.st_size - 8)
    try:
        header = json.loads(raw[8:8 + n])
        meta = header.pop("__metadata__", {})
    except (ValueError, AttributeError) as e:
        raise ValueError("checkpoint %s: bad header (%s)" % (path, e)) from None
    if verify and ("dpt.checksum" in meta or "dpt.format" in meta):
        cks = meta.get("dpt.checksum", "")
        if not re.fullmatch(r"fnv1a64:[0-9a-f]{16}", cks):
            raise ValueError("checkpoint %s: no valid dpt.checksum" % path)
        # The digits are hashed as sixteen '0'; the first occurrence of the
        # value is in the header.
        zeroed = raw.replace(cks.encode(), b"fnv1a64:" + b"0" * 16, 1)
        if "%016x" % fnv1a64(zeroed) != cks[8:]:
            raise ValueError("checkpoint %s: checksum mismatch: the file is corrupted" % path)
    data = memoryview(raw)[8 + n:]
    tensors = {}
    for name, t in header.items():
        try:
            dtype = np.dtype(DTYPES[t["dtype"]])
            begin, end = t["data_offsets"]
            shape = tuple(t["shape"])
        except (KeyError, TypeError, ValueError):
            raise ValueError("checkpoint %s: tensor %s: unsupported or malformed entry" %
                             (path, name)) from None
        count = int(np.prod(shape, dtype=np.int64))
        if not 0 <= begin <= end <= len(data) or end - begin != count * dtype.itemsize:
            raise ValueError("checkpoint %s: tensor %s: offsets [%d, %d) do not fit its shape" %
                             (path, name, begin, end))
        tensors[name] = np.frombuffer(data[begin:end], dtype=dtype).reshape(shape)
    return tensors, meta


def find_checkpoint(path):
    """The checkpoint file of `path`: the file itself, or for a run
    directory its newest checkpoint that validates (as `dpt eval` and
    resume choose), with its tensors and metadata: (file, tensors, meta)."""
    if not os.path.isdir(path):
        return (path,) + read_checkpoint(path)
    ckdir = os.path.join(path, "checkpoints")
    found = []
    if os.path.isdir(ckdir):
        for f in os.listdir(ckdir):
            m = re.fullmatch(r"checkpoint-(\d+)\.safetensors", f)
            if m:
                found.append((int(m.group(1)), os.path.join(ckdir, f)))
    skipped = []
    for _, f in sorted(found, reverse=True):
        try:
            return (f,) + read_checkpoint(f)
        except ValueError as e:  # a corrupt newer checkpoint is skipped
            skipped.append(str(e))
    raise FileNotFoundError("%s: no valid checkpoint in %s%s" %
                            (path, ckdir, "".join("; " + s for s in skipped)))


class State(NamedTuple):
    """What a recurrent policy carries from one step of n envs to the next."""

    h: np.ndarray  # [n, H] the LSTM's hidden state
    c: np.ndarray  # [n, H] its cell state
    prev_action: np.ndarray  # [n] int (-1: none) or [n, action_dim] float


def _sigmoid(z):
    return 0.5 * (1.0 + np.tanh(0.5 * z))


class Policy:
    """The actor-critic policy of an RL checkpoint file or run directory."""

    def __init__(self, path, policy=None, _found=None):
        self.path, tensors, meta = _found or find_checkpoint(os.fspath(path))
        self.meta = meta
        job = meta.get("job")
        if job is not None and job not in RL_JOBS:
            raise ValueError("checkpoint %s is a %s checkpoint, not an RL policy" %
                             (self.path, job))
        try:
            self.obs_dim = int(meta["obs_dim"])
            self.discrete = meta["action_kind"] == "discrete"
            self.action_dim = int(meta["num_actions"] if self.discrete else meta["action_dim"])
            nhidden = len(meta["policy_hidden"].split(","))
        except KeyError as e:
            raise ValueError("checkpoint %s has no metadata %s: not a dpt RL checkpoint" %
                             (self.path, e)) from None
        self.env = meta.get("env")
        text = meta.get("env_config", "")
        self.env_config = dict(kv.split("=", 1) for kv in text.split(",")) if text else {}
        prefix = _params_prefix(self.path, meta, policy)
        self.weights = {k[len(prefix):]: v for k, v in tensors.items()
                        if k.startswith(prefix)}
        # Double-precision copies for the forward pass.
        self._w = {k: v.astype(np.float64) for k, v in self.weights.items()}
        # An MLP is linear layers at even positions, tanh after each hidden one.
        self._layers = 2 * nhidden + 1
        self.use_lstm = meta.get("use_lstm") == "true"
        if self.use_lstm:
            self.lstm_cell_size = int(meta["lstm_cell_size"])
            self.prev_action = meta["lstm_use_prev_action"] == "true"
            self.prev_reward = meta["lstm_use_prev_reward"] == "true"
            self.reward_scale = float(meta.get("lstm_prev_reward_scale", "1"))
        missing = [k for k in ("actor.0.weight", "critic.0.weight") if k not in self._w]
        if missing:
            raise ValueError("checkpoint %s has no variable %s" % (self.path, missing[0]))
        self.encoder = self._encoder(meta.get("network"), meta.get("obs_shape"))

    def _encoder(self, text, shape):
        """The encoder of metadata network (a dpt.network.Network), or None."""
        if not text:
            return None
        if _network is None:
            raise ValueError("checkpoint %s has an encoder (network = %s): reading it needs "
                             "network.py beside policy.py" % (self.path, text))
        try:
            shape = _network.shape_of(shape or "")
            if int(np.prod(shape)) != self.obs_dim:
                raise ValueError("obs_shape %s does not hold obs_dim %d values" %
                                 (",".join(map(str, shape)), self.obs_dim))
            layers = _network.parse(text)
            for i, spec in enumerate(layers):  # as dpt train refuses it for the RL jobs
                if spec.kind == "batchnorm":
                    raise ValueError("network: layer %d is batchnorm, which the RL jobs do not "
                                     "take (only supervised and sync_replicas)" % (i + 1))
            return _network.Network(layers, shape, self.weights, "encoder.")
        except ValueError as e:
            raise ValueError("checkpoint %s: encoder: %s" % (self.path, e)) from None

    def __repr__(self):
        return "<dpt.Policy %s: %s, %s>" % (self.path, self.env,
                                            "LSTM %d" % self.lstm_cell_size
                                            if self.use_lstm else "feed-forward")

    def initial_state(self, n=1):
        """The state of n envs at an episode's start (None when the policy is
        not recurrent)."""
        if not self.use_lstm:
            return None
        H = self.lstm_cell_size
        prev = (np.full(n, -1, np.int64) if self.discrete
                else np.zeros((n, self.action_dim), np.float32))
        return State(np.zeros((n, H)), np.zeros((n, H)), prev)

    def _mlp(self, prefix, x):
        for i in range(0, self._layers, 2):
            x = x @ self._w["%s.%d.weight" % (prefix, i)].T + self._w["%s.%d.bias" % (prefix, i)]
            if i + 1 < self._layers:
                x = np.tanh(x)
        return x

    def _forward(self, obs, state, episode_start, reward):
        """The actor's output (logits or mean) [n, A], the values [n], the
        LSTM's next (h, c) or None, and the batch's previous actions."""
        x = np.asarray(obs, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.obs_dim:
            raise ValueError("observations of shape %s; the policy takes [n, %d]" %
                             (x.shape, self.obs_dim))
        n = x.shape[0]
        hc = None
        if self.encoder is not None:
            x = self.encoder.forward(x)
        if self.use_lstm:
            start = (np.ones(n, bool) if state is None else
                     np.broadcast_to(np.asarray(episode_start if episode_start is not None
                                                else False, bool), (n,)))
            st = self.initial_state(n) if state is None else state
            if st.h.shape != (n, self.lstm_cell_size):
                raise ValueError("a state of %d envs for %d observations" % (len(st.h), n))
            h = np.where(start[:, None], 0.0, st.h)
            c = np.where(start[:, None], 0.0, st.c)
            parts = [x]
            if self.prev_action:
                if self.discrete:
                    pa = np.where(start, -1, np.asarray(st.prev_action).reshape(n))
                    onehot = np.zeros((n, self.action_dim))
                    rows = np.flatnonzero(pa >= 0)
                    onehot[rows, pa[rows]] = 1.0
                    parts.append(onehot)
                else:
                    pa = np.where(start[:, None], 0.0, np.asarray(st.prev_action, np.float64))
                    parts.append(pa.reshape(n, self.action_dim))
            if self.prev_reward:
                if reward is None:
                    if not start.all():
                        raise ValueError("this policy reads the previous reward: pass reward= "
                                         "(the rewards of the last step) with the state")
                    r = np.zeros(n)
                else:
                    r = np.where(start, 0.0, np.broadcast_to(np.asarray(reward, np.float64),
                                                             (n,)))
                parts.append((r * self.reward_scale)[:, None])
            z = (np.concatenate(parts, axis=1) @ self._w["lstm.weight_ih"].T +
                 h @ self._w["lstm.weight_hh"].T + self._w["lstm.bias"])
            H = self.lstm_cell_size
            c = _sigmoid(z[:, H:2 * H]) * c + _sigmoid(z[:, :H]) * np.tanh(z[:, 2 * H:3 * H])
            h = _sigmoid(z[:, 3 * H:]) * np.tanh(c)
            x, hc = h, (h, c)
        return self._mlp("actor", x), self._mlp("critic", x)[:, 0], hc

    def predict(self, obs, state=None, deterministic=True, episode_start=None, reward=None,
                rng=None):
        """Actions for observations obs [n, obs_dim] (or one [obs_dim]):
        the greedy ones (arg-max of the logits, or the mean of box actions)
        when deterministic, else sampled with rng (a numpy Generator).
        Returns (actions, state): actions [n] int64 or [n, action_dim] float32
        (one action for one observation), and the recurrent state to pass
        with the next observations (None for a feed-forward policy). state
        None starts every row's episode."""
        x = np.asarray(obs)
        single = x.ndim == 1
        if single:
            x = x[None]
        out, _, hc = self._forward(x, state, episode_start, reward)
        if self.discrete:
            if deterministic:
                actions = np.argmax(out, axis=1)
            else:
                rng = rng if rng is not None else np.random.default_rng()
                p = np.exp(out - out.max(axis=1, keepdims=True))
                p /= p.sum(axis=1, keepdims=True)
                actions = (p.cumsum(axis=1) < rng.random((len(p), 1))).sum(axis=1)
                actions = np.minimum(actions, self.action_dim - 1)
            actions = actions.astype(np.int64)
        else:
            if not deterministic:
                rng = rng if rng is not None else np.random.default_rng()
                std = np.exp(self._w["log_std"])
                out = out + std * rng.standard_normal(out.shape)
            actions = out.astype(np.float32)
        new_state = None if hc is None else State(hc[0], hc[1], actions.copy())
        return (actions[0] if single else actions), new_state

    def value(self, obs, state=None, episode_start=None, reward=None):
        """The critic's values of obs [n, obs_dim] after `state` (which is not
        changed): [n], or one value for one observation."""
        x = np.asarray(obs)
        single = x.ndim == 1
        _, v, _ = self._forward(x[None] if single else x, state, episode_start, reward)
        return float(v[0]) if single else v

    def make_env(self, **env_config):
        """The checkpoint's env as a gymnasium.Env (dpt.gym.make) with the
        parameters it was trained with, changed by env_config."""
        from . import gym

        return gym.make(self.env, env_config={**self.env_config, **env_config})


def _params_prefix(path, meta, policy):
    """The prefix of the policy's variables: "params.", or for a checkpoint
    of several policies "policy.<policy>.params."."""
    names = meta.get("appo.policies")
    if not names:
        if policy is not None:
            raise ValueError("checkpoint %s holds one policy: leave out policy=%r" %
                             (path, policy))
        return "params."
    names = names.split(",")
    if policy is None:
        policy = (meta.get("appo.policies_to_train") or names[0]).split(",")[0]
    if policy not in names:
        raise ValueError("checkpoint %s has no policy %r (policies: %s)" %
                         (path, policy, ", ".join(names)))
    return "policy.%s.params." % policy


def load(path, policy=None, weights=None):
    """What a checkpoint file, or a run directory's newest valid checkpoint,
    holds: for an RL job a Policy (of a checkpoint of several policies, appo
    or impala, policy `policy`: default the first trained one); for a
    supervised or sync_replicas job a dpt.Model (dpt/model.py), of its
    variables or, with weights="ema", of their moving average."""
    found = find_checkpoint(os.fspath(path))
    if found[2].get("job") in SUPERVISED_JOBS:
        if policy is not None:
            raise ValueError("checkpoint %s is a supervised model: leave out policy=%r" %
                             (found[0], policy))
        from .model import Model

        return Model(path, weights or "params", _found=found)
    if weights is not None:
        raise ValueError("checkpoint %s is an RL policy: weights=%r is for supervised models" %
                         (found[0], weights))
    return Policy(path, policy, _found=found)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: policy.py CHECKPOINT < steps")
    policy = Policy(sys.argv[1])
    state = None
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        if line == "reset":
            state = None
            continue
        obs, _, reward = line.partition("|")
        x = np.array([[float(v) for v in obs.split()]])
        r = [float(reward)] if reward.strip() else [0.0]
        out, value, hc = policy._forward(x, state, None, r if state is not None else None)
        action = int(np.argmax(out[0])) if policy.discrete else out[0]
        if hc is not None:
            prev = np.array([action]) if policy.discrete else out.astype(np.float32)
            state = State(hc[0], hc[1], prev)
        print(action if policy.discrete else " ".join("%.9g" % a for a in action),
              "%.9g" % value[0], " ".join("%.9g" % v for v in out[0]))


if __name__ == "__main__":
    main()
