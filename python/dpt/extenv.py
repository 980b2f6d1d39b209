"""Gymnasium environments stepped in Python for a dpt trainer (dpt/extenv.h):
the caller's side of an external env. dpt.Trainer(config, env=...) uses it;
users do not need it directly.

What env= may be:
  - a gymnasium.Env: one env (num_envs_per_worker becomes 1);
  - a list of gymnasium.Env: that many envs;
  - a gymnasium.vector.VectorEnv: its envs (a SyncVectorEnv is stepped env
    by env; another vector env must autoreset in SAME_STEP mode);
  - a string: a dpt built-in name ("CartPole-v1") is dpt's own C env, as the
    config's env key; "gym:ID" (or an ID no built-in has) is Gymnasium's,
    made num_envs_per_worker times with gymnasium.make(ID).
Spaces: Box or Discrete actions, Box observations (any shape; 3-D is an
image [C, H, W] for a CNN policy). Others are refused, the space named.
"""
import ctypes

import numpy as np

from . import _lib
from ._lib import P, c_int, c_size_t, c_void_p

# dpt_ext_request_t
_RESET, _STEP, _DONE = 1, 2, 3
GYM_PREFIX = "gym:"

_PROTOTYPES = {
    "dpt_ext_create": (c_int, [P(c_void_p), P(_lib.EnvClass), c_size_t]),
    "dpt_ext_destroy": (None, [c_void_p]),
    "dpt_ext_iterate_begin": (c_int, [c_void_p, c_void_p, c_void_p]),
    "dpt_ext_poll": (c_int, [c_void_p, P(c_void_p)]),
    "dpt_ext_reset": (c_int, [c_void_p, c_void_p]),
    "dpt_ext_step": (c_int, [c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p]),
    "dpt_ext_iterate_end": (c_int, [c_void_p]),
    "dpt_ext_restart": (c_int, [c_void_p]),
    "dpt_ext_close": (None, [c_void_p]),
}


def _c():
    return _lib.declare(_PROTOTYPES)


def _refuse(what, space):
    raise _lib.DptValueError(_lib.EINVAL, "env: %s %s is not supported (dpt takes Box "
                             "observations and Discrete or Box actions)" % (what, space))


def _gym():
    try:
        import gymnasium
    except ImportError:
        raise ImportError("dpt.Trainer(env=...) with a Gymnasium env needs gymnasium "
                          "(pip install gymnasium)") from None
    return gymnasium


def resolve(env, num_envs):
    """(kind, value): ("builtin", name) for a dpt built-in name, or
    ("envs", (list of envs or a vector env, name, owned)) for Python envs."""
    if isinstance(env, str):
        if env.startswith(GYM_PREFIX):
            env_id = env[len(GYM_PREFIX):]
        else:
            names = {_lib.lib().dpt_env_get(i).contents.name.decode()
                     for i in range(_lib.lib().dpt_env_count())}
            if env in names:
                return "builtin", env
            env_id = env
        gym = _gym()
        try:
            envs = [gym.make(env_id) for _ in range(num_envs)]
        except gym.error.Error as e:
            raise _lib.DptValueError(_lib.EINVAL, "env %r: %s" % (env, e)) from None
        return "envs", (envs, env_id, True)
    gym = _gym()
    if isinstance(env, gym.vector.VectorEnv):
        spec = getattr(env, "spec", None)
        return "envs", (env, getattr(spec, "id", None) or type(env).__name__, False)
    if isinstance(env, gym.Env):
        env = [env]
    if isinstance(env, (list, tuple)) and env and all(isinstance(e, gym.Env) for e in env):
        spec = getattr(env[0], "spec", None)
        name = getattr(spec, "id", None) or type(env[0].unwrapped).__name__
        return "envs", (list(env), name, False)
    raise TypeError("env: a gymnasium.Env, a list of them, a gymnasium VectorEnv, or a name "
                    "(a dpt built-in, or gym:ID), not %s" % type(env).__name__)


def _name(name):
    """A name the C side takes: printable, no blanks, at most 50 bytes."""
    out = "".join(ch if (ch.isascii() and ch.isalnum()) or ch in "-_./" else "_"
                  for ch in name)[:50]
    return out or "env"


