"""dpt's MinAtar games against the minatar package (1.0.15): the package's
random generators are replaced by ones that answer each of its calls with
the draw the C env made for the same call (dpt's stream (seed, rank, 0, env),
read through libdpt's dpt_rng_* functions): the wrapper's rand() (the sticky
action's draw) is dpt_rng_u32 / 2^32; a game's rand() is
dpt_rng_uniform_double and its randint(lo, hi) lo + dpt_rng_below(hi - lo).
Played with the same actions, sticky actions and difficulty ramping on, both
must give identical observations, rewards and terminals at every step,
through many episodes. Skipped without the package.

MINATAR_STEPS (default 100000) sets the steps per game."""
import ctypes
import os
import warnings

import numpy as np
import pytest

import dpt
from dpt import _lib

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # (it warns when seaborn is missing: rendering only)
    minatar_gym = pytest.importorskip("minatar.gym")

GAMES = {"Asterix": "asterix", "Breakout": "breakout", "Freeway": "freeway",
         "Seaquest": "seaquest", "SpaceInvaders": "space_invaders"}
STEPS = int(os.environ.get("MINATAR_STEPS", "100000"))
RNG_ENV = 3  # DPT_RNG_ENV


class ReplayedRandom:
    """Stands for the game's numpy RandomState: each call draws from dpt's
    stream the way the C env does for that call."""

    def __init__(self, seed, rank=0, index=0):
        lib = _lib.lib()
        self._u = lib.dpt_rng_uniform_double
        self._u.restype, self._u.argtypes = ctypes.c_double, [ctypes.c_void_p]
        self._below = lib.dpt_rng_below
        self._below.restype, self._below.argtypes = ctypes.c_uint32, [ctypes.c_void_p,
                                                                       ctypes.c_uint32]
        self._u32 = lib.dpt_rng_u32
        self._u32.restype, self._u32.argtypes = ctypes.c_uint32, [ctypes.c_void_p]
        init = lib.dpt_rng_init
        init.restype = None
        init.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint32,
                         ctypes.c_uint32]
        self._state = ctypes.create_string_buffer(128)  # a dpt_rng_t (48 bytes)
        init(self._state, seed, rank, index, RNG_ENV)
        self.draws = 0

    def rand(self, *shape):
        n = int(np.prod(shape)) if shape else 1
        self.draws += n
        v = [self._u(self._state) for _ in range(n)]
        return np.array(v).reshape(shape) if shape else v[0]

    def sticky(self):
        """The wrapper's generator: its only call is rand(), the sticky draw,
        which the C env takes as one 32-bit word."""
        outer = self

        class Sticky:
            def rand(self):
                outer.draws += 1
                return outer._u32(outer._state) / 4294967296.0
        return Sticky()

    def randint(self, low, high=None, size=None):
        if high is None:
            low, high = 0, low
        n = 1 if size is None else int(size)
        self.draws += n
        v = [low + self._below(self._state, high - low) for _ in range(n)]
        return v[0] if size is None else np.array(v)


def package_env(game, version, seed):
    env = minatar_gym.BaseEnv(GAMES[game], use_minimal_action_set=version == "v1")
    replay = ReplayedRandom(seed)
    env.game.random, env.game.env.random = replay.sticky(), replay
    return env, replay


def thin(ours, ref, game, keep):
    """Leaves only the bricks (Breakout) or aliens (Space Invaders) in row 3,
    columns `keep`, in both envs, so an episode clears them and the rules for
    a cleared wall (a new one; Space Invaders' ramping) are played too. The
    C state's grid is found as the only 100 bytes equal to the package's."""
    grid = ref.game.env.brick_map if game == "Breakout" else ref.game.env.alien_map
    state = ours.get_state()
    raw = state.tobytes()
    pattern = grid.astype(np.uint8).tobytes()
    at = raw.find(pattern)
    assert at >= 0 and raw.find(pattern, at + 1) < 0
    row3 = grid[3].copy()
    grid[:] = 0
    grid[3, keep] = row3[keep]
    state[at:at + grid.size] = grid.astype(np.uint8).ravel()
    ours.set_state(state)


def play(game, version, seed, steps, policy, thin_every=0):
    """Plays `steps` steps in both; returns the episodes and the package env.
    With thin_every = k, every k-th episode starts with a thinned wall."""
    name = "MinAtar/%s-%s" % (game, version)
    ours = dpt.gym.make(name)
    ref, replay = package_env(game, version, seed)
    assert ours.action_space.n == ref.action_space.n
    obs, _ = ours.reset(seed=seed)
    ref_obs, _ = ref.reset()
    rng = np.random.default_rng(seed)
    episodes = ret = 0
    for t in range(steps):
        assert obs.shape == (ref_obs.shape[2],) + ref_obs.shape[:2]
        assert np.array_equal(obs, ref_obs.transpose(2, 0, 1).astype(np.float32)), \
            "%s: observations differ at step %d (episode %d)" % (name, t, episodes)
        a = policy(rng, ref)
        obs, r, term, trunc, _ = ours.step(a)
        ref_obs, ref_r, ref_term, _, _ = ref.step(a)
        assert (r, term, trunc) == (float(ref_r), bool(ref_term), False), \
            "%s step %d: reward/terminal (%r, %r) vs the package's (%r, %r)" % (
                name, t, r, term, ref_r, ref_term)
        ret += r
        if term:
            assert np.array_equal(obs, ref_obs.transpose(2, 0, 1).astype(np.float32)), \
                "%s: final observations differ at step %d" % (name, t)
            episodes += 1
            obs, _ = ours.reset()
            ref_obs, _ = ref.reset()
            if thin_every and episodes % thin_every == 0:
                thin(ours, ref, game, [4, 5, 6])
    return episodes, ref, replay


