"""dpt's C environments as Gymnasium environments.

    env = dpt.gym.make("CartPole-v1")                    # a gymnasium.Env
    env = dpt.gym.make("RepeatPrevious-v0", k=3)         # env_config parameters
    env = dpt.gym.make("path/to/libmyenv.so")            # a plug-in (docs/ENVS.md)
    envs = dpt.gym.make_vec("CartPole-v1", num_envs=8)   # a gymnasium VectorEnv

An env is a runner of dpt (dpt_vecenv_t) of one env, a vector env one of
num_envs envs, stepped in one C call; observations, rewards and flags are
written by C straight into numpy arrays. Keyword arguments are the env's
parameters (`env_config.NAME = value` in a dpt config), checked and applied by
the library (dpt_config_make_env); `env_config={...}` passes them as a dict.

Seeds: env i of a runner draws from dpt's RNG stream (seed, rank, i), so
reset(seed=s) gives the same episodes as dpt's own runners with seed s and
rank `rank` (e.g. `dpt eval --seed s` evaluates on rank EVAL_RANK), not
those of Gymnasium's envs with the same seed. reset() without a seed goes on
with the current streams: after an episode ended it returns the first
observation of the next one (the runner resets an env as its episode ends).

Time limits are the runner's (max_episode_steps of the env class), like
Gymnasium's TimeLimit, except that a terminal state reached on the last
allowed step is terminated only (Gymnasium's wrapper sets both flags).

Observations are float32 arrays of shape (obs_dim,), or (C, H, W) for an env
class that declares an image (obs_shape in dpt/env.h with H*W > 1); a
vector env's are (num_envs, obs_dim) or (num_envs, C, H, W).
"""
import ctypes
import os
import re

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from . import _lib

__all__ = ["make", "make_vec", "env_names", "DptEnv", "DptVectorEnv", "EVAL_RANK"]

# The rank of the envs of dpt's evaluation (dpt_rl_evaluate, `dpt eval`).
EVAL_RANK = 0x45564131


def env_names():
    """The names of the built-in environments."""
    cdll = _lib.lib()
    return [cdll.dpt_env_get(i).contents.name.decode() for i in range(cdll.dpt_env_count())]


def _text(name, value):
    """A parameter value as dpt's config text."""
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_]{1,63}", name):
        raise ValueError("env_config: %r is not a parameter name (letters, digits, _)" % (name,))
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return repr(float(value))
    if isinstance(value, str):
        if any(ord(ch) < 32 for ch in value):
            raise ValueError("env_config.%s: a value may not contain control characters" % name)
        return value
    raise TypeError("env_config.%s: expected a bool, int, float or str, got %s" %
                    (name, type(value).__name__))


class _Class:
    """A configured env class (dpt_config_make_env): the built-in or plug-in
    `name` with its parameters set; owns the C class."""

    def __init__(self, name, env_config):
        if not isinstance(name, str) or not name:
            raise TypeError("dpt.gym: the env is a built-in name or a plug-in path (str)")
        # dpt's rule: a built-in name first (MinAtar's contain "/"), otherwise
        # a plug-in path when it has "/" or ".so", made absolute here, as no
        # config file gives relative paths a directory.
        if name not in env_names() and ("/" in name or ".so" in name):
            name = os.path.abspath(name)
        cdll = _lib.lib()
        self._ptr = None
        cfg = ctypes.c_void_p()
        _lib.check(cdll.dpt_config_create(ctypes.byref(cfg)))
        try:
            lines = ["job=ppo", "env=" + name]
            for key, value in sorted(env_config.items()):
                lines.append("env_config.%s=%s" % (key, _text(key, value)))
            ptr = ctypes.POINTER(_lib.EnvClass)()
            try:
                for line in lines:
                    _lib.check(cdll.dpt_config_set(cfg, line.encode()))
                _lib.check(cdll.dpt_config_finalize(cfg))
                _lib.check(cdll.dpt_config_make_env(cfg, ctypes.byref(ptr)))
            except ValueError as e:
                # The library names where a value came from ("--set KEY=VALUE: "),
                # which says nothing here.
                msg = str(e)
                for line in lines:
                    prefix = "--set %s: " % line
                    if msg.startswith(prefix):
                        msg = msg[len(prefix):]
                raise ValueError(msg) from None
            self._ptr = ptr
        finally:
            cdll.dpt_config_destroy(cfg)
        c = ptr.contents
        self.name = c.name.decode()
        self.obs_dim = c.obs_dim
        # An image (C, H, W) when the class declares one, else a flat vector.
        shape = cdll.dpt_env_obs_shape(ptr)
        self.obs_shape = ((shape.c, shape.h, shape.w) if shape.h * shape.w > 1 else
                          (self.obs_dim,))
        self.discrete = c.action_kind == _lib.ACTION_DISCRETE
        self.state_size = c.state_size
        self.max_episode_steps = c.max_episode_steps or None
        self.reward_threshold = c.reward_threshold or None
        self.observation_space = spaces.Box(-np.inf, np.inf, self.obs_shape, np.float32)
        if self.discrete:
            self.num_actions = c.num_actions
            self.action_space = spaces.Discrete(self.num_actions)
        else:
            ad = c.action_dim
            self.action_dim = ad
            low = np.ctypeslib.as_array(c.action_low, (ad,)).copy()
            high = np.ctypeslib.as_array(c.action_high, (ad,)).copy()
            self.action_space = spaces.Box(low, high, (ad,), np.float32)

    def __del__(self):
        if getattr(self, "_ptr", None) is not None and _lib._lib is not None:
            _lib._lib.dpt_env_class_destroy(self._ptr)
            self._ptr = None


