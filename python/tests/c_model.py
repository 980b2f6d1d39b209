"""dpt's own model language parser and sequential models (dpt/nn.h) through
ctypes, to compare dpt.network and dpt.Model with: the reference, not part
of the package."""
import ctypes

import numpy as np

from dpt import _lib

c_size_t, c_int, c_void_p, P = ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p, ctypes.POINTER

# dpt/nn.h: DPT_LAYER_LIST, DPT_INIT_LIST, DPT_LOSS_LIST (in order).
KINDS = ("dense", "relu", "tanh", "conv", "maxpool", "avgpool", "flatten", "dropout",
         "batchnorm")
INITS = ("default", "uniform", "normal", "orthogonal")
LOSSES = ("softmax_xent", "mse", "huber")
MAX_LAYERS = 64


class LayerSpec(ctypes.Structure):  # dpt_layer_spec_t
    _fields_ = [("kind", c_int), ("out", c_size_t), ("init", c_int), ("gain", ctypes.c_float),
                ("kh", c_size_t), ("kw", c_size_t), ("stride_h", c_size_t),
                ("stride_w", c_size_t), ("pad_top", c_size_t), ("pad_bottom", c_size_t),
                ("pad_left", c_size_t), ("pad_right", c_size_t), ("pad_same", c_int),
                ("count_pad", c_int), ("rate", ctypes.c_float)]


assert ctypes.sizeof(LayerSpec) == 104  # sizeof(dpt_layer_spec_t) on x86-64


class Shape(ctypes.Structure):  # dpt_shape_t
    _fields_ = [("c", c_size_t), ("h", c_size_t), ("w", c_size_t)]


class VarTable(ctypes.Structure):  # dpt_vartable_t
    _fields_ = [("vars", c_void_p), ("nvars", c_size_t), ("cap", c_size_t), ("total", c_size_t)]


class Arena(ctypes.Structure):  # dpt_arena_t
    _fields_ = [("data", P(ctypes.c_float)), ("count", c_size_t)]


def _cdll():
    cdll = _lib.lib()
    for name, res, args in [
        ("dpt_network_parse", c_int, [ctypes.c_char_p, P(LayerSpec), c_size_t, P(c_size_t)]),
        ("dpt_layer_describe", None, [P(LayerSpec), ctypes.c_char_p, c_size_t]),
        ("dpt_layers_shapes", c_int, [Shape, P(LayerSpec), c_size_t, P(Shape)]),
        ("dpt_mlp_create_shaped", c_int, [P(c_void_p), Shape, P(LayerSpec), c_size_t, c_int,
                                          c_size_t]),
        ("dpt_mlp_destroy", None, [c_void_p]),
        ("dpt_mlp_vars", P(VarTable), [c_void_p]),
        ("dpt_mlp_predict", c_int, [c_void_p, c_void_p, c_void_p, c_size_t,
                                    P(P(ctypes.c_float))]),
        ("dpt_arena_init", c_int, [P(Arena), c_size_t]),
        ("dpt_arena_deinit", None, [P(Arena)]),
        ("dpt_safetensors_load", c_int, [P(c_void_p), ctypes.c_char_p]),
        ("dpt_safetensors_load_arena", c_int, [c_void_p, ctypes.c_char_p, P(VarTable), c_void_p,
                                               c_size_t]),
        ("dpt_safetensors_destroy", None, [c_void_p]),
    ]:
        fn = getattr(cdll, name)
        fn.restype, fn.argtypes = res, args
    return cdll


def parse(text):
    """dpt_network_parse(text) as a list of (kind, describe text, init,
    gain, count_pad, rate); ValueError with the library's message."""
    cdll = _cdll()
    layers, n = (LayerSpec * MAX_LAYERS)(), c_size_t()
    _lib.check(cdll.dpt_network_parse(text.encode(), layers, MAX_LAYERS, ctypes.byref(n)))
    out = []
    buf = ctypes.create_string_buffer(256)
    for i in range(n.value):
        cdll.dpt_layer_describe(ctypes.byref(layers[i]), buf, len(buf))
        sp = layers[i]
        out.append((KINDS[sp.kind], buf.value.decode(), INITS[sp.init], sp.gain,
                    bool(sp.count_pad), sp.rate))
    return out


def _specs(text, outputs):
    cdll = _cdll()
    layers, n = (LayerSpec * MAX_LAYERS)(), c_size_t()
    _lib.check(cdll.dpt_network_parse(text.encode(), layers, MAX_LAYERS - 1, ctypes.byref(n)))
    k = n.value
    if outputs:
        layers[k] = LayerSpec(kind=KINDS.index("dense"), out=outputs)
        k += 1
    return layers, k


def shapes(in_shape, text):
    """dpt_layers_shapes of text's layers on in_shape: [(C, H, W), ...];
    ValueError with the library's message."""
    cdll = _cdll()
    layers, k = _specs(text, 0)
    out = (Shape * k)()
    _lib.check(cdll.dpt_layers_shapes(Shape(*in_shape), layers, k, out))
    return [(s.c, s.h, s.w) for s in out]


class CModel:
    """A dpt.Model's checkpoint in dpt's C sequential model
    (dpt_mlp_create_shaped of the network and the output layer)."""

    def __init__(self, model, max_batch=256):
        self.cdll = cdll = _cdll()
        self.max_batch, self.outputs = max_batch, model.outputs
        if model.network_text:
            text = model.network_text
        else:
            sizes = model.meta["layers"].split(",")[1:-1]
            text = " ".join("dense(%s) %s" % (h, model.meta["activation"]) for h in sizes)
        self.layers, k = _specs(text, model.outputs)
        self.mlp = c_void_p()
        _lib.check(cdll.dpt_mlp_create_shaped(ctypes.byref(self.mlp), Shape(*model.input_shape),
                                              self.layers, k, LOSSES.index(model.loss),
                                              max_batch))
        self.arena = Arena()
        table = cdll.dpt_mlp_vars(self.mlp)
        _lib.check(cdll.dpt_arena_init(ctypes.byref(self.arena), table.contents.total))
        st = c_void_p()
        _lib.check(cdll.dpt_safetensors_load(ctypes.byref(st), str(model.path).encode()))
        try:
            _lib.check(cdll.dpt_safetensors_load_arena(st, b"params.", table,
                                                       ctypes.cast(self.arena.data, c_void_p),
                                                       self.arena.count))
        finally:
            cdll.dpt_safetensors_destroy(st)

    def __del__(self):
        self.cdll.dpt_arena_deinit(ctypes.byref(self.arena))
        self.cdll.dpt_mlp_destroy(self.mlp)

    def predict(self, x):
        """The float32 outputs [N, outputs] of rows x [N, ...]."""
        x = np.ascontiguousarray(x, np.float32).reshape(len(x), -1)
        out = []
        for i in range(0, len(x), self.max_batch):
            rows = x[i:i + self.max_batch]
            y = P(ctypes.c_float)()
            _lib.check(self.cdll.dpt_mlp_predict(self.mlp, ctypes.cast(self.arena.data, c_void_p),
                                                 rows.ctypes.data, len(rows), ctypes.byref(y)))
            out.append(np.ctypeslib.as_array(y, (len(rows), self.outputs)).copy())
        return np.concatenate(out)


__all__ = ["CModel", "parse", "shapes"]
