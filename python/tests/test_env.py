"""dpt.gym.make: Gymnasium's env checker on every built-in env, the same
trajectories as Gymnasium's classic-control envs from the same states, env
parameters, plug-ins, seeds and errors."""
import re
import warnings

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import dpt

BUILTINS = ["CartPole-v1", "Acrobot-v1", "MountainCar-v0", "Pendulum-v1",
            "StatelessCartPole-v1", "RepeatPrevious-v0"] + [
                "MinAtar/%s-%s" % (g, v) for g in
                ("Asterix", "Breakout", "Freeway", "Seaquest", "SpaceInvaders")
                for v in ("v0", "v1")]
# MinAtar's channels and action counts (v0: all six actions).
MINATAR = {"Asterix": (4, 5), "Breakout": (4, 3), "Freeway": (7, 3), "Seaquest": (10, 6),
           "SpaceInvaders": (6, 4)}

# What check_env may say about a dpt env: its observations are unbounded
# (a C class states no bounds), Pendulum's torque is not in [-1, 1] (it is
# Gymnasium's), and no spec to remake it from.
ALLOWED_WARNINGS = re.compile(r"Box observation space (minimum|maximum) value is|"
                              r"symmetric and normalized space|"
                              r"alternative render modes")


def test_env_names():
    assert dpt.gym.env_names() == BUILTINS


def checked(env):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        check_env(env)
    unexpected = [str(w.message) for w in seen if not ALLOWED_WARNINGS.search(str(w.message))]
    assert not unexpected, unexpected


@pytest.mark.parametrize("name", BUILTINS)
def test_check_env(name):
    env = dpt.gym.make(name)
    assert isinstance(env, gymnasium.Env)
    assert env.observation_space.dtype == np.float32
    checked(env)


def rollout_pair(name, start, actions):
    """Steps Gymnasium's env and dpt's from the same state with the same
    actions until the episode ends; asserts identical observations, flags and
    rewards (dpt's rewards are float32: Pendulum's float64 cost rounds).
    Returns the number of steps and the last flags."""
    ref = gymnasium.make(name)
    ref.reset(seed=0)
    ref.unwrapped.state = np.array(start, dtype=np.float64)
    env = dpt.gym.make(name)
    env.reset(seed=0)
    env.set_state(np.array(start, dtype=np.float64))
    assert np.array_equal(env.get_state(np.float64), start)
    obs = np.asarray(start, np.float32)  # (CartPole's observation is its state)
    for t, a in enumerate(actions, 1):
        if callable(a):
            a = a(obs)
        obs, r, term, trunc, _ = env.step(a)
        robs, rr, rterm, rtrunc, _ = ref.step(a)
        assert obs.dtype == robs.dtype == np.float32
        assert np.array_equal(obs, robs), (name, t, obs, robs)
        assert r == np.float32(rr), (name, t, r, rr)
        # Gymnasium's TimeLimit may set both on a terminal last step; dpt's
        # runner reports terminated alone (dpt/env.h).
        assert (term, trunc) == (rterm, rtrunc and not rterm), (name, t)
        if term or trunc:
            return t, term, trunc
    return len(actions), False, False


@pytest.mark.parametrize("name,nact", [("CartPole-v1", 2), ("Acrobot-v1", 3),
                                       ("MountainCar-v0", 3), ("Pendulum-v1", None)])
def test_same_trajectories_as_gymnasium(name, nact):
    rng = np.random.default_rng(1)
    ref = gymnasium.make(name)
    ends = []
    for k in range(4):
        ref.reset(seed=k)  # Gymnasium's own start states, then some of their own
        start = np.array(ref.unwrapped.state, dtype=np.float64)
        if k == 3:
            start = start + rng.uniform(-0.05, 0.05, start.shape)
        if nact:
            actions = list(rng.integers(0, nact, 600))
        else:  # Pendulum: torques past the bounds are clipped on both sides
            actions = list(rng.uniform(-2.5, 2.5, (600, 1)).astype(np.float32))
        ends.append(rollout_pair(name, start, actions))
    steps = [e[0] for e in ends]
    assert min(steps) > 1
    if name == "CartPole-v1":
        assert all(term for _, term, _ in ends)  # random actions drop the pole


