"""dpt.load: the policy of a checkpoint or run directory trained by the dpt
command, against dpt's C policy on the same observations and against
`dpt eval` over the same episodes; recurrent policies carry h, c and the
previous action and reward."""
import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode
from c_policy import CPolicy

import dpt


def test_weights_and_checkpoints(ppo_run, tmp_path):
    policy = dpt.load(ppo_run)
    ckdir = ppo_run / "checkpoints"
    newest = sorted(ckdir.iterdir())[-1]
    assert policy.path == str(newest)
    tensors, meta = dpt.read_checkpoint(newest)
    assert meta["job"] == "ppo" and meta["env"] == "CartPole-v1"
    assert sorted(policy.weights) == sorted(k[7:] for k in tensors if k.startswith("params."))
    shapes = {k: v.shape for k, v in policy.weights.items()}
    assert shapes["actor.0.weight"] == (64, 4) and shapes["actor.4.weight"] == (2, 64)
    assert shapes["critic.4.weight"] == (1, 64) and shapes["critic.2.bias"] == (64,)
    assert all(v.dtype == np.float32 for v in policy.weights.values())
    assert np.array_equal(policy.weights["actor.0.weight"], tensors["params.actor.0.weight"])
    assert not policy.use_lstm and policy.initial_state() is None
    assert repr(policy).endswith("CartPole-v1, feed-forward>")
    # A corrupt newer checkpoint is skipped, as dpt eval and resume do; read
    # directly, it is refused.
    run = tmp_path / "run"
    shutil.copytree(ppo_run, run)
    bad = run / "checkpoints" / "checkpoint-99999999.safetensors"
    raw = bytearray(newest.read_bytes())
    raw[-3] ^= 0x40
    bad.write_bytes(bytes(raw))
    assert dpt.load(run).path == str(run / "checkpoints" / newest.name)
    with pytest.raises(ValueError, match="checksum mismatch"):
        dpt.load(bad)
    with pytest.raises(FileNotFoundError, match="no valid checkpoint"):
        dpt.load(tmp_path)


def test_load_refuses_devices_and_short_files(tmp_path):
    """A device is refused at once, without reading it (/dev/zero would
    never end), and a file shorter than its header says is refused."""
    with pytest.raises(ValueError, match="not a regular file"):
        dpt.load("/dev/zero")
    short = tmp_path / "short.safetensors"
    short.write_bytes((1000).to_bytes(8, "little") + b"{}")
    with pytest.raises(ValueError, match="header length 1000 does not fit the file's 10 bytes"):
        dpt.load(str(short))


def test_same_greedy_actions_as_c_policy(ppo_run):
    policy = dpt.load(ppo_run)
    rng = np.random.default_rng(0)
    # Observations from the envs and far outside them.
    obs = np.concatenate([rng.normal(0, 0.1, (500, 4)), rng.normal(0, 2.0, (500, 4))])
    obs = obs.astype(np.float32)
    c_actions, c_values = CPolicy(policy, len(obs)).act(obs)
    actions, state = policy.predict(obs)
    assert state is None and actions.dtype == np.int64 and actions.shape == (1000,)
    assert np.array_equal(actions, c_actions)
    assert 0 < actions.mean() < 1  # both actions occur
    np.testing.assert_allclose(policy.value(obs), c_values, rtol=1e-4, atol=1e-4)
    one, _ = policy.predict(obs[0])
    assert one == actions[0] and np.ndim(one) == 0
    assert policy.value(obs[0]) == pytest.approx(c_values[0], abs=1e-4)


