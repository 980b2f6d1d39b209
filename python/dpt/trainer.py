"""Training from Python: dpt.train (a whole run, as `dpt train` does it) and
dpt.Trainer (one trainer, driven an iteration at a time).

    for result in dpt.train("examples/cartpole_ppo.conf", total_timesteps=100000):
        print(result["training_iteration"], result["episode_reward_mean"])

    with dpt.Trainer({"job": "ppo", "env": "CartPole-v1"}) as t:
        for _ in range(10):
            result = t.train()
        t.save("cartpole.safetensors")
        print(t.evaluate(episodes=20))

A config is a dict of dpt's keys (docs/TRAINING.md, "Configuration"; `dpt
train --help` lists them), the path of a config file, or both: `config` a
path and the keywords its overrides. Values are
Python values (True, 0.5, [64, 64] for "64,64"); env_config is a dict of the
env's parameters. Errors are dpt.DptError with the library's message (a bad
key or value is also a ValueError, a missing file a FileNotFoundError).
"""
import ctypes
import os
import queue
import threading
import weakref

import numpy as np

from . import _lib
from ._lib import c_char_p, c_int, c_size_t, c_void_p, P

c_double = ctypes.c_double
c_uint64 = ctypes.c_uint64

__all__ = ["train", "Trainer", "config_text"]

MAX_METRICS = 128  # DPT_TRAIN_MAX_METRICS


class _Metric(ctypes.Structure):
    _fields_ = [("name", c_char_p), ("value", c_double)]


class _Result(ctypes.Structure):
    """dpt_train_result_t."""

    _fields_ = [
        ("iteration", c_uint64),
        ("timesteps_total", c_uint64),
        ("progress", c_double),
        ("finished", c_int),
        ("stop_requested", c_int),
        ("reward_mean", c_double),
        ("episodes_in_window", c_size_t),
        ("line", ctypes.c_char * 256),
        ("note", ctypes.c_char * 192),
        ("nmetrics", c_size_t),
        ("metrics", _Metric * MAX_METRICS),
    ]


class _Eval(ctypes.Structure):
    """dpt_eval_result_t."""

    _fields_ = [
        ("count", c_size_t),
        ("mean_return", c_double),
        ("mean_length", c_double),
        ("loss", c_double),
        ("accuracy", c_double),
        ("rmse", c_double),
        ("mae", c_double),
        ("r2", c_double),
        ("stochastic", c_int),
    ]


class _Event(ctypes.Structure):
    """dpt_run_event_t."""

    _fields_ = [
        ("kind", c_int),
        ("dir", c_char_p),
        ("text", c_char_p),
        ("result", P(_Result)),
        ("eval", P(_Eval)),
        ("elapsed_s", c_double),
        ("timesteps_this_run", c_uint64),
        ("resumed", c_int),
    ]


_EVENT_FN = ctypes.CFUNCTYPE(None, c_void_p, P(_Event))
_STALL_FN = ctypes.CFUNCTYPE(None, c_void_p, c_char_p)


class _RunOptions(ctypes.Structure):
    """dpt_run_options_t."""

    _fields_ = [
        ("resume_dir", c_char_p),
        ("on_event", _EVENT_FN),
        ("user", c_void_p),
        ("stop_flag", P(c_int)),
        ("on_stall", _STALL_FN),
        ("start_error", c_int),
        ("start_error_text", c_char_p),
    ]


class _Var(ctypes.Structure):
    """dpt_var_t (DPT_VAR_NAME_MAX 64, DPT_VAR_MAX_DIMS 4)."""

    _fields_ = [("name", ctypes.c_char * 64), ("ndim", c_int), ("shape", c_size_t * 4),
                ("offset", c_size_t), ("count", c_size_t)]


class _TrainerEnv(ctypes.Structure):
    """dpt_trainer_env_t."""

    _fields_ = [("use_mpi", c_int), ("stop_flag", P(c_int)), ("comm", c_void_p),
                ("straggler_worker", c_int), ("straggler_delay_s", c_double),
                ("ext", c_void_p)]


class _VarTable(ctypes.Structure):
    _fields_ = [("vars", P(_Var)), ("nvars", c_size_t), ("cap", c_size_t), ("total", c_size_t)]


