"""dpt's model language (docs/MODELS.md) in Python: the parser of the key
`network` and the forward pass of its layers in numpy.

    layers = dpt.network.parse("conv(32,k=3,pad=1) relu maxpool(2) flatten dense(10)")
    net = dpt.network.Network(layers, (1, 28, 28), weights)  # weights {"0.weight": ...}
    y = net.forward(x)                                       # x [N, 1, 28, 28] -> [N, 10]

parse() mirrors dpt_network_parse() (src/nn/network.c): the same layer names
and aliases, positional and named arguments, defaults and error messages
(ValueError, naming the layer by position and text). layer_shapes() mirrors
dpt_layers_shapes(): the output shape of each layer, or a ValueError naming
the layer and its input shape. Images are NCHW; variables are named by the
layer's position from 0 ("<i>.weight", "<i>.bias"), as nn.Sequential names
them; a batchnorm layer's are "<i>.weight" (gamma), "<i>.bias" (beta),
"<i>.running_mean" and "<i>.running_var". Convolutions are products on
unrolled windows (im2col); pooling pads with -inf (max) or zeros (average;
count_pad=0 divides by the elements inside the image), docs/CONV.md.

Network runs the layers as dpt evaluates a model (dpt eval, dpt_mlp_predict):
dropout is the identity and batch normalization uses the running statistics.
There is no training mode here (no batch statistics, no dropout masks).
"""
import re
import sys
from dataclasses import dataclass

import numpy as np

__all__ = ["LayerSpec", "Network", "parse", "layer_shapes", "shape_of", "MAX_LAYERS"]

MAX_LAYERS = 64  # DPT_NETWORK_MAX_LAYERS
_QUOTE = 120  # longest layer text quoted in a message
_MAX_SIZE = 1 << 24
_SPACE = " \t\n\v\f\r"  # C's isspace
_WORD = re.compile(r"[A-Za-z0-9_]*")

# name, alias, positional arguments, named arguments (dpt__net_kinds)
_KINDS = {
    "conv": ("conv2d", ("out", "k"), "out k stride pad init gain"),
    "maxpool": ("maxpool2d", ("k",), "k stride pad"),
    "avgpool": ("avgpool2d", ("k",), "k stride pad count_pad"),
    "dense": ("linear", ("out",), "out init gain"),
    "dropout": (None, ("p",), "p"),
    "batchnorm": ("bn", (), "momentum eps"),
    "flatten": (None, (), ""),
    "relu": (None, (), ""),
    "tanh": (None, (), ""),
}
_BY_NAME = {n: n for n in _KINDS}
_BY_NAME.update({v[0]: n for n, v in _KINDS.items() if v[0]})
_INITS = ("default", "uniform", "normal", "orthogonal")
_EXAMPLES = {"conv": "conv(32,k=3)", "dense": "dense(128)", "dropout": "dropout(0.5)"}
# A batchnorm layer's momentum and eps when its spec holds 0 (PyTorch's).
BN_MOMENTUM, BN_EPS = 0.1, 1e-5
# C's strtod: decimal or hexadecimal floats (inf and nan fail the range check anyway).
_DEC = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_HEX = re.compile(r"[+-]?0[xX]([0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)([pP][+-]?\d+)?")