def _seed64(seed):
    if seed is None:
        return int(np.random.SeedSequence().entropy) % (1 << 64)
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool) and 0 <= seed < 1 << 64:
        return int(seed)
    raise ValueError("seed must be None or an integer in [0, 2^64), got %r" % (seed,))


class _Runner:
    """A dpt runner of n envs of a class with its buffers (numpy arrays
    the C calls write into)."""

    def __init__(self, cls, n, seed, rank):
        self.cls = cls  # kept alive: the runner borrows the class
        self.n = n
        cdll = _lib.lib()
        v = ctypes.c_void_p()
        _lib.check(cdll.dpt_vecenv_create(ctypes.byref(v), cls._ptr, n, seed, rank))
        self._v = v
        # Each row is the class's obs_dim floats, viewed in its shape (C
        # contiguous: the same bytes as [n, obs_dim]).
        self.obs = np.zeros((n,) + cls.obs_shape, np.float32)
        self.final = np.zeros((n,) + cls.obs_shape, np.float32)
        self.rewards = np.zeros(n, np.float32)
        self.terminated = np.zeros(n, np.uint8)
        self.truncated = np.zeros(n, np.uint8)
        self.actions = (np.zeros(n, np.int32) if cls.discrete
                        else np.zeros((n, cls.action_dim), np.float32))
        self.active = np.ones(n, np.uint8)
        # Stepping is the hot path: the C functions and the buffers'
        # addresses are looked up once (the arrays are never reallocated).
        self._step = cdll.dpt_vecenv_step
        self._step_masked = cdll.dpt_vecenv_step_masked
        self._args = (self.actions.ctypes.data, self.obs.ctypes.data, self.rewards.ctypes.data,
                      self.terminated.ctypes.data, self.truncated.ctypes.data,
                      self.final.ctypes.data)
        self._active_ptr = self.active.ctypes.data

    def __del__(self):
        if getattr(self, "_v", None) and _lib._lib is not None:
            _lib._lib.dpt_vecenv_destroy(self._v)
            self._v = None

    def reset(self):
        _lib.lib().dpt_vecenv_reset(self._v, self.obs.ctypes.data)

    def step(self, active=None):
        """Steps the envs (those with active[i] set, when given) with
        self.actions."""
        if active is None:
            rc = self._step(self._v, *self._args)
        else:
            self.active[:] = active
            rc = self._step_masked(self._v, self._active_ptr, *self._args)
        if rc < 0:
            _lib.check(rc)

    def set_actions(self, actions):
        a = np.asarray(actions)
        if self.cls.discrete and a.dtype.kind in "iu" and a.shape == (self.n,):
            # The usual case, checked with two reductions; the C step checks
            # each action against the env's range.
            if a.min() >= -2**31 and a.max() < 2**31:
                self.actions[:] = a
                return
        if self.cls.discrete:
            if a.size != self.n or not (np.issubdtype(a.dtype, np.integer) or
                                        np.all(np.equal(np.mod(a, 1), 0))):
                raise ValueError("env \"%s\": expected %d integer action(s), got %r" %
                                 (self.cls.name, self.n, actions))
            a = a.reshape(self.n)
            wide = np.flatnonzero((a < -2**31) | (a >= 2**31))
            if wide.size:
                raise ValueError("env \"%s\" #%d: action %s is out of range [0, %d)" %
                                 (self.cls.name, wide[0], a[wide[0]], self.cls.num_actions))
            self.actions[:] = a
        else:
            if a.size != self.actions.size:
                raise ValueError("env \"%s\": expected actions of shape %s, got shape %s" %
                                 (self.cls.name, self.actions.shape, a.shape))
            self.actions[:] = a.reshape(self.actions.shape)

    def state_block(self, i):
        """Env i's state block as a writable uint8 array (no copy), valid while
        this runner lives."""
        ptr = _lib.lib().dpt_vecenv_env_state(self._v, i)
        size = self.cls.state_size
        if not ptr or size == 0:
            return np.zeros(0, np.uint8)
        return np.ctypeslib.as_array((ctypes.c_uint8 * size).from_address(ptr))