def test_cartpole_terminated_and_truncated_as_gymnasium():
    # A controller that balances the pole for the whole 500 steps: truncated.
    balance = [lambda o: int(o[2] + 0.5 * o[3] + 0.01 * o[0] + 0.1 * o[1] > 0)] * 600
    end = rollout_pair("CartPole-v1", [0.0, 0.0, 0.02, 0.0], balance)
    assert end == (500, False, True)
    # Always pushing right: terminated early.
    t, term, trunc = rollout_pair("CartPole-v1", [0.01, 0.02, -0.03, 0.04], [1] * 600)
    assert term and not trunc and t < 20


def test_seeds_and_autoreset():
    env = dpt.gym.make("CartPole-v1")
    with pytest.raises(gymnasium.error.ResetNeeded):
        env.step(0)
    a, _ = env.reset(seed=7)
    b, _ = env.reset()
    c, _ = env.reset(seed=7)
    d, _ = env.reset()
    assert np.array_equal(a, c) and np.array_equal(b, d) and not np.array_equal(a, b)
    assert not np.array_equal(a, env.reset(seed=8)[0])
    # The episodes of one env are those of a dpt runner of one env, which
    # resets an env as its episode ends (same-step autoreset of a vector env).
    vec = dpt.gym.make_vec("CartPole-v1", 1,
                           autoreset_mode=gymnasium.vector.AutoresetMode.SAME_STEP)
    obs, _ = env.reset(seed=11)
    vobs, _ = vec.reset(seed=11)
    assert np.array_equal(obs, vobs[0])
    episodes = 0
    while episodes < 3:
        obs, r, term, trunc, _ = env.step(1)
        vobs, vr, vterm, vtrunc, info = vec.step([1])
        assert (r, term, trunc) == (vr[0], vterm[0], vtrunc[0])
        if term or trunc:
            episodes += 1
            assert np.array_equal(obs, info["final_obs"][0])
            with pytest.raises(gymnasium.error.ResetNeeded, match="episode ended"):
                env.step(0)
            obs, _ = env.reset()
        assert np.array_equal(obs, vobs[0])


def test_env_config():
    env = dpt.gym.make("RepeatPrevious-v0", num_tokens=3, k=1)
    assert env.observation_space.shape == (3,) and env.action_space == gymnasium.spaces.Discrete(3)
    checked(env)
    same = dpt.gym.make("RepeatPrevious-v0", env_config={"num_tokens": 3, "k": 1})
    assert np.array_equal(env.reset(seed=2)[0], same.reset(seed=2)[0])
    with pytest.raises(ValueError, match=r"env_config.kk: env \"RepeatPrevious-v0\" has no such "
                       r"parameter \(its parameters: num_tokens, k\)"):
        dpt.gym.make("RepeatPrevious-v0", kk=3)
    with pytest.raises(ValueError, match=r"k = 100 is out of range \[0, 99\]"):
        dpt.gym.make("RepeatPrevious-v0", k=100)
    with pytest.raises(ValueError, match="expects an integer"):
        dpt.gym.make("RepeatPrevious-v0", k=1.5)
    with pytest.raises(ValueError, match="it takes no parameters"):
        dpt.gym.make("CartPole-v1", k=1)
    with pytest.raises(ValueError, match=r"unknown env \"Nope-v0\" \(built-in envs: CartPole-v1"):
        dpt.gym.make("Nope-v0")
    with pytest.raises(TypeError, match="given twice"):
        dpt.gym.make("RepeatPrevious-v0", env_config={"k": 1}, k=2)


@pytest.mark.parametrize("game", sorted(MINATAR))
def test_minatar_spaces(game):
    """MinAtar's images are (channels, 10, 10) of 0/1; v1 has the minimal
    action set, v0 all six."""
    channels, minimal = MINATAR[game]
    for version, n in (("v0", 6), ("v1", minimal)):
        env = dpt.gym.make("MinAtar/%s-%s" % (game, version))
        assert env.observation_space.shape == (channels, 10, 10)
        assert env.action_space == gymnasium.spaces.Discrete(n)
        assert env.max_episode_steps is None
        obs, _ = env.reset(seed=1)
        assert set(np.unique(obs)) <= {0.0, 1.0} and obs.any()
    env = dpt.gym.make("MinAtar/%s-v1" % game, max_episode_steps=7)
    env.reset(seed=2)
    ends = [env.step(0)[2:4] for _ in range(7)]
    assert env.max_episode_steps == 7 and ends[-1] in ((False, True), (True, False))