@dataclass
class LayerSpec:
    """One layer of a description, as dpt_layer_spec_t holds it. kind is
    the canonical name (conv, maxpool, avgpool, dense, dropout, batchnorm,
    flatten, relu, tanh); stride 0 means the default (1 for conv, the window
    for pooling); pad is (top, bottom, left, right), ignored when pad_same.
    rate is dropout's probability or batchnorm's momentum, gain the init's
    gain or batchnorm's eps (0: the defaults, BN_MOMENTUM and BN_EPS)."""

    kind: str
    out: int = 0
    kh: int = 0
    kw: int = 0
    stride_h: int = 0
    stride_w: int = 0
    pad: tuple = (0, 0, 0, 0)
    pad_same: bool = False
    count_pad: bool = True
    init: str = "default"
    gain: float = 0.0
    rate: float = 0.0

    @property
    def has_params(self):
        """A conv or dense layer, with a weight and a bias (a batchnorm
        layer's four variables are read apart)."""
        return self.kind in ("conv", "dense")

    def bn_params(self):
        """A batchnorm layer's (momentum, eps): the float32 values the library
        keeps, 0 replaced by the defaults."""
        m, e = float(np.float32(self.rate)), float(np.float32(self.gain))
        return (m if m > 0.0 else float(np.float32(BN_MOMENTUM)),
                e if e > 0.0 else float(np.float32(BN_EPS)))

    def strides(self):
        """The strides with their defaults applied."""
        d = (1, 1) if self.kind == "conv" else (self.kh, self.kw)
        return (self.stride_h or d[0], self.stride_w or d[1])

    def describe(self):
        """The layer as text with every setting (dpt_layer_describe)."""
        t, b, l, r = self.pad
        if self.pad_same:
            pad = "same"
        elif t == b and l == r:
            pad = "%dx%d" % (t, l)
        else:
            pad = "%d/%d/%d/%d (top/bottom/left/right)" % (t, b, l, r)
        # %.9g of the float32 the library keeps: the same text as its.
        gain = float(np.float32(self.gain))
        if self.init != "default":
            init = ",init=%s,gain=%.9g" % (self.init, gain)
        else:
            init = ",gain=%.9g" % gain if gain else ""
        sh, sw = self.strides()
        if self.kind == "dense":
            return "dense(%d%s)" % (self.out, init)
        if self.kind == "dropout":
            return "dropout(%.9g)" % float(np.float32(self.rate))
        if self.kind == "batchnorm":  # only what differs from the defaults (0)
            m, e = float(np.float32(self.rate)), float(np.float32(self.gain))
            args = (["momentum=%.9g" % m] if m else []) + (["eps=%.9g" % e] if e else [])
            return "batchnorm(%s)" % ",".join(args) if args else "batchnorm"
        if self.kind == "conv":
            return "conv(%d,k=%dx%d,stride=%dx%d,pad=%s%s)" % (self.out, self.kh, self.kw, sh, sw,
                                                              pad, init)
        if self.kind in ("maxpool", "avgpool"):
            tail = ",count_pad=%d" % self.count_pad if self.kind == "avgpool" else ""
            return "%s(%dx%d,stride=%dx%d,pad=%s%s)" % (self.kind, self.kh, self.kw, sh, sw, pad,
                                                       tail)
        return self.kind


# ---- parser -------------------------------------------------------------------


class _At:
    """The layer being parsed, for messages."""

    def __init__(self, pos, text):
        self.pos, self.text = pos, text

    def fail(self, what):
        return ValueError('network layer %d "%s": %s' % (self.pos, self.text, what))


def _size(at, name, v, lo):
    ok = 0 < len(v) < 32 and all(c in "0123456789" for c in v)
    if ok and lo <= int(v) <= _MAX_SIZE:
        return int(v)
    raise at.fail('%s = "%s" is not an integer in %d..%d' % (name, v[:40], lo, _MAX_SIZE))


def _pair(at, name, v, lo):
    """N or HxW."""
    if "x" not in v:
        n = _size(at, name, v, lo)
        return n, n
    a, b = v.split("x", 1)
    return _size(at, name, a, lo), _size(at, name, b, lo)


def _gain(at, v):
    buf = v[:60]
    g = None
    if 0 < len(v) < 60:
        if _DEC.fullmatch(buf):
            g = float(buf)
        elif _HEX.fullmatch(buf):
            sign = -1.0 if buf[0] == "-" else 1.0
            try:
                g = sign * float.fromhex(buf.lstrip("+-"))
            except (OverflowError, ValueError):
                g = None
    # strtod reports overflow and underflow (a subnormal result) as errors.
    if g is None or not np.isfinite(g) or g < sys.float_info.min or g > 1e6:
        raise at.fail('gain = "%s" is not a number in (0, 1e6]' % buf)
    return g


def _float(v):
    """C's strtod of v (at most 59 characters), or None when it fails."""
    buf = v[:60]
    if not 0 < len(v) < 60:
        return None
    if _DEC.fullmatch(buf):
        return float(buf)
    if _HEX.fullmatch(buf):
        sign = -1.0 if buf[0] == "-" else 1.0
        try:
            return sign * float.fromhex(buf.lstrip("+-"))
        except (OverflowError, ValueError):
            return None
    return None