def random_policy(rng, ref):
    return int(rng.integers(ref.action_space.n))


# Policies that play well enough to reach the rarer rules (they read the
# package's state; any action sequence is a fair test). Action indices are
# v1's.

def breakout_policy(rng, ref):
    """Follows the ball."""
    g = ref.game.env
    if rng.random() < 0.05:
        return random_policy(rng, ref)
    return 1 if g.ball_x < g.pos else 2 if g.ball_x > g.pos else 0  # left, right, no-op


def space_invaders_policy(rng, ref):
    """Moves under the nearest column of aliens and fires; steps aside from
    a bullet about to land."""
    g = ref.game.env
    if rng.random() < 0.1:
        return random_policy(rng, ref)
    if g.e_bullet_map[8, g.pos] or g.e_bullet_map[7, g.pos]:
        return 1 if g.pos > 0 else 2
    cols = [x for x in range(10) if g.alien_map[:, x].any()]
    t = min(cols, key=lambda x: abs(x - g.pos)) if cols else g.pos
    return 3 if t == g.pos else 1 if t < g.pos else 2  # fire, left, right


def seaquest_policy(rng, ref):
    """Collects divers, surfaces when oxygen runs low or six are aboard, and
    fires otherwise: surfacing with six (the reward, the package's diver
    count of -1 after it) and the ramping are played."""
    g = ref.game.env
    if rng.random() < 0.15:
        return random_policy(rng, ref)
    if g.sub_y > 0 and (g.oxygen < 30 + 8 * g.sub_y or g.diver_count >= 6):
        return 2  # up
    if g.divers and g.diver_count < 6:
        d = min(g.divers, key=lambda d: abs(d[0] - g.sub_x) + abs(d[1] - g.sub_y))
        if d[1] != g.sub_y:
            return 2 if d[1] < g.sub_y else 4  # up, down
        if d[0] != g.sub_x:
            return 1 if d[0] < g.sub_x else 3  # left, right
    return 4 if g.sub_y == 0 else 5  # down, fire


POLICIES = {"Breakout": breakout_policy, "SpaceInvaders": space_invaders_policy,
            "Seaquest": seaquest_policy}


@pytest.mark.parametrize("game", sorted(GAMES))
def test_same_as_package(game):
    """Half the steps with random actions, half with the game's policy (when
    it has one), every third Breakout and Space Invaders episode thinned."""
    thin_every = 3 if game in ("Breakout", "SpaceInvaders") else 0
    episodes, ref, replay = play(game, "v1", 7, STEPS // 2, random_policy, thin_every)
    more, _, replay2 = play(game, "v1", 8, STEPS - STEPS // 2,
                            POLICIES.get(game, random_policy), thin_every)
    episodes += more
    replay.draws += replay2.draws
    assert replay.draws >= STEPS  # the sticky draw every step (and the game's own)
    # Each half ends mid-episode. Freeway's episodes last 2501 steps; the
    # others' far fewer than 1000.
    length = 2501 if game == "Freeway" else 1000
    assert episodes >= 2 * ((STEPS // 2) // length), episodes


@pytest.mark.parametrize("game", sorted(GAMES))
def test_full_action_set_and_settings(game):
    """v0 (six actions), and the settings: no sticky actions, no ramping."""
    play(game, "v0", 11, STEPS // 10, random_policy)
    name = "MinAtar/%s-v1" % game
    ours = dpt.gym.make(name, sticky_action_prob=0.0, difficulty_ramping=False)
    ref = minatar_gym.BaseEnv(GAMES[game], use_minimal_action_set=True,
                              sticky_action_prob=0.0, difficulty_ramping=False)
    replay = ReplayedRandom(5)
    ref.game.random, ref.game.env.random = replay.sticky(), replay
    obs, _ = ours.reset(seed=5)
    ref_obs, _ = ref.reset()
    rng = np.random.default_rng(5)
    for t in range(STEPS // 10):
        a = int(rng.integers(ref.action_space.n))
        obs, r, term, _, _ = ours.step(a)
        ref_obs, ref_r, ref_term, _, _ = ref.step(a)
        assert np.array_equal(obs, ref_obs.transpose(2, 0, 1)) and (r, term) == (ref_r, ref_term)
        if term:
            obs, _ = ours.reset()
            ref_obs, _ = ref.reset()