def _env_config(env_config, kwargs):
    merged = dict(env_config or {})
    for key in kwargs:
        if key in merged:
            raise TypeError("env_config.%s is given twice" % key)
    merged.update(kwargs)
    return merged


class DptEnv(gymnasium.Env):
    """One dpt env as a gymnasium.Env (dpt.gym.make)."""

    metadata = {"render_modes": []}

    def __init__(self, env, rank=0, env_config=None, **kwargs):
        self._class = _Class(env, _env_config(env_config, kwargs))
        self.rank = int(rank)
        self.observation_space = self._class.observation_space
        self.action_space = self._class.action_space
        self._runner = None
        self._pending = False  # the episode ended; the runner has reset the env

    @property
    def name(self):
        return self._class.name

    @property
    def max_episode_steps(self):
        return self._class.max_episode_steps

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None or self._runner is None:
            self._runner = _Runner(self._class, 1, _seed64(seed), self.rank)
            self._runner.reset()
        elif not self._pending:
            self._runner.reset()
        # else: the runner already started the next episode at the last step.
        self._pending = False
        return self._runner.obs[0].copy(), {}

    def step(self, action):
        r = self._runner
        if r is None or self._pending:
            raise gymnasium.error.ResetNeeded(
                "dpt env \"%s\": call reset() before step() (%s)" %
                (self.name, "the episode ended" if r is not None else "no episode yet"))
        r.set_actions(action)
        r.step()
        terminated, truncated = bool(r.terminated[0]), bool(r.truncated[0])
        if terminated or truncated:
            self._pending = True
            obs = r.final[0].copy()
        else:
            obs = r.obs[0].copy()
        return obs, float(r.rewards[0]), terminated, truncated, {}

    def get_state(self, dtype=np.uint8):
        """A copy of the env's C state (state_size bytes) as `dtype`; for the
        built-in classic-control envs, float64 gives Gymnasium's state (the
        layouts are listed in dpt/env.h at dpt_env_find)."""
        return self._state_block().view(dtype).copy()

    def set_state(self, state):
        """Sets the env's C state: the bytes of `state` (e.g. a float64 array
        for the classic-control envs), exactly state_size of them. The next
        step goes on from it (like setting Gymnasium's env.unwrapped.state);
        the episode's length and return are kept."""
        block = self._state_block()
        raw = np.ascontiguousarray(state).view(np.uint8).reshape(-1)
        if raw.size != block.size:
            raise ValueError("env \"%s\": its state is %d bytes, got %d" %
                             (self.name, block.size, raw.size))
        block[:] = raw

    def _state_block(self):
        if self._runner is None:
            raise gymnasium.error.ResetNeeded("dpt env \"%s\": call reset() first" % self.name)
        return self._runner.state_block(0)

    def close(self):
        self._runner = None
        super().close()