def _rate(at, v):
    r = _float(v)
    # strtod reports underflow (a subnormal result) as an error.
    if r is None or (r != 0.0 and abs(r) < sys.float_info.min) or not 0.0 <= r < 1.0:
        raise at.fail('p = "%s" is not a probability in [0, 1)' % v[:60])
    return r


def _unit(at, name, v):
    """A number in (0, 1]: batchnorm's momentum and eps."""
    r = _float(v)
    # strtod reports underflow (a subnormal result) as an error.
    if r is None or not sys.float_info.min <= r <= 1.0:
        raise at.fail('%s = "%s" is not a number in (0, 1]' % (name, v[:60]))
    return r


def _arg(at, spec, name, v):
    """Sets argument `name` = v of spec."""
    if name == "out":
        spec.out = _size(at, name, v, 1)
    elif name == "k":
        spec.kh, spec.kw = _pair(at, name, v, 1)
    elif name == "stride":
        spec.stride_h, spec.stride_w = _pair(at, name, v, 1)
    elif name == "pad":
        if v == "same":
            spec.pad_same = True
        else:
            h, w = _pair(at, name, v, 0)
            spec.pad = (h, h, w, w)
    elif name == "count_pad":
        if v not in ("0", "1"):
            raise at.fail("count_pad must be 0 or 1")
        spec.count_pad = v == "1"
    elif name == "p":
        spec.rate = _rate(at, v)
    elif name == "momentum":
        spec.rate = _unit(at, name, v)
    elif name == "eps":
        spec.gain = _unit(at, name, v)
    elif name == "init":
        if v[:60] not in _INITS:
            raise at.fail('init = "%s" is not one of default, uniform, normal, orthogonal' %
                          v[:60])
        spec.init = v
    else:
        spec.gain = _gain(at, v)


def _args(at, kind, spec, text):
    """The arguments `text` (between the parentheses) of a layer of `kind`."""
    _, positional, named = _KINDS[kind]
    named = named.split()
    seen, npos, after_named = [], 0, False
    if text.strip(_SPACE) == "":
        text = None  # "relu ( )": no arguments
    parts = [] if text is None else text.split(",")
    for i, part in enumerate(parts):
        a = part.strip(_SPACE)
        if not a:
            raise at.fail("an empty argument")
        if "=" in a:
            key, v = a.split("=", 1)
            key = key.rstrip(_SPACE)
            if key not in named:
                raise at.fail('unknown argument "%s" (%s takes: %s)' %
                              (key[:40], kind, " ".join(named) or "none"))
            name, v = key, v.lstrip(_SPACE)
            after_named = True
        else:
            if after_named:
                raise at.fail("a positional argument after a named one")
            if npos >= len(positional):
                raise at.fail("too many positional arguments (%s takes %d)" %
                              (kind, len(positional)))
            name, v = positional[npos], a
            npos += 1
        if name in seen:
            raise at.fail("argument %s given twice" % name)
        seen.append(name)
        _arg(at, spec, name, v)
    if kind == "dropout" and "p" not in seen:
        raise at.fail("the rate is missing (the first argument, e.g. dropout(0.5))")
    if kind in ("conv", "dense") and "out" not in seen:
        raise at.fail("the output size is missing (the first argument)")
    if kind in ("conv", "maxpool", "avgpool") and "k" not in seen:
        raise at.fail("the kernel size is missing (k=3, or the second argument)" if kind == "conv"
                      else "the window size is missing (the first argument)")


