"""dpt's own C policy (dpt/rl.h) through ctypes, loaded from a checkpoint,
to compare dpt.load's predictions with: the reference, not part of the
package."""
import ctypes

import numpy as np

import dpt
from dpt import _lib
from dpt.gym import _Class

c_size_t, c_int, c_void_p, P = ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p, ctypes.POINTER


class LayerSpec(ctypes.Structure):  # dpt_layer_spec_t
    _fields_ = [("kind", c_int), ("out", c_size_t), ("init", c_int), ("gain", ctypes.c_float),
                ("kh", c_size_t), ("kw", c_size_t), ("stride_h", c_size_t), ("stride_w", c_size_t),
                ("pad_top", c_size_t), ("pad_bottom", c_size_t), ("pad_left", c_size_t),
                ("pad_right", c_size_t), ("pad_same", c_int), ("count_pad", c_int),
                ("rate", ctypes.c_float)]


MAX_LAYERS = 64  # DPT_NETWORK_MAX_LAYERS


class PolicySpec(ctypes.Structure):  # dpt_policy_spec_t
    _fields_ = [("hidden", c_size_t * 4), ("nhidden", c_int), ("use_lstm", c_int),
                ("lstm_cell_size", c_size_t), ("lstm_use_prev_action", c_int),
                ("lstm_use_prev_reward", c_int), ("prev_reward_scale", ctypes.c_float),
                ("max_seq_len", c_size_t), ("nencoder", c_size_t),
                ("encoder", LayerSpec * MAX_LAYERS), ("obs_shape", c_size_t * 3)]


assert ctypes.sizeof(LayerSpec) == 104 and ctypes.sizeof(PolicySpec) == 6760


class VarTable(ctypes.Structure):  # dpt_vartable_t
    _fields_ = [("vars", c_void_p), ("nvars", c_size_t), ("cap", c_size_t), ("total", c_size_t)]


class Arena(ctypes.Structure):  # dpt_arena_t
    _fields_ = [("data", P(ctypes.c_float)), ("count", c_size_t)]


class PolicyState(ctypes.Structure):  # dpt_policy_state_t
    _fields_ = [("h", c_void_p), ("c", c_void_p), ("prev_actions", c_void_p),
                ("prev_rewards", c_void_p)]


def _declare(cdll):
    for name, res, args in [
        ("dpt_policy_create_ex", c_int, [P(c_void_p), c_void_p, P(PolicySpec), c_size_t]),
        ("dpt_network_parse", c_int, [ctypes.c_char_p, P(LayerSpec), c_size_t, P(c_size_t)]),
        ("dpt_policy_destroy", None, [c_void_p]),
        ("dpt_policy_vars", P(VarTable), [c_void_p]),
        ("dpt_policy_act_state", c_int, [c_void_p, c_void_p, c_void_p, c_void_p, c_size_t,
                                         c_void_p, c_void_p, c_void_p, c_void_p]),
        ("dpt_arena_init", c_int, [P(Arena), c_size_t]),
        ("dpt_arena_deinit", None, [P(Arena)]),
        ("dpt_safetensors_load", c_int, [P(c_void_p), ctypes.c_char_p]),
        ("dpt_safetensors_load_arena", c_int, [c_void_p, ctypes.c_char_p, P(VarTable), c_void_p,
                                               c_size_t]),
        ("dpt_safetensors_destroy", None, [c_void_p]),
    ]:
        fn = getattr(cdll, name)
        fn.restype, fn.argtypes = res, args


class CPolicy:
    """The checkpoint of `policy` (a dpt.Policy) in dpt's C policy, for
    batches of up to max_batch observations; greedy actions."""

    def __init__(self, policy, max_batch):
        cdll = _lib.lib()
        _declare(cdll)
        self.cdll, self.policy = cdll, policy
        self.cls = _Class(policy.env, policy.env_config)
        m = policy.meta
        spec = PolicySpec()
        hidden = [int(h) for h in m["policy_hidden"].split(",")]
        spec.hidden[:len(hidden)] = hidden
        spec.nhidden = len(hidden)
        if policy.use_lstm:
            spec.use_lstm = 1
            spec.lstm_cell_size = policy.lstm_cell_size
            spec.lstm_use_prev_action = int(policy.prev_action)
            spec.lstm_use_prev_reward = int(policy.prev_reward)
            spec.prev_reward_scale = policy.reward_scale
            spec.max_seq_len = 1
        if m.get("network"):
            n = c_size_t()
            _lib.check(cdll.dpt_network_parse(m["network"].encode(), spec.encoder, MAX_LAYERS,
                                              ctypes.byref(n)))
            spec.nencoder = n.value
        p = c_void_p()
        _lib.check(cdll.dpt_policy_create_ex(ctypes.byref(p), ctypes.cast(self.cls._ptr, c_void_p),
                                             ctypes.byref(spec), max_batch))
        self.p = p
        self.arena = Arena()
        table = cdll.dpt_policy_vars(p)
        _lib.check(cdll.dpt_arena_init(ctypes.byref(self.arena), table.contents.total))
        st = c_void_p()
        _lib.check(cdll.dpt_safetensors_load(ctypes.byref(st), str(policy.path).encode()))
        try:
            _lib.check(cdll.dpt_safetensors_load_arena(st, b"params.", table,
                                                       ctypes.cast(self.arena.data, c_void_p),
                                                       self.arena.count))
        finally:
            cdll.dpt_safetensors_destroy(st)

    def __del__(self):
        self.cdll.dpt_arena_deinit(ctypes.byref(self.arena))
        self.cdll.dpt_policy_destroy(self.p)

    def act(self, obs, h=None, c=None, prev_actions=None, prev_rewards=None):
        """Greedy actions and values of obs [n, obs_dim]; a recurrent
        policy's h and c [n, H] (float32, updated in place), previous actions
        [n] int32 (-1: none) and rewards [n] float32."""
        obs = np.ascontiguousarray(obs, np.float32)
        n = len(obs)
        actions = np.zeros(n, np.int32)
        values = np.zeros(n, np.float32)
        state = None
        if h is not None:
            state = PolicyState(h.ctypes.data, c.ctypes.data, prev_actions.ctypes.data,
                                prev_rewards.ctypes.data)
        _lib.check(self.cdll.dpt_policy_act_state(
            self.p, ctypes.cast(self.arena.data, c_void_p), obs.ctypes.data,
            ctypes.byref(state) if state is not None else None, n, None, actions.ctypes.data,
            None, values.ctypes.data))
        return actions, values


__all__ = ["CPolicy", "dpt"]
