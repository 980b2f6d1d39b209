"""dpt.gym.make_vec: a gymnasium VectorEnv stepped in one C call, whose
next-step autoreset behaves as Gymnasium's SyncVectorEnv's, and its
same-step mode."""
import gymnasium
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv

import dpt


def test_like_sync_vector_env():
    """dpt's CartPole-v1 x 5 beside SyncVectorEnv over Gymnasium's, the
    sub-envs' states set to dpt's at every (re)start, random actions:
    the same observations, rewards and flags at every step, the same
    autoreset steps (the step after an episode ends only resets that env:
    reward 0, flags false, the new episode's first observation)."""
    n, steps = 5, 400
    envs = dpt.gym.make_vec("CartPole-v1", n)
    ref = SyncVectorEnv([lambda: gymnasium.make("CartPole-v1") for _ in range(n)])
    assert isinstance(envs, VectorEnv)
    assert envs.metadata["autoreset_mode"] == ref.metadata["autoreset_mode"] == \
        AutoresetMode.NEXT_STEP
    assert envs.num_envs == n
    assert envs.single_action_space == ref.single_action_space
    assert envs.action_space == ref.action_space
    assert envs.observation_space.shape == ref.observation_space.shape == (n, 4)
    obs, info = envs.reset(seed=3)
    ref.reset(seed=3)
    assert info == {} and obs in envs.observation_space

    def sync(rows):  # Gymnasium's sub-envs start where dpt's did
        for i in rows:
            state = envs.get_state(i, np.float64)
            ref.envs[i].unwrapped.state = state.copy()
            assert np.array_equal(obs[i], state.astype(np.float32))

    sync(range(n))
    rng = np.random.default_rng(4)
    resets = ends = 0
    restarting = np.zeros(n, bool)
    for _ in range(steps):
        actions = rng.integers(0, 2, n)
        obs, rew, term, trunc, info = envs.step(actions)
        robs, rrew, rterm, rtrunc, rinfo = ref.step(actions)
        assert obs.dtype == np.float32 and obs in envs.observation_space
        assert rew.dtype == rrew.dtype and term.dtype == rterm.dtype == trunc.dtype == np.bool_
        assert np.array_equal(term, rterm) and np.array_equal(trunc, rtrunc)
        assert np.array_equal(rew, rrew)
        assert info == rinfo == {}
        # The resetting envs' observations come from each side's own RNG.
        assert np.array_equal(obs[~restarting], robs[~restarting])
        assert np.all(rew[restarting] == 0) and not np.any((term | trunc)[restarting])
        sync(np.flatnonzero(restarting))
        resets += restarting.sum()
        restarting = term | trunc
        ends += restarting.sum()
    assert resets >= 50 and ends >= resets


def test_same_step_mode():
    # One env: the next-step run's extra step after an episode only resets,
    # so both runs (the same streams) go through the same episodes.
    same = dpt.gym.make_vec("CartPole-v1", 1, autoreset_mode=AutoresetMode.SAME_STEP)
    nxt = dpt.gym.make_vec("CartPole-v1", 1)
    assert same.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    a, _ = same.reset(seed=5)
    b, _ = nxt.reset(seed=5)
    assert np.array_equal(a, b)
    rng = np.random.default_rng(6)
    ended = 0
    for _ in range(300):
        actions = rng.integers(0, 2, 1)
        a, r1, t1, tr1, info = same.step(actions)
        b, r2, t2, tr2, info2 = nxt.step(actions)
        assert np.array_equal(r1, r2) and np.array_equal(t1, t2) and np.array_equal(tr1, tr2)
        if t1[0] or tr1[0]:
            # SyncVectorEnv's layout: object arrays and masks.
            assert info["_final_obs"][0] and info["_final_info"][0]
            assert np.array_equal(info["final_obs"][0], b[0]) and info["final_info"] == {}
            b, r2, t2, tr2, _ = nxt.step(rng.integers(0, 2, 1))  # only resets
            assert r2[0] == 0 and not t2[0] and not tr2[0]
            ended += 1
        else:
            assert info == {}
        assert np.array_equal(a, b)
    assert ended >= 10
    # Several envs: the ended ones' rows are new episodes (CartPole starts
    # within 0.05 of 0), their last observations terminal.
    same = dpt.gym.make_vec("CartPole-v1", 4, autoreset_mode=AutoresetMode.SAME_STEP)
    same.reset(seed=7)
    for _ in range(100):
        a, r, t, tr, info = same.step(np.ones(4, np.int64))
        done = t | tr
        if done.any():
            assert np.array_equal(info["_final_obs"], done)
            assert np.all(np.abs(a[done]) < 0.05)
            for i in np.flatnonzero(done):
                x, theta = info["final_obs"][i][0], info["final_obs"][i][2]
                assert abs(x) > 2.4 or abs(theta) > 0.2094
            ended += 1