def parse(text, max_layers=MAX_LAYERS):
    """The layers of a description in the model language, as LayerSpecs.
    ValueError (dpt_network_parse's message) for a bad one."""
    layers, p, n = [], 0, len(text)
    while True:
        while p < n and text[p] in _SPACE:
            p += 1
        if p == n:
            break
        w = p
        p = _WORD.match(text, p).end()
        wn = p - w
        q = p
        while q < n and text[q] in _SPACE:
            q += 1
        opened = q < n and text[q] == "("
        close = -1
        if opened:
            close = text.find(")", q)
            p = close + 1 if close >= 0 else n
        elif wn == 0:
            p = w + 1  # one stray character
        quoted = text[w:p]
        at = _At(len(layers) + 1, quoted[:_QUOTE] + ("..." if len(quoted) > _QUOTE else ""))
        if wn == 0:
            raise at.fail("expected a layer name")
        if opened and close < 0:
            raise at.fail("no closing parenthesis")
        if opened and "(" in text[q + 1:close]:
            raise at.fail("a parenthesis inside the arguments")
        if p < n and text[p] not in _SPACE:
            raise at.fail('unexpected "%s" after it (layers are separated by spaces)' % text[p])
        kind = _BY_NAME.get(text[w:w + wn])
        if kind is None:
            raise at.fail("unknown layer (known: conv, maxpool, avgpool, dense, dropout, "
                          "batchnorm, flatten, relu, tanh; conv2d, maxpool2d, avgpool2d, linear "
                          "and bn are the same)")
        if len(layers) == max_layers:
            raise at.fail("more than %d layers" % max_layers)
        spec = LayerSpec(kind)
        if opened:
            _args(at, kind, spec, text[q + 1:close])
        elif _KINDS[kind][1]:
            raise at.fail("%s needs arguments, e.g. %s" % (kind, _EXAMPLES.get(kind, "maxpool(2)")))
        if spec.init != "default" and spec.gain == 0.0:
            spec.gain = 1.0
        layers.append(spec)
    if not layers:
        raise ValueError("network: the description is empty (no layers)")
    return layers


# ---- shapes -------------------------------------------------------------------


def _same(size, k, s):
    """XLA's SAME padding along one axis: (before, after)."""
    out = (size + s - 1) // s
    total = max((out - 1) * s + k - size, 0)
    return total // 2, total - total // 2


def _geometry(spec, shape):
    """(pad (top, bottom, left, right), (sh, sw), output shape) of a conv or
    pooling layer on shape (C, H, W), or the reason it does not fit."""
    c, h, w = shape
    sh, sw = spec.strides()
    pad = spec.pad
    if spec.pad_same:
        pad = _same(h, spec.kh, sh) + _same(w, spec.kw, sw)
    what = "conv2d" if spec.kind == "conv" else "pool2d"
    for axis, size, k, lo, hi in (("height", h, spec.kh, pad[0], pad[1]),
                                  ("width", w, spec.kw, pad[2], pad[3])):
        if lo >= k or hi >= k:
            raise ValueError("%s: %s: padding %d and %d must each be smaller than the kernel (%d)"
                             % (what, axis, lo, hi, k))
        if size + lo + hi < k:
            raise ValueError("%s: %s: padded input %d is smaller than the kernel %d" %
                             (what, axis, size + lo + hi, k))
    oh = (h + pad[0] + pad[1] - spec.kh) // sh + 1
    ow = (w + pad[2] + pad[3] - spec.kw) // sw + 1
    return pad, (sh, sw), (spec.out if spec.kind == "conv" else c, oh, ow)


def shape_of(text):
    """A shape "C,H,W" (the metadata input_shape, obs_shape) as (C, H, W)."""
    parts = text.split(",")
    if len(parts) != 3 or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise ValueError("shape %r is not C,H,W (three positive integers)" % text)
    return tuple(int(p) for p in parts)


def _shape_text(shape):
    return "[%s]" % ", ".join(str(d) for d in shape)