# Run events (dpt_run_event_kind_t) and stop reasons (DPT_RUN_REASON_LIST).
_START, _RESULT, _NOTE, _END = range(4)
_REASONS = ["finished", "reached stop_iters", "reached stop_reward", "stopped by a signal",
            "already finished; nothing to do"]

_PROTOTYPES = {
    "dpt_config_load": (c_int, [c_void_p, c_char_p]),
    "dpt_config_clone": (c_int, [P(c_void_p), c_void_p]),
    "dpt_config_format": (c_size_t, [c_void_p, c_char_p, c_size_t]),
    "dpt_config_key_find": (c_int, [c_char_p]),
    "dpt_config_applies": (c_int, [c_void_p, c_int]),
    "dpt_config_str": (c_char_p, [c_void_p, c_int]),
    "dpt_trainer_create": (c_int, [P(c_void_p), c_void_p, c_void_p]),
    "dpt_trainer_destroy": (None, [c_void_p]),
    "dpt_trainer_iterate": (c_int, [c_void_p, P(_Result)]),
    "dpt_trainer_checkpoint": (c_int, [c_void_p, c_void_p]),
    "dpt_trainer_restore": (c_int, [c_void_p, c_void_p]),
    "dpt_trainer_vars": (P(_VarTable), [c_void_p]),
    "dpt_trainer_get_weights": (c_int, [c_void_p, c_void_p, c_size_t]),
    "dpt_trainer_set_weights": (c_int, [c_void_p, c_void_p, c_size_t]),
    "dpt_trainer_evaluate": (c_int, [c_void_p, c_size_t, c_uint64, P(_Eval)]),
    "dpt_trainer_config": (c_void_p, [c_void_p]),
    "dpt_safetensors_writer_create": (c_int, [P(c_void_p)]),
    "dpt_safetensors_writer_destroy": (None, [c_void_p]),
    "dpt_safetensors_save": (c_int, [c_void_p, c_char_p]),
    "dpt_safetensors_load": (c_int, [P(c_void_p), c_char_p]),
    "dpt_safetensors_destroy": (None, [c_void_p]),
    "dpt_train_run": (c_int, [c_void_p, P(_RunOptions), P(c_int)]),
}



def _c():
    """libdpt with this module's functions declared."""
    return _lib.declare(_PROTOTYPES)