class DptVectorEnv(VectorEnv):
    """num_envs dpt envs as a gymnasium VectorEnv (dpt.gym.make_vec), stepped
    in one C call.

    autoreset_mode is Gymnasium's: NEXT_STEP (the default, as
    SyncVectorEnv's): the step that ends an episode returns its last
    observation, and the next step only resets that env (its action is
    ignored, reward 0, both flags false). SAME_STEP: the step that ends an
    episode returns the next episode's first observation, with the last one
    in infos["final_obs"] (and infos["final_info"]), as dpt's runner works.

    reset(seed=s) seeds env i with dpt's stream (s, rank, i); a list of seeds
    is refused, as the envs of one runner share a seed."""

    def __init__(self, env, num_envs, rank=0, autoreset_mode=AutoresetMode.NEXT_STEP,
                 env_config=None, **kwargs):
        if not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise ValueError("num_envs must be a positive integer, got %r" % (num_envs,))
        mode = AutoresetMode(autoreset_mode)
        if mode not in (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP):
            raise ValueError("dpt.gym.make_vec: autoreset_mode %s is not supported (dpt's runner "
                             "resets an env as its episode ends): use NEXT_STEP or SAME_STEP" %
                             mode)
        self._class = _Class(env, _env_config(env_config, kwargs))
        self.num_envs = int(num_envs)
        self.rank = int(rank)
        self.autoreset_mode = mode
        self.metadata = {"render_modes": [], "autoreset_mode": mode}
        self.single_observation_space = self._class.observation_space
        self.single_action_space = self._class.action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._runner = None
        self._autoreset = np.zeros(self.num_envs, bool)

    @property
    def name(self):
        return self._class.name

    def reset(self, *, seed=None, options=None):
        if options and "reset_mask" in options:
            raise ValueError("dpt.gym: reset_mask is not supported (every env resets; ended "
                             "episodes are reset by step)")
        if isinstance(seed, (list, tuple)):
            if any(s is not None for s in seed):
                raise ValueError("dpt.gym: reset(seed=) takes one seed for all envs (env i draws "
                                 "from the stream (seed, rank, i)), not a list")
            seed = None
        super().reset(seed=seed)
        if seed is not None or self._runner is None:
            self._runner = _Runner(self._class, self.num_envs, _seed64(seed), self.rank)
        self._runner.reset()
        self._autoreset[:] = False
        return self._runner.obs.copy(), {}

    def step(self, actions):
        r = self._runner
        if r is None:
            raise gymnasium.error.ResetNeeded("dpt vector env: call reset() before step()")
        r.set_actions(actions)
        infos = {}
        if self.autoreset_mode == AutoresetMode.NEXT_STEP:
            resetting = self._autoreset
            if resetting.any():
                # Those envs were reset by the runner when their episodes
                # ended: their rows of r.obs hold the next first observations,
                # which the masked step leaves as they are.
                r.rewards[resetting] = 0.0
                r.terminated[resetting] = 0
                r.truncated[resetting] = 0
                r.step(~resetting)
            else:
                r.step()
            ended = (r.terminated | r.truncated).astype(bool)
            obs = r.obs.copy()
            obs[ended] = r.final[ended]
            self._autoreset = ended
        else:
            r.step()
            ended = (r.terminated | r.truncated).astype(bool)
            obs = r.obs.copy()
            for i in np.flatnonzero(ended):
                infos = self._add_info(infos, {"final_obs": r.final[i].copy(), "final_info": {}},
                                       i)
        return (obs, r.rewards.astype(np.float64), r.terminated.astype(bool),
                r.truncated.astype(bool), infos)

    def get_state(self, i, dtype=np.uint8):
        """A copy of env i's C state (see DptEnv.get_state)."""
        return self._state_block(i).view(dtype).copy()

    def set_state(self, i, state):
        """Sets env i's C state (see DptEnv.set_state)."""
        block = self._state_block(i)
        raw = np.ascontiguousarray(state).view(np.uint8).reshape(-1)
        if raw.size != block.size:
            raise ValueError("env \"%s\": its state is %d bytes, got %d" %
                             (self.name, block.size, raw.size))
        block[:] = raw

    def _state_block(self, i):
        if self._runner is None:
            raise gymnasium.error.ResetNeeded("dpt vector env: call reset() first")
        if not 0 <= i < self.num_envs:
            raise IndexError("env index %d out of range [0, %d)" % (i, self.num_envs))
        return self._runner.state_block(i)

    def close_extras(self, **kwargs):
        self._runner = None


def make(env, rank=0, env_config=None, **kwargs):
    """A gymnasium.Env of the dpt env `env`: a built-in name (env_names())
    or the path of an env plug-in. Keyword arguments (and env_config, a dict)
    set the env's parameters; rank picks the RNG streams (see the module)."""
    return DptEnv(env, rank=rank, env_config=env_config, **kwargs)


def make_vec(env, num_envs=1, rank=0, autoreset_mode=AutoresetMode.NEXT_STEP, env_config=None,
             **kwargs):
    """A gymnasium VectorEnv of num_envs dpt envs `env` (see make and
    DptVectorEnv)."""
    return DptVectorEnv(env, num_envs, rank=rank, autoreset_mode=autoreset_mode,
                        env_config=env_config, **kwargs)