def layer_shapes(in_shape, layers):
    """The output shape (C, H, W) of each layer on rows of shape in_shape
    (dpt_layers_shapes); a flat row of F values is (F, 1, 1). ValueError
    names the layer that does not fit."""
    in_shape = tuple(int(d) for d in in_shape)
    if not layers:
        raise ValueError("sequential model: no layers")
    if len(in_shape) != 3 or min(in_shape) <= 0:
        raise ValueError("sequential model: input shape %s (C, H, W, each >= 1)" %
                         _shape_text(in_shape))
    shapes, cur, n = [], in_shape, len(layers)
    for i, spec in enumerate(layers):
        if spec.kind == "dense":
            if cur[1:] != (1, 1):
                raise ValueError("layer %d of %d (linear) on input %s: the input is an image; "
                                 "put a flatten layer before it" % (i + 1, n, _shape_text(cur)))
            cur = (spec.out, 1, 1)
        elif spec.kind in ("conv", "maxpool", "avgpool"):
            try:
                cur = _geometry(spec, cur)[2]
            except ValueError as e:
                raise ValueError("layer %d of %d (%s) on input %s: %s" %
                                 (i + 1, n, spec.describe(), _shape_text(cur), e)) from None
        elif spec.kind == "flatten":
            cur = (cur[0] * cur[1] * cur[2], 1, 1)
        elif spec.kind == "dropout" and not 0.0 <= spec.rate < 1.0:
            raise ValueError("layer %d of %d (dropout): rate %g is not in [0, 1)" %
                             (i + 1, n, spec.rate))
        elif spec.kind == "batchnorm":
            m, e = np.float32(spec.rate), np.float32(spec.gain)
            if not 0.0 <= m <= 1.0:
                raise ValueError("layer %d of %d (batchnorm): momentum %g is not in [0, 1]" %
                                 (i + 1, n, m))
            if not 0.0 <= e <= 1.0:
                raise ValueError("layer %d of %d (batchnorm): eps %g is not in [0, 1]" % (i + 1, n, e))
        shapes.append(cur)
    return shapes


# ---- layers -------------------------------------------------------------------
# Each takes and returns NCHW batches [N, C, H, W] (rows are [N, F, 1, 1]).


def _windows(x, pad, kh, kw, sh, sw, fill):
    """The windows of x [N, C, H, W] padded with `fill`: [N, C, OH, OW, kh, kw]."""
    t, b, l, r = pad
    if t or b or l or r:
        x = np.pad(x, ((0, 0), (0, 0), (t, b), (l, r)), constant_values=fill)
    win = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(2, 3))
    return win[:, :, ::sh, ::sw]


def conv2d(x, weight, bias, pad, stride):
    """y[n, o, i, j] = sum_{c,u,v} W[o, c, u, v] x[n, c, i*sh + u - pt, j*sw + v - pl] + b[o]
    (zero outside the image), as one product on the unrolled windows."""
    o, c, kh, kw = weight.shape
    win = _windows(x, pad, kh, kw, stride[0], stride[1], 0.0)
    n, _, oh, ow = win.shape[:4]
    col = win.transpose(0, 2, 3, 1, 4, 5).reshape(n * oh * ow, c * kh * kw)
    y = col @ weight.reshape(o, -1).T + bias
    return y.reshape(n, oh, ow, o).transpose(0, 3, 1, 2)


def maxpool2d(x, k, pad, stride):
    return _windows(x, pad, k[0], k[1], stride[0], stride[1], -np.inf).max(axis=(4, 5))


def avgpool2d(x, k, pad, stride, count_pad):
    s = _windows(x, pad, k[0], k[1], stride[0], stride[1], 0.0).sum(axis=(4, 5))
    if count_pad:
        return s / (k[0] * k[1])
    ones = np.ones((1, 1) + x.shape[2:], x.dtype)
    return s / _windows(ones, pad, k[0], k[1], stride[0], stride[1], 0.0).sum(axis=(4, 5))


def batchnorm_eval(x, mean, scale, shift):
    """y[n, c, h, w] = (x[n, c, h, w] - mean[c]) * scale[c] + shift[c]: batch
    normalization with fixed statistics, scale = gamma / sqrt(running_var +
    eps), shift = beta (bn_affine)."""
    return (x - mean[:, None, None]) * scale[:, None, None] + shift[:, None, None]


def bn_affine(spec, gamma, beta, running_mean, running_var):
    """(mean, scale, shift) [C] of a batchnorm layer in evaluation, in double
    as dpt_batchnorm_forward_eval computes them: scale = gamma / sqrt(var +
    eps) with the float32 eps the library keeps."""
    eps = spec.bn_params()[1]
    # A variance of -eps or below gives inf or NaN, as in C.
    with np.errstate(divide="ignore", invalid="ignore"):
        k = 1.0 / np.sqrt(np.asarray(running_var, np.float64) + eps)
    return (np.asarray(running_mean, np.float64), np.asarray(gamma, np.float64) * k,
            np.asarray(beta, np.float64))