def _value_text(key, value):
    """The config-file text of a Python value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(_value_text(key, v) for v in value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (int, str, os.PathLike)):
        return os.fspath(value) if isinstance(value, os.PathLike) else str(value)
    raise _lib.DptValueError(_lib.EINVAL, "config key %s: a %s value (%r) is not a config value"
                             % (key, type(value).__name__, value))


def _assignments(config, overrides):
    """(path or None, ["key=value", ...]) of a config and its overrides."""
    path, items = None, []
    if isinstance(config, (str, bytes, os.PathLike)):
        path = os.fsdecode(config)
    elif isinstance(config, dict):
        items = list(config.items())
    elif config is not None:
        raise TypeError("config: a dict or the path of a config file, not %s" %
                        type(config).__name__)
    items += list(overrides.items())
    sets = []
    for key, value in items:
        if key == "env_config":
            if not isinstance(value, dict):
                raise _lib.DptValueError(_lib.EINVAL, "config key env_config: a dict of the env's "
                                         "parameters, not %s" % type(value).__name__)
            for name, v in value.items():
                k = "env_config.%s" % name
                sets.append("%s=%s" % (k, _value_text(k, v)))
        else:
            sets.append("%s=%s" % (key, _value_text(key, value)))
    return path, sets


class _Config:
    """An owned dpt_config_t."""

    def __init__(self, config=None, overrides=None, finalize=True):
        cdll = _c()
        self.ptr = c_void_p()
        _lib.check(cdll.dpt_config_create(ctypes.byref(self.ptr)))
        try:
            path, sets = _assignments(config, overrides or {})
            if path is not None:
                _lib.check(cdll.dpt_config_load(self.ptr, path.encode()))
            for s in sets:
                try:
                    _lib.check(cdll.dpt_config_set(self.ptr, s.encode()))
                except _lib.DptError as e:
                    # The library's text is the command's ("--set k=v: ...").
                    msg = str(e)
                    if msg.startswith("--set "):
                        msg = "config " + msg[len("--set "):]
                    raise _lib.error(e.code, msg) from None
            if finalize:
                _lib.check(cdll.dpt_config_finalize(self.ptr))
        except BaseException:
            self.close()
            raise

    def validate(self):
        """Raises what finalizing a copy raises (the config is unchanged)."""
        cdll = _c()
        copy = c_void_p()
        _lib.check(cdll.dpt_config_clone(ctypes.byref(copy), self.ptr))
        try:
            _lib.check(cdll.dpt_config_finalize(copy))
        finally:
            cdll.dpt_config_destroy(copy)

    def close(self):
        if self.ptr:
            _c().dpt_config_destroy(self.ptr)
            self.ptr = c_void_p()


def _format(cfg_ptr):
    cdll = _c()
    n = cdll.dpt_config_format(cfg_ptr, None, 0)
    buf = ctypes.create_string_buffer(n + 1)
    cdll.dpt_config_format(cfg_ptr, buf, n + 1)
    return buf.value.decode()


def _key(cfg_ptr, name):
    """The text of key `name` of a config, or None where it does not apply."""
    cdll = _c()
    k = cdll.dpt_config_key_find(name.encode())
    if k < 0 or not cdll.dpt_config_applies(cfg_ptr, k):
        return None
    return cdll.dpt_config_str(cfg_ptr, k).decode()


def config_text(config=None, **overrides):
    """The finalized config as `key = value` text (what a run saves as
    config.conf): every key of the job with the value it takes."""
    c = _Config(config, overrides)
    try:
        return _format(c.ptr)
    finally:
        c.close()


def _set_nested(out, name, value):
    parts = name.split("/")
    for p in parts[:-1]:
        nxt = out.get(p)
        if not isinstance(nxt, dict):
            nxt = out[p] = {}
        out = nxt
    out[parts[-1]] = value


def _result_dict(r):
    """A dpt_train_result_t as the row result.jsonl holds ('/' nests), with
    the integer counters as ints, `done` and the progress line."""
    out = {}
    for i in range(min(r.nmetrics, MAX_METRICS)):
        m = r.metrics[i]
        _set_nested(out, m.name.decode(), m.value)
    out["training_iteration"] = int(r.iteration)
    out["timesteps_total"] = int(r.timesteps_total)
    out["done"] = bool(r.finished)
    out["progress"] = r.progress
    out["line"] = r.line.decode("utf-8", "replace")
    note = r.note.decode("utf-8", "replace")
    if note:
        out["note"] = note
    return out


def _eval_dict(e):
    out = {"count": int(e.count)}
    for k in ("mean_return", "mean_length", "loss", "accuracy", "rmse", "mae", "r2"):
        v = getattr(e, k)
        if v == v:  # not NaN: the figures this job measures
            out[k] = v
    if e.mean_return == e.mean_return:
        out["stochastic"] = bool(e.stochastic)
    return out


class Trainer:
    """One dpt trainer (dpt/train.h) in this process: the job, model, envs
    or data of a config, trained an iteration at a time. It writes nothing
    by itself (no run directory): save() writes a checkpoint, and dpt.train
    runs a whole job with its run directory.

    Trainer(config, env=None, **overrides): config as for dpt.train. Config
    errors raise before anything is built.

    env (RL jobs ppo, ddppo, appo, impala): environments stepped in Python,
    Gymnasium's or yours: a gymnasium.Env, a list of them, a VectorEnv, or a
    name ("gym:ID" for Gymnasium's, made num_envs_per_worker times; a dpt
    built-in name such as "CartPole-v1" is dpt's own C env). The trainer
    acts and learns; this object steps the envs in train(). See
    docs/PYTHON.md ("Environments in Python")."""

    def __init__(self, config=None, env=None, **overrides):
        self._lock = threading.RLock()
        self._t = c_void_p()
        self._loop = None
        self._result = _Result()
        if env is not None:
            from . import extenv

            cfg = _Config(config, overrides)  # errors first, before any env is made
            try:
                job = _key(cfg.ptr, "job")
                if job not in ("ppo", "ddppo", "appo", "impala"):
                    raise _lib.DptValueError(_lib.EINVAL, "env=: job %s has no env (ppo, ddppo, "
                                             "appo and impala train on one)" % job)
                n = int(_key(cfg.ptr, "num_envs_per_worker"))
                seed = int(_key(cfg.ptr, "seed"))
            finally:
                cfg.close()
            kind, value = extenv.resolve(env, n)
            if kind == "builtin":
                overrides = dict(overrides, env=value)
            else:
                envs, name, owned = value
                try:
                    self._loop = extenv.Loop(envs, name, owned, seed)
                except BaseException:
                    if owned:
                        for e in envs:
                            e.close()
                    raise
                overrides = dict(overrides, env="external:" + self._loop.name,
                                 num_envs_per_worker=self._loop.n)
        te = None
        if self._loop is not None:
            te = _TrainerEnv()
            te.ext = self._loop.x
        try:
            cfg = _Config(config, overrides)
            try:
                _lib.check(_c().dpt_trainer_create(ctypes.byref(self._t), cfg.ptr,
                                                   ctypes.byref(te) if te else None))
            finally:
                cfg.close()  # the trainer keeps its own copy
        except BaseException:
            if self._loop is not None:
                self._loop.destroy()
                self._loop = None
            raise

    def _ptr(self):
        if not self._t:
            raise _lib.DptError(_lib.ESTATE, "dpt.Trainer: closed")
        return self._t

    @property
    def config(self):
        """The finalized config as `key = value` text."""
        with self._lock:
            return _format(_c().dpt_trainer_config(self._ptr()))

    @property
    def job(self):
        with self._lock:
            return _key(_c().dpt_trainer_config(self._ptr()), "job")

    def train(self):
        """One iteration (the job's unit of work: an epoch, a rollout and its
        updates, ...) -> its result as a dict (dpt.train's rows)."""
        with self._lock:
            if self._loop is not None:
                if not self._loop.x:
                    raise _lib.DptError(_lib.ESTATE, "dpt.Trainer: an iteration was interrupted "
                                        "and ended the exchange with its envs; restore a saved "
                                        "state into a new Trainer")
                try:
                    self._loop.iterate(self._ptr(), self._result)
                except BaseException:
                    if self._loop.broken:
                        self._broken()
                    raise
            else:
                _lib.check(_c().dpt_trainer_iterate(self._ptr(), ctypes.byref(self._result)))
            out = _result_dict(self._result)
            if self._loop is not None:
                out["env_time_s"] = self._loop.env_time
            return out

    def _broken(self):
        """After an interrupted iteration with Python envs: the trainer may
        be in the middle of a rollout; nothing more can be asked of it."""
        _c().dpt_trainer_destroy(self._t)
        self._t = c_void_p()
        self._loop.destroy()

    def save(self, path):
        """Writes the whole trainer state to a safetensors checkpoint at
        `path` (atomically; what `dpt eval`, dpt.load and restore() read).
        Returns the path."""
        cdll = _c()
        path = os.fspath(path)
        with self._lock:
            w = c_void_p()
            _lib.check(cdll.dpt_safetensors_writer_create(ctypes.byref(w)))
            try:
                _lib.check(cdll.dpt_trainer_checkpoint(self._ptr(), w))
                _lib.check(cdll.dpt_safetensors_save(w, os.fsencode(path)))
            finally:
                cdll.dpt_safetensors_writer_destroy(w)
        return path

    def restore(self, path):
        """Restores a checkpoint of this job and model (saved by save() or a
        run's checkpoints/ file): the weights, optimizer state, counters and
        the job's own state. On error nothing changes."""
        cdll = _c()
        with self._lock:
            st = c_void_p()
            _lib.check(cdll.dpt_safetensors_load(ctypes.byref(st), os.fsencode(os.fspath(path))))
            try:
                _lib.check(cdll.dpt_trainer_restore(self._ptr(), st))
            finally:
                cdll.dpt_safetensors_destroy(st)

    def evaluate(self, episodes=None, seed=None):
        """Measures the current weights: RL jobs run `episodes` episodes
        (default the config's eval_episodes) on fresh envs seeded from `seed`
        (default the config's seed), greedy unless eval_stochastic; supervised
        jobs score the test set. -> {"count", "mean_return", "mean_length",
        "stochastic"} or {"count", "loss", "accuracy" (or "rmse", "mae",
        "r2")}."""
        with self._lock:
            cfg = _c().dpt_trainer_config(self._ptr())
            if self._loop is not None:
                return self._evaluate_python(cfg, episodes, seed)
            if episodes is None:
                episodes = int(_key(cfg, "eval_episodes") or 0)
            if seed is None:
                seed = int(_key(cfg, "seed") or 0)
            if episodes < 0 or not 0 <= seed < 2 ** 64:
                raise _lib.DptValueError(_lib.EINVAL, "evaluate: episodes must be >= 0 and seed "
                                         "in [0, 2^64) (got %r, %r)" % (episodes, seed))
            e = _Eval()
            _lib.check(_c().dpt_trainer_evaluate(self._ptr(), episodes, seed, ctypes.byref(e)))
            return _eval_dict(e)

    def _evaluate_python(self, cfg, episodes, seed):
        """evaluate() with envs stepped in Python: the greedy policy of the
        current weights (read back from a checkpoint, as dpt.load does)."""
        import tempfile

        from .policy import load

        if episodes is None:
            episodes = int(_key(cfg, "eval_episodes") or 0)
        if seed is None:
            seed = int(_key(cfg, "seed") or 0)
        with tempfile.TemporaryDirectory() as d:
            path = self.save(os.path.join(d, "eval.safetensors"))
            policy = load(path)
        return self._loop.evaluate(policy, episodes, seed,
                                   sampler_runs=self.job in ("appo", "impala"))

    def _vars(self):
        table = _c().dpt_trainer_vars(self._ptr()).contents
        out = []
        for i in range(table.nvars):
            v = table.vars[i]
            out.append((v.name.decode(), tuple(v.shape[:v.ndim]), v.offset, v.count))
        return out, table.total

    def _flat(self):
        _, total = self._vars()
        buf = np.empty(total, dtype=np.float32)
        _lib.check(_c().dpt_trainer_get_weights(self._ptr(), buf.ctypes.data, total))
        return buf

    def get_weights(self):
        """The model's parameters: {name: float32 array of its shape} (copies),
        named as in checkpoints' "params." tensors."""
        with self._lock:
            buf = self._flat()
            names, _ = self._vars()
            return {name: buf[off:off + n].reshape(shape).copy()
                    for name, shape, off, n in names}

    def set_weights(self, weights):
        """Replaces parameters by name (a dict as get_weights() returns; the
        names it leaves out keep their values). The optimizer's state and the
        counters are kept: the next train() continues from these weights.
        An unknown name, a shape that differs or a value that is not finite
        raises and changes nothing."""
        with self._lock:
            buf = self._flat()
            names, total = self._vars()
            by_name = {name: (shape, off, n) for name, shape, off, n in names}
            for name, value in weights.items():
                if name not in by_name:
                    raise _lib.DptValueError(
                        _lib.EINVAL, "set_weights: the model has no variable %r (it has: %s)" %
                        (name, ", ".join(by_name)))
                shape, off, n = by_name[name]
                a = np.asarray(value, dtype=np.float32)
                if a.shape != shape:
                    raise _lib.DptValueError(
                        _lib.EINVAL, "set_weights: %s has shape %s, the model's is %s" %
                        (name, a.shape, shape))
                buf[off:off + n] = a.reshape(-1)
            _lib.check(_c().dpt_trainer_set_weights(self._ptr(), buf.ctypes.data, total))

    def close(self):
        """Stops the trainer's threads and frees it (idempotent). Envs this
        trainer made (from a name) are closed; envs given are the caller's."""
        with self._lock:
            if self._t:
                _c().dpt_trainer_destroy(self._t)
                self._t = c_void_p()
            if self._loop is not None:
                self._loop.destroy()
                self._loop = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class _Run:
    """dpt_train_run on a thread of its own; its results handed over one at
    a time (the run waits while the caller works on a result)."""

    def __init__(self, cfg, resume):
        self.cfg = cfg
        self.q = queue.Queue()
        self.go = threading.Semaphore(0)
        self.stop = c_int(0)
        self.stopping = False
        self.dir = None
        self.cb = _EVENT_FN(self._on_event)
        self.opts = _RunOptions()
        self.opts.resume_dir = os.fsencode(os.fspath(resume)) if resume is not None else None
        self.opts.on_event = self.cb
        self.opts.stop_flag = ctypes.pointer(self.stop)
        self.thread = threading.Thread(target=self._main, name="dpt.train", daemon=True)

    def _on_event(self, user, evp):
        ev = evp.contents
        if ev.dir:
            self.dir = ev.dir.decode("utf-8", "surrogateescape")
        if ev.kind == _START:
            self.q.put(("start", (ev.text or b"").decode("utf-8", "replace")))
        elif ev.kind == _NOTE:
            self.q.put(("note", (ev.text or b"").decode("utf-8", "replace")))
        elif ev.kind == _RESULT:
            r = _result_dict(ev.result.contents)
            r["run_dir"] = self.dir
            self.q.put(("result", r))
            if not self.stopping:
                self.go.acquire()  # until the caller asks for the next
        elif ev.kind == _END:
            self.q.put(("end", {"reason": (ev.text or b"").decode(),
                                "evaluation": _eval_dict(ev.eval.contents) if ev.eval else None,
                                "elapsed_s": ev.elapsed_s}))

    def _main(self):
        cdll = _c()
        reason = c_int(0)
        try:
            rc = cdll.dpt_train_run(self.cfg.ptr, ctypes.byref(self.opts), ctypes.byref(reason))
            msg = (cdll.dpt_last_error() or b"").decode("utf-8", "replace") if rc < 0 else ""
            self.q.put(("done", (rc, msg, reason.value)))
        except BaseException as e:  # never lose the end of the run
            self.q.put(("done", (_lib.EINVAL, "dpt.train: %s" % e, 0)))

    def request_stop(self):
        self.stop.value = 1
        self.stopping = True
        self.go.release()

    def next_event(self):
        """The next (kind, data) of the run; ("done", (rc, message,
        reason)) once it has returned. Ctrl-C while waiting asks the run to
        stop after a checkpoint and is raised again once it has."""
        interrupted = None
        while True:
            try:
                kind, data = self.q.get(timeout=0.1)
            except queue.Empty:
                continue
            except KeyboardInterrupt as e:
                interrupted = e
                self.request_stop()
                continue
            if interrupted is None:
                return kind, data
            if kind == "done":
                self.thread.join()
                if data[0] < 0:
                    raise _lib.error(data[0], data[1]) from interrupted
                raise interrupted


def train(config=None, *, resume=None, **overrides):
    """Runs a whole job as `dpt train` does (dpt_train_run): validates the
    config, creates the run directory (output_dir, or runs/JOB-LABEL-TIME),
    writes config.conf, result.jsonl, progress.csv, TensorBoard events and
    checkpoints, resumes with resume=RUN_DIR, and evaluates at the end. It
    returns a generator of each iteration's result (a dict: result.jsonl's
    row, plus "done", "progress", "line" and "run_dir"); the run waits while
    the caller works on a result. The generator's return value (the
    StopIteration's) is {"run_dir", "reason", "evaluation", "elapsed_s"} and
    "notes" (what the run reported on the way, e.g. a skipped checkpoint).

    Config errors raise here, before anything runs. Ctrl-C while the run
    works stops it as the command does (after a checkpoint), then raises
    KeyboardInterrupt; leaving the loop early (break, or an exception in the
    caller's code) stops it the same way when the generator is closed.
    With resume, `config` and the keywords may only change resumable keys."""
    cfg = _Config(config, overrides, finalize=False)
    try:
        if resume is None:
            cfg.validate()
        elif not os.path.isdir(os.fspath(resume)):
            raise _lib.DptFileNotFoundError(
                _lib.ENOENT, "resume: %s is not a run directory" % os.fspath(resume))
    except BaseException:
        cfg.close()
        raise
    gen = _train_gen(cfg, resume)
    # A generator never started never runs its finally: the config is freed
    # with the generator.
    weakref.finalize(gen, cfg.close)
    return gen


def _train_gen(cfg, resume):
    run = _Run(cfg, resume)
    summary = {}
    try:
        run.thread.start()
        while True:
            kind, data = run.next_event()
            if kind == "done":
                rc, msg, reason = data
                run.thread.join()
                break
            if kind == "end":
                summary.update(data)
            elif kind == "note":
                summary.setdefault("notes", []).append(data)
            if kind != "result" or run.stopping:
                continue
            try:
                yield data
            except GeneratorExit:
                run.request_stop()
                raise
            run.go.release()
        if rc < 0:
            raise _lib.error(rc, msg)
        summary["run_dir"] = run.dir
        summary.setdefault("reason", _REASONS[reason] if 0 <= reason < len(_REASONS) else "")
        return summary
    finally:
        if run.thread.is_alive():
            # The consumer left (break, close, an exception in its code):
            # the run stops after a checkpoint; wait for it.
            run.request_stop()
            while run.thread.is_alive():
                try:
                    run.thread.join()
                except KeyboardInterrupt:
                    continue
        cfg.close()