class Loop:
    """The caller's side: the envs, the external env of libdpt, and the loop
    that serves one iteration."""

    def __init__(self, envs, name, owned, seed):
        gym = _gym()
        self.owned = owned
        self.vector = None
        self.envs = None
        if isinstance(envs, gym.vector.VectorEnv):
            mode = envs.metadata.get("autoreset_mode")
            same = mode is not None and getattr(mode, "name", str(mode)).upper().endswith(
                "SAME_STEP")
            if same:
                self.vector = envs
            elif hasattr(envs, "envs"):
                self.envs = list(envs.envs)  # stepped one by one: our own autoreset
            else:
                raise _lib.DptValueError(
                    _lib.EINVAL, "env: a %s that autoresets in %s mode; dpt needs SAME_STEP "
                    "(gymnasium.vector.AutoresetMode.SAME_STEP) or a SyncVectorEnv" %
                    (type(envs).__name__, getattr(mode, "name", mode)))
            obs_space = envs.single_observation_space
            act_space = envs.single_action_space
            self.n = envs.num_envs
        else:
            self.envs = envs
            obs_space = envs[0].observation_space
            act_space = envs[0].action_space
            for e in envs[1:]:
                if e.observation_space != obs_space or e.action_space != act_space:
                    raise _lib.DptValueError(_lib.EINVAL, "env: the envs' spaces differ")
            self.n = len(envs)
        self.seed = seed
        self.name = _name(name)
        self._spaces(obs_space, act_space)
        n, od = self.n, self.od
        self.obs = np.zeros((n, od), np.float32)
        self.final = np.zeros((n, od), np.float32)
        self.rew = np.zeros(n, np.float32)
        self.term = np.zeros(n, np.uint8)
        self.trunc = np.zeros(n, np.uint8)
        self._ptrs = [a.ctypes.data for a in (self.obs, self.rew, self.term, self.trunc,
                                              self.final)]
        cls = _lib.EnvClass()
        self._cname = self.name.encode()
        cls.name = self._cname
        cls.obs_dim = od
        cls.obs_shape = self.shape
        cls.action_kind = _lib.ACTION_BOX if self.box else _lib.ACTION_DISCRETE
        if self.box:
            self._low = np.ascontiguousarray(self.low, np.float32)
            self._high = np.ascontiguousarray(self.high, np.float32)
            cls.action_dim = self.ad
            cls.action_low = self._low.ctypes.data_as(P(ctypes.c_float))
            cls.action_high = self._high.ctypes.data_as(P(ctypes.c_float))
        else:
            cls.num_actions = self.num_actions
        self.x = c_void_p()
        _lib.check(_c().dpt_ext_create(ctypes.byref(self.x), ctypes.byref(cls), n))
        self.started = False
        self.broken = False  # an iteration failed half-way: the trainer is unusable
        self.env_time = 0.0  # seconds spent in the envs' reset and step

    def _spaces(self, obs_space, act_space):
        gym = _gym()
        spaces = gym.spaces
        if not isinstance(obs_space, spaces.Box):
            _refuse("observation space", obs_space)
        shape = tuple(obs_space.shape)
        self.od = int(np.prod(shape)) if shape else 1
        self.obs_shape = shape
        if len(shape) == 3:
            self.shape = _lib.Shape(*shape)
        elif len(shape) == 2:
            self.shape = _lib.Shape(1, *shape)
        else:
            self.shape = _lib.Shape(0, 0, 0)
        if isinstance(act_space, spaces.Discrete):
            self.box = False
            self.num_actions = int(act_space.n)
            self.start = int(getattr(act_space, "start", 0))
            self.ad = 1
        elif isinstance(act_space, spaces.Box) and len(act_space.shape) == 1:
            self.box = True
            self.ad = int(act_space.shape[0])
            self.low, self.high = act_space.low, act_space.high
            if not (np.all(np.isfinite(self.low)) and np.all(np.isfinite(self.high))):
                raise _lib.DptValueError(_lib.EINVAL, "env: action space %s has infinite "
                                         "bounds (dpt clips actions into them)" % act_space)
            self.act_shape = act_space.shape
        else:
            _refuse("action space", act_space)

    # ---- stepping ----------------------------------------------------------------------

    def _reset(self):
        if self.vector is not None:
            o, _ = self.vector.reset(seed=None if self.started else self.seed)
            self.obs[:] = np.asarray(o, np.float32).reshape(self.n, self.od)
        else:
            for i, e in enumerate(self.envs):
                o, _ = e.reset(seed=None if self.started else self.seed + i)
                self.obs[i] = np.asarray(o, np.float32).reshape(-1)
        self.started = True

    def _actions(self, addr):
        if self.box:
            a = np.frombuffer((ctypes.c_float * (self.n * self.ad)).from_address(addr),
                              np.float32).reshape(self.n, self.ad).copy()
            return a
        a = np.frombuffer((ctypes.c_int32 * self.n).from_address(addr), np.int32)
        return (a + self.start) if self.start else a.copy()

    def _step(self, actions):
        obs, rew, term, trunc, final, od = (self.obs, self.rew, self.term, self.trunc,
                                            self.final, self.od)
        if self.vector is not None:
            o, r, te, tr, info = self.vector.step(actions)
            obs[:] = np.asarray(o, np.float32).reshape(self.n, od)
            rew[:] = r
            term[:] = te
            trunc[:] = tr
            done = np.logical_or(te, tr)
            if done.any():
                fo = info.get("final_obs")
                for i in np.flatnonzero(done):
                    final[i] = np.asarray(fo[i], np.float32).reshape(-1)
            return
        acts = actions.tolist() if not self.box else actions
        for i, e in enumerate(self.envs):
            o, r, te, tr, _ = e.step(acts[i])
            rew[i] = r
            term[i] = te
            trunc[i] = tr
            if te or tr:
                final[i] = np.asarray(o, np.float32).reshape(-1)
                o, _ = e.reset()
            obs[i] = np.asarray(o, np.float32).reshape(-1)

    def iterate(self, t, result):
        """Serves one iteration of trainer t (dpt_trainer_iterate's result into
        `result`, a ctypes structure)."""
        import time

        cdll = _c()
        x = self.x
        poll, step = cdll.dpt_ext_poll, cdll.dpt_ext_step
        p_obs, p_rew, p_term, p_trunc, p_final = self._ptrs
        addr = c_void_p()
        _lib.check(cdll.dpt_ext_iterate_begin(x, t, ctypes.byref(result)))
        now = time.perf_counter
        # From here an iteration is under way: if it cannot finish, the
        # trainer may be half-way through a rollout and is not used again.
        self.broken = True
        try:
            while True:
                what = poll(x, ctypes.byref(addr))
                if what == _STEP:
                    a = self._actions(addr.value)
                    t0 = now()
                    self._step(a)
                    self.env_time += now() - t0
                    rc = step(x, p_obs, p_rew, p_term, p_trunc, p_final)
                elif what == _RESET:
                    t0 = now()
                    self._reset()
                    self.env_time += now() - t0
                    rc = cdll.dpt_ext_reset(x, p_obs)
                else:
                    break
                if rc < 0:
                    _lib.check(rc)
        except BaseException:
            # The envs cannot serve this iteration any more (an interrupt,
            # an env that raised): end it, and the exchange with it.
            cdll.dpt_ext_close(x)
            cdll.dpt_ext_iterate_end(x)
            raise
        _lib.check(cdll.dpt_ext_iterate_end(x))
        self.broken = False

    def restart(self):
        _lib.check(_c().dpt_ext_restart(self.x))

    def close(self):
        if self.x:
            _c().dpt_ext_close(self.x)

    def destroy(self):
        """After the trainer that used it is destroyed."""
        if self.x:
            _c().dpt_ext_destroy(self.x)
            self.x = c_void_p()
        if self.owned:
            for e in self.envs or []:
                e.close()
            self.envs = None

    # ---- evaluation --------------------------------------------------------------------

    def evaluate(self, policy, episodes, seed, sampler_runs):
        """Episodes with `policy` (a dpt.Policy), greedy actions, on a new env
        made from the envs' spec; without a spec, on the first training env,
        whose episodes then start anew (not for an appo/impala sampler,
        `sampler_runs`, which keeps stepping its envs between iterations)."""
        first = self.envs[0] if self.envs is not None else self.vector
        spec = getattr(first, "spec", None)
        made = env = None
        if spec is not None:
            try:
                made = env = _gym().make(spec)
            except Exception:  # a wrapper that cannot be made again
                made = env = None
        if env is not None:
            pass
        elif self.envs is not None and not sampler_runs:
            env = self.envs[0]
        else:
            raise _lib.DptError(_lib.ENOTSUP, "evaluate: the env has no Gymnasium spec to make "
                                "another from%s; evaluate with dpt.load(checkpoint) and an env "
                                "of yours" % (" (the appo/impala sampler is using these)"
                                              if sampler_runs else ""))
        returns, lengths = [], []
        try:
            for k in range(episodes):
                o, _ = env.reset(seed=seed + k)
                state, total, n, done = None, 0.0, 0, False
                while not done:
                    a, state = policy.predict(np.asarray(o, np.float32).reshape(-1), state)
                    if self.box:
                        a = np.clip(a, self.low, self.high)
                    else:
                        a = int(a) + self.start
                    o, r, te, tr, _ = env.step(a)
                    total += float(r)
                    n += 1
                    done = te or tr
                returns.append(total)
                lengths.append(n)
        finally:
            if made is not None:
                made.close()
            if env is not None and made is None:
                self.restart()
        return {"count": episodes,
                "mean_return": float(np.mean(returns)) if returns else float("nan"),
                "mean_length": float(np.mean(lengths)) if lengths else float("nan"),
                "stochastic": False}