def _rows(x):
    """x [N, ...] as rows [N, F] in C order."""
    return np.ascontiguousarray(x).reshape(x.shape[0], int(np.prod(x.shape[1:])))


class Network:
    """A stack of layers on rows of shape in_shape (C, H, W), with the
    variables of `weights`: a dict of numpy arrays named "<prefix><i>.weight"
    and "<prefix><i>.bias" for each conv and dense layer i, and for each
    batchnorm layer i those and "<prefix><i>.running_mean" and
    "<prefix><i>.running_var" ([C] each). ValueError when a layer does not
    fit its input or a variable is missing or misshapen. The layers run in
    evaluation mode (module docstring)."""

    def __init__(self, layers, in_shape, weights, prefix=""):
        self.layers = list(layers)
        self.in_shape = tuple(int(d) for d in in_shape)
        self.shapes = layer_shapes(self.in_shape, self.layers)
        self.out_shape = self.shapes[-1]
        self.out_dim = int(np.prod(self.out_shape))
        self.in_dim = int(np.prod(self.in_shape))
        self._ops = []
        cur = self.in_shape
        for i, spec in enumerate(self.layers):
            p = None
            if spec.has_params:
                want = ((spec.out, cur[0], spec.kh, spec.kw) if spec.kind == "conv"
                        else (spec.out, cur[0]))
                p = [self._var(weights, "%s%d.%s" % (prefix, i, part), shape)
                     for part, shape in (("weight", want), ("bias", (spec.out,)))]
            elif spec.kind == "batchnorm":
                p = [self._var(weights, "%s%d.%s" % (prefix, i, part), (cur[0],))
                     for part in ("weight", "bias", "running_mean", "running_var")]
                p = bn_affine(spec, *p)
            if spec.kind in ("conv", "maxpool", "avgpool"):
                pad, stride, _ = _geometry(spec, cur)
                self._ops.append((spec, p, pad, stride))
            else:
                self._ops.append((spec, p, None, None))
            cur = self.shapes[i]
        self._cache = {}

    @staticmethod
    def _var(weights, name, shape):
        if name not in weights:
            raise ValueError("no variable %s" % name)
        v = np.asarray(weights[name])
        if v.shape != tuple(shape):
            raise ValueError("variable %s has shape %s; the layer needs %s" %
                             (name, list(v.shape), list(shape)))
        return v

    def _params(self, dtype):
        dtype = np.dtype(dtype)
        if dtype not in self._cache:
            self._cache[dtype] = [None if p is None else [v.astype(dtype) for v in p]
                                  for _, p, _, _ in self._ops]
        return self._cache[dtype]

    def forward(self, x, dtype=np.float64):
        """The output rows [N, out_dim] of x [N, C, H, W] (or [N, C*H*W]),
        computed in dtype (an image output flattened in NCHW order)."""
        x = np.asarray(x, dtype=dtype).reshape((-1,) + self.in_shape)
        for (spec, _, pad, stride), p in zip(self._ops, self._params(dtype)):
            if spec.kind == "conv":
                x = conv2d(x, p[0], p[1], pad, stride)
            elif spec.kind == "maxpool":
                x = maxpool2d(x, (spec.kh, spec.kw), pad, stride)
            elif spec.kind == "avgpool":
                x = avgpool2d(x, (spec.kh, spec.kw), pad, stride, spec.count_pad)
            elif spec.kind == "dense":
                x = (_rows(x) @ p[0].T + p[1])[:, :, None, None]
            elif spec.kind == "relu":
                x = np.maximum(x, 0)
            elif spec.kind == "tanh":
                x = np.tanh(x)
            elif spec.kind == "dropout":
                pass  # the identity outside training
            elif spec.kind == "batchnorm":
                x = batchnorm_eval(x, *p)
            else:  # flatten: the same memory
                x = _rows(x)[:, :, None, None]
        return _rows(x)