def test_encoder_policy(dpt_bin, encoder_run):
    """A policy with an encoder: the same greedy actions and values as dpt's
    C policy, and the same returns as dpt eval."""
    policy = dpt.load(encoder_run)
    assert policy.meta["network"] == "dense(16) tanh dense(8) relu"
    assert policy.weights["encoder.0.weight"].shape == (16, 4)
    assert policy.weights["actor.0.weight"].shape[1] == 8
    rng = np.random.default_rng(1)
    obs = np.concatenate([rng.normal(0, 0.1, (300, 4)), rng.normal(0, 2.0, (300, 4))])
    obs = obs.astype(np.float32)
    c_actions, c_values = CPolicy(policy, len(obs)).act(obs)
    actions, _ = policy.predict(obs)
    assert np.array_equal(actions, c_actions)
    np.testing.assert_allclose(policy.value(obs), c_values, rtol=1e-4, atol=1e-4)
    ref = dpt_eval(dpt_bin, encoder_run, 3, 3)
    mean_return, _ = python_eval(policy, 3, 3)
    assert mean_return == pytest.approx(ref["mean_return"], rel=1e-12)


def dpt_eval(dpt_bin, run, episodes, seed):
    out = subprocess.run([dpt_bin, "eval", str(run), "--episodes", str(episodes), "--seed",
                          str(seed), "--json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def python_eval(policy, episodes, seed):
    """dpt eval's episodes, stepped in Python: one env on the evaluation's
    RNG streams (seed, EVAL_RANK), greedy actions, the recurrent state
    carried through each episode."""
    env = dpt.gym.make(policy.env, rank=dpt.gym.EVAL_RANK, env_config=policy.env_config)
    obs, _ = env.reset(seed=seed)
    returns, lengths, ret, steps, state, reward = [], [], 0.0, 0, None, None
    while len(returns) < episodes:
        action, state = policy.predict(obs, state, reward=reward)
        obs, reward, term, trunc, _ = env.step(action)
        ret += reward
        steps += 1
        if term or trunc:
            returns.append(ret)
            lengths.append(steps)
            ret, steps, state, reward = 0.0, 0, None, None
            obs, _ = env.reset()
    return np.mean(returns), np.mean(lengths)


def test_same_returns_as_dpt_eval(dpt_bin, ppo_run):
    policy = dpt.load(ppo_run)
    for seed in (3, 4):
        ref = dpt_eval(dpt_bin, ppo_run, 5, seed)
        assert ref["checkpoint"] == policy.path
        mean_return, mean_length = python_eval(policy, 5, seed)
        assert mean_return == pytest.approx(ref["mean_return"], rel=1e-12)
        assert mean_length == pytest.approx(ref["mean_length"], rel=1e-12)


def test_several_policies(dpt_bin, appo_policies_run, ppo_run):
    """A checkpoint of two policies: the first trained one by default (the
    one dpt eval scores), another by name."""
    policy = dpt.load(appo_policies_run)
    tensors, meta = dpt.read_checkpoint(policy.path)
    assert meta["appo.policies"] == "a,b" and meta["appo.policies_to_train"] == "a"
    assert not any(k.startswith("params.") for k in tensors)
    for name, p in (("a", policy), ("b", dpt.load(appo_policies_run, policy="b"))):
        prefix = "policy.%s.params." % name
        assert sorted(p.weights) == sorted(k[len(prefix):] for k in tensors
                                           if k.startswith(prefix))
        assert np.array_equal(p.weights["actor.0.weight"], tensors[prefix + "actor.0.weight"])
    with pytest.raises(ValueError, match="has no policy 'c'"):
        dpt.load(appo_policies_run, policy="c")
    with pytest.raises(ValueError, match="holds one policy"):
        dpt.load(ppo_run, policy="a")
    ref = dpt_eval(dpt_bin, appo_policies_run, 3, 5)
    mean_return, _ = python_eval(policy, 3, 5)
    assert mean_return == pytest.approx(ref["mean_return"], rel=1e-12)


def test_recurrent_policy(dpt_bin, lstm_run):
    policy = dpt.load(lstm_run)
    assert policy.use_lstm and policy.lstm_cell_size == 32
    assert policy.prev_action and policy.prev_reward and policy.reward_scale == pytest.approx(0.1)
    assert policy.env == "RepeatPrevious-v0" and policy.env_config == {"k": "2", "num_tokens": "2"}
    assert policy.weights["lstm.weight_ih"].shape == (128, 2 + 2 + 1)
    # Episodes of 4 envs stepped together: dpt's C policy and predict from
    # the same observations, each carrying its own state.
    n, H = 4, 32
    c = CPolicy(policy, n)
    envs = dpt.gym.make_vec(policy.env, n, env_config=policy.env_config,
                            autoreset_mode=AutoresetMode.SAME_STEP)
    obs, _ = envs.reset(seed=9)
    h, cc = np.zeros((n, H), np.float32), np.zeros((n, H), np.float32)
    prev_a, prev_r = np.full(n, -1, np.int32), np.zeros(n, np.float32)
    state, reward, start, episodes = None, None, np.ones(n, bool), 0
    for _ in range(250):
        c_actions, c_values = c.act(obs, h, cc, prev_a, prev_r)
        values = policy.value(obs, state, episode_start=start, reward=reward)
        actions, state = policy.predict(obs, state, episode_start=start, reward=reward)
        assert np.array_equal(actions, c_actions)
        np.testing.assert_allclose(values, c_values, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(state.h, h, atol=1e-5)
        np.testing.assert_allclose(state.c, cc, atol=1e-5)
        obs, reward, term, trunc, _ = envs.step(actions)
        start = term | trunc
        # The C policy's caller keeps the previous action and reward, and
        # zeroes everything where an episode starts.
        prev_a[:] = np.where(start, -1, actions)
        prev_r[:] = np.where(start, 0.0, reward)
        h[start] = 0.0
        cc[start] = 0.0
        episodes += start.sum()
    assert episodes == 2 * n  # episodes of 100 steps
    # ... and the same returns as dpt eval (one env, the eval streams).
    ref = dpt_eval(dpt_bin, lstm_run, 6, 5)
    mean_return, mean_length = python_eval(policy, 6, 5)
    assert mean_return == pytest.approx(ref["mean_return"], rel=1e-12)
    assert mean_length == ref["mean_length"] == 100


def test_predict_arguments(lstm_run, ppo_run):
    policy = dpt.load(lstm_run)
    obs = np.eye(2, dtype=np.float32)
    a, s = policy.predict(obs)
    assert s.h.shape == s.c.shape == (2, 32) and np.array_equal(s.prev_action, a)
    with pytest.raises(ValueError, match="reads the previous reward"):
        policy.predict(obs, s)
    b, s2 = policy.predict(obs, s, reward=[1.0, -1.0])
    # Rows whose episode starts forget the state: as from None.
    c, s3 = policy.predict(obs, s2, episode_start=[True, True], reward=[0.0, 0.0])
    assert np.array_equal(c, a) and np.allclose(s3.h, s.h)
    with pytest.raises(ValueError, match="shape"):
        policy.predict(np.zeros((2, 3)))
    ff = dpt.load(ppo_run)
    rng = np.random.default_rng(0)
    sampled, _ = ff.predict(np.zeros((2000, 4)), deterministic=False, rng=rng)
    assert set(np.unique(sampled)) == {0, 1}
    env = ff.make_env()
    assert env.name == "CartPole-v1"


def test_policy_command(ppo_run):
    """python -m dpt.policy: one line per step (docs/CHECKPOINTS.md)."""
    policy = dpt.load(ppo_run)
    obs = np.random.default_rng(1).normal(0, 0.5, (5, 4)).astype(np.float32)
    lines = "\n".join(" ".join("%.9g" % v for v in o) for o in obs) + "\n"
    out = subprocess.run([sys.executable, "-m", "dpt.policy", policy.path],
                         input=lines, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    rows = [line.split() for line in out.stdout.splitlines()]
    actions, _ = policy.predict(obs)
    assert [int(r[0]) for r in rows] == list(actions)
    np.testing.assert_allclose([float(r[1]) for r in rows], policy.value(obs), rtol=1e-6)