def test_plugin_paths(plugin_path, tmp_path, monkeypatch):
    """A built-in name comes first (MinAtar's have a slash); anything else
    with a slash or ".so" is a plug-in path, relative to the working
    directory or absolute."""
    import shutil
    sub = tmp_path / "plugins"
    sub.mkdir()
    shutil.copy(plugin_path, sub / "libcorridor.so")
    monkeypatch.chdir(tmp_path)
    for path in ("plugins/libcorridor.so", "./plugins/libcorridor.so",
                 str(sub / "libcorridor.so")):
        assert dpt.gym.make(path).name == "Corridor-v0"
    monkeypatch.chdir(sub)
    assert dpt.gym.make("libcorridor.so").name == "Corridor-v0"
    with pytest.raises(ValueError, match="env plug-in .*MinAtar/Pong-v1"):
        dpt.gym.make("MinAtar/Pong-v1")


def test_plugin(plugin_path):
    env = dpt.gym.make(plugin_path)
    assert env.name == "Corridor-v0" and env.observation_space.shape == (3,)
    checked(env)
    obs, _ = env.reset(seed=3)
    for _ in range(100):  # always right (it slips 1 time in 10): the end, terminated
        obs, r, term, trunc, _ = env.step(1)
        if term or trunc:
            break
    assert term and obs[0] == 1.0
    with pytest.raises(ValueError, match="env plug-in .*nothere.so"):
        dpt.gym.make(plugin_path + ".nothere.so")


def test_shaped_plugin(shaped_plugin_path):
    """An env class with an image observation (obs_shape {2, 3, 4}): a Box of
    shape (C, H, W), and observations in that shape, value (c, y, x) of
    Shaped-v0 being 100 c + 10 y + x + 1000 t."""
    env = dpt.gym.make(shaped_plugin_path)
    assert env.name == "Shaped-v0"
    assert env.observation_space == gymnasium.spaces.Box(-np.inf, np.inf, (2, 3, 4), np.float32)
    checked(env)
    obs, _ = env.reset(seed=1)
    c, y, x = np.meshgrid(np.arange(2), np.arange(3), np.arange(4), indexing="ij")
    grid = (100 * c + 10 * y + x).astype(np.float32)
    assert obs.shape == (2, 3, 4) and obs.dtype == np.float32
    assert np.array_equal(obs, grid) and obs[1, 2, 3] == 123
    for t in range(1, 6):
        obs, r, term, trunc, _ = env.step(0)
        assert obs.shape == (2, 3, 4) and np.array_equal(obs, grid + 1000 * t)
        assert r == 1.0 and not term and trunc == (t == 5)
    obs, _ = env.reset()
    assert np.array_equal(obs, grid)
    # env_config.channels reaches configure, which reshapes the image.
    env = dpt.gym.make(shaped_plugin_path, channels=3)
    assert env.observation_space.shape == (3, 3, 4)
    obs, _ = env.reset(seed=1)
    assert obs.shape == (3, 3, 4) and obs[2, 1, 0] == 210
    env = dpt.gym.make(shaped_plugin_path, channels=1)
    assert env.observation_space.shape == (1, 3, 4)


def test_actions_and_state_errors():
    env = dpt.gym.make("Pendulum-v1")
    env.reset(seed=1)
    with pytest.raises(ValueError, match="not finite"):
        env.step([np.nan])
    with pytest.raises(ValueError, match="shape"):
        env.step([0.0, 1.0])
    # Torques past the bounds are clipped (Gymnasium's ClipAction).
    s = env.get_state()
    a = env.step([5.0])
    env.set_state(s)
    b = env.step([2.0])
    assert np.array_equal(a[0], b[0]) and a[1] == b[1]
    with pytest.raises(ValueError, match="its state is 16 bytes, got 8"):
        env.set_state(np.zeros(1))
    cp = dpt.gym.make("CartPole-v1")
    with pytest.raises(gymnasium.error.ResetNeeded):
        cp.get_state()
    cp.reset(seed=1)
    with pytest.raises(ValueError, match=r"action 2 is out of range \[0, 2\)"):
        cp.step(2)
    with pytest.raises(ValueError, match="integer action"):
        cp.step(0.5)