def test_shaped_observations(shaped_plugin_path):
    """A vector env of an image env (Shaped-v0, (2, 3, 4)): batches of shape
    (n, C, H, W) from reset and step, final observations of shape (C, H, W),
    in both autoreset modes."""
    n = 3
    c, y, x = np.meshgrid(np.arange(2), np.arange(3), np.arange(4), indexing="ij")
    grid = (100 * c + 10 * y + x).astype(np.float32)
    envs = dpt.gym.make_vec(shaped_plugin_path, n)
    assert envs.single_observation_space.shape == (2, 3, 4)
    assert envs.observation_space.shape == (n, 2, 3, 4)
    obs, _ = envs.reset(seed=2)
    assert obs.shape == (n, 2, 3, 4) and np.array_equal(obs, np.broadcast_to(grid, obs.shape))
    assert envs.observation_space.contains(obs)
    for t in range(1, 6):
        obs, r, term, trunc, _ = envs.step(np.zeros(n, np.int64))
        assert obs.shape == (n, 2, 3, 4) and np.all(obs == grid + 1000 * t)
    assert trunc.all()  # 5 steps; the last observations were returned
    obs, r, term, trunc, _ = envs.step(np.zeros(n, np.int64))  # only resets
    assert np.all(obs == grid) and not r.any()

    same = dpt.gym.make_vec(shaped_plugin_path, n, autoreset_mode=AutoresetMode.SAME_STEP,
                            channels=3)
    assert same.single_observation_space.shape == (3, 3, 4)
    same.reset(seed=2)
    for t in range(1, 6):
        obs, r, term, trunc, info = same.step(np.ones(n, np.int64))
        assert obs.shape == (n, 3, 3, 4)
    assert trunc.all() and np.all(obs[:, 2, 1, 0] == 210)  # the next episodes' first
    for i in range(n):
        final = info["final_obs"][i]
        assert final.shape == (3, 3, 4) and final[2, 1, 0] == 5210


def test_box_actions():
    envs = dpt.gym.make_vec("Pendulum-v1", 4)
    assert envs.single_action_space == gymnasium.spaces.Box(-2.0, 2.0, (1,), np.float32)
    assert envs.action_space.shape == (4, 1)
    envs.reset(seed=1)
    envs.action_space.seed(2)
    for t in range(1, 201):
        obs, rew, term, trunc, _ = envs.step(envs.action_space.sample())
        assert obs.shape == (4, 3) and np.all(rew <= 0) and not term.any()
    assert trunc.all() and t == 200  # Pendulum's time limit
    # The next step only resets (its actions are not used), then they step.
    envs.step(np.full((4, 1), np.inf, np.float32))
    with pytest.raises(ValueError, match="#0: action.0. is inf .not finite."):
        envs.step(np.full((4, 1), np.inf, np.float32))


def test_config_and_errors():
    envs = dpt.gym.make_vec("RepeatPrevious-v0", 2, num_tokens=4, k=3)
    assert envs.single_observation_space.shape == (4,)
    assert envs.single_action_space == gymnasium.spaces.Discrete(4)
    with pytest.raises(gymnasium.error.ResetNeeded):
        envs.step([0, 0])
    envs.reset(seed=[None, None])
    with pytest.raises(ValueError, match="one seed for all envs"):
        envs.reset(seed=[1, 2])
    with pytest.raises(ValueError, match="reset_mask"):
        envs.reset(options={"reset_mask": np.array([True, False])})
    with pytest.raises(ValueError, match=r"#1: action 4 is out of range \[0, 4\)"):
        envs.step([0, 4])
    with pytest.raises(ValueError, match="expected 2 integer action"):
        envs.step([0, 1, 2])
    with pytest.raises(ValueError, match="not supported"):
        dpt.gym.make_vec("CartPole-v1", 2, autoreset_mode=AutoresetMode.DISABLED)
    with pytest.raises(ValueError, match="num_envs"):
        dpt.gym.make_vec("CartPole-v1", 0)
    with pytest.raises(IndexError):
        envs.get_state(2)
    envs.close()
    assert envs.closed
