"""dpt.load of supervised checkpoints (dpt.Model) and the model language in
Python (dpt.network): the parser against dpt_network_parse, the layers
against direct loops and against dpt's own C model, and the models of runs
trained by the dpt command against `dpt eval` on the same test data (the
same correct rows, the loss within 1e-5), batch normalization included. A
policy with an encoder is checked on a checkpoint written here, and one with
batchnorm in its encoder refused, as dpt train refuses it for the RL jobs."""
import json
import random
import struct
import subprocess

import pytest

np = pytest.importorskip("numpy")

import dpt  # noqa: E402
from dpt import network  # noqa: E402
from conftest import train  # noqa: E402


def c_model():
    """The C reference (c_model.py), or a skip without a loadable libdpt."""
    try:
        import c_model as cm

        dpt._lib.lib()
    except (ImportError, OSError) as e:
        pytest.skip("no libdpt to compare with (%s)" % e)
    return cm


def write_checkpoint(path, tensors, meta):
    """A safetensors file of float32 tensors and string metadata."""
    header, blobs, off = {"__metadata__": meta}, [], 0
    for name, v in tensors.items():
        b = np.ascontiguousarray(v, "<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(np.shape(v)),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    return path


def dpt_eval(dpt_bin, run, *sets):
    cmd = [dpt_bin, "eval", str(run), "--json"]
    for s in sets:
        cmd += ["--set", s]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


# ---- the parser -----------------------------------------------------------------


def test_parse_forms():
    text = ("conv(32,k=3,pad=1) relu\n maxpool(2)\tconv2d( 8 , 3x1 , stride = 2 , pad=same ) "
            "avgpool2d(3,stride=1,pad=1x0,count_pad=0) flatten linear(10,init=orthogonal) "
            "tanh dense(4, init = normal , gain=0.5) relu ( ) maxpool(k=2x3,stride=1)")
    ls = network.parse(text)
    assert [sp.kind for sp in ls] == ["conv", "relu", "maxpool", "conv", "avgpool", "flatten",
                                      "dense", "tanh", "dense", "relu", "maxpool"]
    assert [sp.describe() for sp in ls] == [
        "conv(32,k=3x3,stride=1x1,pad=1x1)", "relu", "maxpool(2x2,stride=2x2,pad=0x0)",
        "conv(8,k=3x1,stride=2x2,pad=same)", "avgpool(3x3,stride=1x1,pad=1x0,count_pad=0)",
        "flatten", "dense(10,init=orthogonal,gain=1)", "tanh", "dense(4,init=normal,gain=0.5)",
        "relu", "maxpool(2x3,stride=1x1,pad=0x0)"]
    assert ls[0].out == 32 and (ls[0].kh, ls[0].kw) == (3, 3) and ls[0].pad == (1, 1, 1, 1)
    assert ls[0].init == "default" and ls[0].gain == 0.0 and ls[0].strides() == (1, 1)
    assert ls[2].strides() == (2, 2) and ls[4].pad == (1, 1, 0, 0) and not ls[4].count_pad
    assert ls[3].pad_same and ls[3].strides() == (2, 2) and ls[6].gain == 1.0
    assert network.parse("avgpool(2)")[0].count_pad
    assert network.parse("dense(16777216)")[0].out == 1 << 24
    assert network.parse("dense(1,init=uniform,gain=0x1p-1)")[0].gain == 0.5


def test_parse_batchnorm():
    text = ("conv(4,k=3) batchnorm relu bn() bn( ) batchnorm(momentum=0.2) bn(eps=1e-3) "
            "bn( eps = 0.5 , momentum = 1 ) bn(momentum=0x1p-3) flatten dense(8) bn relu")
    ls = network.parse(text)
    assert [sp.kind for sp in ls] == ["conv", "batchnorm", "relu"] + ["batchnorm"] * 6 + [
        "flatten", "dense", "batchnorm", "relu"]
    assert [sp.describe() for sp in ls if sp.kind == "batchnorm"] == [
        "batchnorm", "batchnorm", "batchnorm", "batchnorm(momentum=0.200000003)",
        "batchnorm(eps=0.00100000005)", "batchnorm(momentum=1,eps=0.5)",
        "batchnorm(momentum=0.125)", "batchnorm"]
    # The momentum is kept in rate and eps in gain; 0 means the defaults.
    assert (ls[1].rate, ls[1].gain) == (0.0, 0.0) and not ls[1].has_params
    assert ls[1].bn_params() == (float(np.float32(0.1)), float(np.float32(1e-5)))
    assert (ls[5].rate, ls[5].gain) == (0.2, 0.0) and (ls[7].rate, ls[7].gain) == (1.0, 0.5)
    assert ls[7].bn_params() == (1.0, 0.5)
    # Descriptions parse back to the same layers.
    again = network.parse(" ".join(sp.describe() for sp in ls))
    assert [sp.describe() for sp in again] == [sp.describe() for sp in ls]
    assert [sp.bn_params() for sp in again if sp.kind == "batchnorm"] == [
        sp.bn_params() for sp in ls if sp.kind == "batchnorm"]
    # Values that round to a float32 0 are the defaults, as the library keeps them.
    assert network.parse("bn(momentum=1e-50,eps=1e-50)")[0].describe() == "batchnorm"


@pytest.mark.parametrize("text, message", [
    ("", "network: the description is empty (no layers)"),
    (" \n\t", "network: the description is empty (no layers)"),
    ("relu , tanh", 'network layer 2 ",": expected a layer name'),
    ("relu,tanh", 'network layer 1 "relu": unexpected "," after it (layers are separated by '
                  'spaces)'),
    ("dense(3)relu", 'network layer 1 "dense(3)": unexpected "r" after it'),
    ("conv(3, k=3", 'network layer 1 "conv(3, k=3": no closing parenthesis'),
    ("conv(3, k=(3))", 'network layer 1 "conv(3, k=(3)": a parenthesis inside the arguments'),
    ("relu pool(2)", 'network layer 2 "pool(2)": unknown layer (known: conv, maxpool, avgpool, '
                     'dense, dropout, batchnorm, flatten, relu, tanh; conv2d, maxpool2d, '
                     'avgpool2d, linear and bn are the same)'),
    ("batchnorm2d", 'network layer 1 "batchnorm2d": unknown layer'),
    ("BN", 'network layer 1 "BN": unknown layer'),
    ("bn(0.1)", 'network layer 1 "bn(0.1)": too many positional arguments (batchnorm takes 0)'),
    ("relu bn(p=0.5)", 'network layer 2 "bn(p=0.5)": unknown argument "p" (batchnorm takes: '
                       'momentum eps)'),
    ("bn(gain=1)", 'unknown argument "gain" (batchnorm takes: momentum eps)'),
    ("bn(momentum=0)", 'network layer 1 "bn(momentum=0)": momentum = "0" is not a number in '
                       '(0, 1]'),
    ("bn(momentum=1.5)", 'momentum = "1.5" is not a number in (0, 1]'),
    ("bn(momentum=-0.1)", 'momentum = "-0.1" is not a number in (0, 1]'),
    ("bn(momentum=1e-310)", 'momentum = "1e-310" is not a number in (0, 1]'),
    ("bn(momentum=nan)", 'momentum = "nan" is not a number in (0, 1]'),
    ("bn(momentum=)", 'momentum = "" is not a number in (0, 1]'),
    ("bn(eps=0)", 'network layer 1 "bn(eps=0)": eps = "0" is not a number in (0, 1]'),
    ("bn(eps=2)", 'eps = "2" is not a number in (0, 1]'),
    ("bn(eps=1e-3x)", 'eps = "1e-3x" is not a number in (0, 1]'),
    ("bn(eps=inf)", 'eps = "inf" is not a number in (0, 1]'),
    ("bn(eps=0.1,eps=0.2)", "argument eps given twice"),
    ("bn(momentum=0.1,)", "an empty argument"),
    ("dropout", 'network layer 1 "dropout": dropout needs arguments, e.g. dropout(0.5)'),
    ("dropout(1)", 'network layer 1 "dropout(1)": p = "1" is not a probability in [0, 1)'),
    ("Conv(3,k=3)", 'network layer 1 "Conv(3,k=3)": unknown layer'),
    ("conv", 'network layer 1 "conv": conv needs arguments, e.g. conv(32,k=3)'),
    ("linear", 'network layer 1 "linear": dense needs arguments, e.g. dense(128)'),
    ("avgpool", 'network layer 1 "avgpool": avgpool needs arguments, e.g. maxpool(2)'),
    ("conv(3)", 'network layer 1 "conv(3)": the kernel size is missing (k=3, or the second '
                'argument)'),
    ("conv(k=3)", 'network layer 1 "conv(k=3)": the output size is missing (the first '
                  'argument)'),
    ("conv( )", "the output size is missing"),
    ("maxpool(stride=2)", 'network layer 1 "maxpool(stride=2)": the window size is missing (the '
                          'first argument)'),
    ("relu maxpool(2, foo=1)", 'network layer 2 "maxpool(2, foo=1)": unknown argument "foo" '
                               '(maxpool takes: k stride pad)'),
    ("flatten(x=1)", 'unknown argument "x" (flatten takes: none)'),
    ("flatten(1)", 'network layer 1 "flatten(1)": too many positional arguments (flatten takes '
                   '0)'),
    ("conv(3,3,3)", "too many positional arguments (conv takes 2)"),
    ("conv(k=3,4)", "a positional argument after a named one"),
    ("conv(3,k=3,k=2)", "argument k given twice"),
    ("conv(3,3,k=2)", "argument k given twice"),
    ("conv(3,,k=3)", "an empty argument"),
    ("conv(3,k=3,)", 'network layer 1 "conv(3,k=3,)": an empty argument'),
    ("dense(0)", 'out = "0" is not an integer in 1..16777216'),
    ("dense(16777217)", 'out = "16777217" is not an integer in 1..16777216'),
    ("dense(-1)", 'out = "-1" is not an integer in 1..16777216'),
    ("dense(1.5)", 'out = "1.5" is not an integer'),
    ("maxpool(2x)", 'k = "" is not an integer in 1..16777216'),
    ("maxpool(2x2x2)", 'k = "2x2" is not an integer in 1..16777216'),
    ("maxpool(2,stride=0)", 'stride = "0" is not an integer in 1..16777216'),
    ("maxpool(2,pad=-1)", 'pad = "-1" is not an integer in 0..16777216'),
    ("maxpool(2,pad=Same)", 'pad = "Same" is not an integer in 0..16777216'),
    ("avgpool(2,count_pad=2)", "count_pad must be 0 or 1"),
    ("dense(3,init=xavier)", 'init = "xavier" is not one of default, uniform, normal, '
                             'orthogonal'),
    ("dense(3,gain=0)", 'gain = "0" is not a number in (0, 1e6]'),
    ("dense(3,gain=2e6)", 'gain = "2e6" is not a number in (0, 1e6]'),
    ("dense(3,gain=1e)", 'gain = "1e" is not a number in (0, 1e6]'),
    ("dense(3,gain=inf)", 'gain = "inf" is not a number'),
    (" ".join(["relu"] * 65), 'network layer 65 "relu": more than 64 layers'),
    ("dense(1," + "1" * 200 + ")", '"dense(1,' + "1" * 112 + '...": too many positional'),
])
def test_parse_errors(text, message):
    with pytest.raises(ValueError) as e:
        network.parse(text)
    assert message in str(e.value)


def _parsed(parse, text):
    try:
        return [(k, d, i, float(np.float32(g)), cp, float(np.float32(r)))
                for k, d, i, g, cp, r in parse(text)]
    except ValueError as e:
        return "error: %s" % e


def _py_parse(text):
    return [(sp.kind, sp.describe(), sp.init, sp.gain, sp.count_pad, sp.rate)
            for sp in network.parse(text)]


def test_parse_matches_c():
    """The same layers, or the same message, as dpt_network_parse on
    descriptions made of the language's pieces (ASCII only: C quotes a
    stray byte where Python quotes a character)."""
    cm = c_model()
    pieces = ["conv", "conv2d", "maxpool", "avgpool2d", "dense", "linear", "flatten", "relu",
              "tanh", "pool", "(", ")", ",", "=", " ", "  ", "\t", "\n", "k", "out", "stride",
              "pad", "same", "count_pad", "init", "gain", "3", "0", "1", "2x3", "x", "16777217",
              "0x1p1", "1e3", "1e7", ".5", "-1", "inf", "orthogonal", "bogus", "_", "1.5", "k=3",
              "pad=1", "count_pad=0", ";", "batchnorm", "bn", "momentum", "eps", "1e-5", "0.1",
              "1e-50", "1e-310", "bn(momentum=0.5)", "bn(eps=1e-3)", "dropout(0.5)", "p"]
    rnd = random.Random(7)
    texts = ["".join(rnd.choice(pieces) for _ in range(rnd.randint(1, 12))) for _ in range(3000)]
    # Layers with their required arguments, then optional ones, some of them wrong.
    required = {"conv": ["8", "3"], "conv2d": ["2", "k=1x3"], "maxpool": ["2"],
                "avgpool2d": ["k=3"], "dense": ["4"], "linear": ["out=16"], "relu": [],
                "tanh": [], "flatten": [], "batchnorm": [], "bn": [], "dropout": ["0.25"]}
    optional = ["k=2", "stride=2", "stride=1x3", "pad=1", "pad=same", "pad=2x0", "count_pad=0",
                "count_pad=1", "init=orthogonal", "init=normal", "gain=2.5", "gain=1e-3",
                "gain=0.0", "3", "pad=x", "stride=0", "momentum=0.5", "momentum=1",
                "momentum=0", "momentum=2", "momentum=1e-50", "eps=1e-3", "eps=0x1p-4", "eps=0",
                "eps=1.5", "eps=1e-50", "p=0.5"]
    for _ in range(3000):
        layers = []
        for _ in range(rnd.randint(1, 5)):
            kind = rnd.choice(list(required))
            args = required[kind] + [rnd.choice(optional) for _ in range(rnd.randint(0, 2))]
            layers.append(kind + ("(%s)" % ", ".join(args) if args or rnd.random() < 0.3 else ""))
        texts.append(" ".join(layers))
    valid = 0
    for text in texts:
        want = _parsed(cm.parse, text)
        assert _parsed(_py_parse, text) == want, text
        valid += not isinstance(want, str)
    assert valid > 300  # both kinds of answer are checked


def test_shapes_match_c():
    cm = c_model()
    rnd = random.Random(3)
    fits = 0
    for _ in range(3000):
        layers = []
        for _ in range(rnd.randint(1, 5)):
            kind = rnd.choice(["conv", "maxpool", "avgpool", "dense", "relu", "flatten", "bn"])
            if kind in ("relu", "flatten", "bn"):
                layers.append(kind)
                continue
            a = ("%d,k=%s" % (rnd.randint(1, 4), rnd.choice(["1", "2", "3", "2x3"]))
                 if kind == "conv" else str(rnd.randint(1, 5)) if kind == "dense"
                 else rnd.choice(["1", "2", "3", "2x1"]))
            for opt in ("stride=" + rnd.choice(["1", "2", "3", "1x2"]),
                        "pad=" + rnd.choice(["0", "1", "2", "same", "1x0"])):
                if kind != "dense" and rnd.random() < 0.5:
                    a += "," + opt
            layers.append("%s(%s)" % (kind, a))
        text = " ".join(layers)
        shape = (rnd.randint(1, 3), rnd.randint(1, 9), rnd.randint(1, 9))
        try:
            want = cm.shapes(shape, text)
        except ValueError as e:
            want = "error: %s" % e
        try:
            got = network.layer_shapes(shape, network.parse(text))
        except ValueError as e:
            got = "error: %s" % e
        assert got == want, (text, shape)
        fits += not isinstance(want, str)
    assert fits > 300


def test_shape_errors():
    def shapes(shape, text):
        return network.layer_shapes(shape, network.parse(text))

    assert shapes((1, 28, 28), "conv(32,k=3,pad=1) relu maxpool(2) conv(64,k=3,pad=1) relu "
                  "maxpool(2) flatten dense(128)") == [
        (32, 28, 28), (32, 28, 28), (32, 14, 14), (64, 14, 14), (64, 14, 14), (64, 7, 7),
        (3136, 1, 1), (128, 1, 1)]
    assert shapes((4, 10, 10), "conv(8,k=2,pad=same) conv(2,k=3,stride=2,pad=same)") == [
        (8, 10, 10), (2, 5, 5)]
    with pytest.raises(ValueError, match=r"^layer 2 of 2 \(linear\) on input \[4, 5, 5\]: the "
                                         r"input is an image; put a flatten layer before it$"):
        shapes((1, 5, 5), "conv(4,k=1) dense(3)")
    with pytest.raises(ValueError, match=r"layer 1 of 1 \(conv\(4,k=3x3,stride=1x1,pad=3x3\)\) "
                                         r"on input \[1, 5, 5\]: conv2d: height: padding 3 and 3 "
                                         r"must each be smaller than the kernel \(3\)"):
        shapes((1, 5, 5), "conv(4,k=3,pad=3)")
    with pytest.raises(ValueError, match=r"pool2d: width: padded input 2 is smaller than the "
                                         r"kernel 3"):
        shapes((1, 5, 2), "maxpool(3,stride=1)")


# ---- the layers -------------------------------------------------------------------


def _direct_conv(x, w, b, pad, stride):
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    t, bo, l, r = pad
    oh, ow = (h + t + bo - kh) // stride[0] + 1, (wd + l + r - kw) // stride[1] + 1
    y = np.zeros((n, o, oh, ow))
    for i in range(oh):
        for j in range(ow):
            for u in range(kh):
                for v in range(kw):
                    r_, c_ = i * stride[0] + u - t, j * stride[1] + v - l
                    if 0 <= r_ < h and 0 <= c_ < wd:
                        y[:, :, i, j] += x[:, :, r_, c_] @ w[:, :, u, v].T
    return y + b[:, None, None]


def _direct_pool(x, k, pad, stride, op, count_pad=True):
    n, c, h, w = x.shape
    t, bo, l, r = pad
    oh, ow = (h + t + bo - k[0]) // stride[0] + 1, (w + l + r - k[1]) // stride[1] + 1
    y = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            r0, c0 = i * stride[0] - t, j * stride[1] - l
            win = x[:, :, max(r0, 0):max(r0 + k[0], 0), max(c0, 0):max(c0 + k[1], 0)]
            if op == "max":
                y[:, :, i, j] = win.max(axis=(2, 3))
            else:
                y[:, :, i, j] = win.sum(axis=(2, 3)) / (k[0] * k[1] if count_pad
                                                        else win.shape[2] * win.shape[3])
    return y


@pytest.mark.parametrize("shape, k, pad, stride", [
    ((2, 3, 7, 6), (3, 3), (1, 1, 1, 1), (1, 1)),
    ((1, 2, 9, 5), (2, 3), (0, 1, 2, 1), (2, 3)),
    ((3, 1, 4, 4), (4, 1), (3, 0, 0, 0), (1, 2)),
    ((2, 2, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),
])
def test_layers_against_direct_loops(shape, k, pad, stride):
    rng = np.random.default_rng(1)
    x = rng.normal(size=shape)
    w, b = rng.normal(size=(4, shape[1]) + k), rng.normal(size=4)
    np.testing.assert_allclose(network.conv2d(x, w, b, pad, stride),
                               _direct_conv(x, w, b, pad, stride), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(network.maxpool2d(x, k, pad, stride),
                                  _direct_pool(x, k, pad, stride, "max"))
    for cp in (True, False):
        np.testing.assert_allclose(network.avgpool2d(x, k, pad, stride, cp),
                                   _direct_pool(x, k, pad, stride, "avg", cp), rtol=1e-12)


def test_batchnorm_against_direct_loops():
    """Evaluation-mode batch normalization: per channel over H and W of each
    image (per feature of a row), with the running statistics."""
    rng = np.random.default_rng(4)
    x = rng.normal(size=(3, 4, 5, 2))
    w = {"0.weight": rng.normal(size=4), "0.bias": rng.normal(size=4),
         "0.running_mean": rng.normal(size=4), "0.running_var": rng.uniform(0.1, 2, 4)}
    g, b, m, v = (w["0." + k] for k in ("weight", "bias", "running_mean", "running_var"))
    want = np.zeros_like(x)
    for n in range(3):
        for c in range(4):
            for h in range(5):
                for j in range(2):
                    want[n, c, h, j] = g[c] * (x[n, c, h, j] - m[c]) / np.sqrt(v[c] + 0.25) + b[c]
    net = network.Network(network.parse("bn(eps=0.25)"), (4, 5, 2), w)
    assert net.out_shape == (4, 5, 2)
    np.testing.assert_allclose(net.forward(x), want.reshape(3, 40), rtol=1e-12, atol=1e-12)
    # Flat rows: per feature, with the default eps (the float32 1e-5 the library keeps).
    rows = rng.normal(size=(6, 4))
    eps = float(np.float32(1e-5))
    want = (rows - m) / np.sqrt(v + eps) * g + b
    np.testing.assert_allclose(network.Network(network.parse("batchnorm"), (4, 1, 1), w)
                               .forward(rows), want, rtol=1e-12, atol=1e-12)
    # A batch of one row gives that row's output: no batch statistics.
    net = network.Network(network.parse("bn"), (4, 5, 2), w)
    np.testing.assert_array_equal(net.forward(x[1:2]), net.forward(x)[1:2])
    with pytest.raises(ValueError, match=r"^no variable 0.running_var$"):
        network.Network(network.parse("bn"), (4, 5, 2),
                        {k: v for k, v in w.items() if k != "0.running_var"})
    with pytest.raises(ValueError, match=r"^variable 0.running_mean has shape \[4\]; the layer "
                                         r"needs \[3\]$"):
        network.Network(network.parse("bn"), (3, 5, 2), {**w, "0.weight": w["0.weight"][:3],
                                                         "0.bias": w["0.bias"][:3]})
    with pytest.raises(ValueError, match=r"^layer 2 of 2 \(batchnorm\): momentum 2 is not in "
                                         r"\[0, 1\]$"):
        network.layer_shapes((4, 5, 2), [network.LayerSpec("relu"),
                                         network.LayerSpec("batchnorm", rate=2.0)])
    with pytest.raises(ValueError, match=r"\(batchnorm\): eps -1 is not in \[0, 1\]"):
        network.layer_shapes((4, 5, 2), [network.LayerSpec("batchnorm", gain=-1.0)])


NETWORKS = [
    "conv(4,k=3,pad=1) relu maxpool(2) conv(4,k=2,stride=2,pad=same) tanh avgpool(2,count_pad=0) "
    "flatten dense(8) relu",
    "conv(3,k=4,pad=same) relu maxpool(3,stride=2,pad=1) conv(4,k=3,stride=2,pad=same) tanh "
    "avgpool(3,stride=1,pad=1,count_pad=0) avgpool(2,pad=1) flatten dense(6) relu",
    "conv2d(2,3x1,stride=1x2,pad=1x0) maxpool(2x3,stride=1,pad=same) flatten linear(5) tanh",
    "bn conv(4,k=3,pad=1) batchnorm relu maxpool(2) conv(3,k=2,stride=2,pad=same) bn(eps=0.5) "
    "tanh flatten dense(8) bn(momentum=0.3,eps=1e-3) relu",
    "conv(3,k=3) bn(eps=1e-50) flatten bn(eps=1) dense(6) bn tanh",
]


def _synthetic_model(path, text, in_shape, outputs, seed, loss="softmax_xent"):
    """A supervised checkpoint of network text with random weights (and
    random statistics for batchnorm layers)."""
    layers = network.parse(text) + [network.LayerSpec("dense", out=outputs)]
    net_shapes = network.layer_shapes(in_shape, layers)
    rng = np.random.default_rng(seed)
    tensors, cur = {}, in_shape
    for i, sp in enumerate(layers):
        if sp.has_params:
            w = ((sp.out, cur[0], sp.kh, sp.kw) if sp.kind == "conv" else (sp.out, cur[0]))
            tensors["params.%d.weight" % i] = rng.normal(0, 0.5, w).astype(np.float32)
            tensors["params.%d.bias" % i] = rng.normal(0, 0.5, sp.out).astype(np.float32)
        elif sp.kind == "batchnorm":
            c = cur[0]
            for part, v in (("weight", rng.normal(1, 0.5, c)), ("bias", rng.normal(0, 0.5, c)),
                            ("running_mean", rng.normal(0, 0.5, c)),
                            ("running_var", rng.uniform(0.05, 3.0, c))):
                tensors["params.%d.%s" % (i, part)] = v.astype(np.float32)
        cur = net_shapes[i]
    meta = {"job": "supervised", "loss": loss, "network": text,
            "input_shape": ",".join(map(str, in_shape)),
            "input_dim": str(int(np.prod(in_shape))),
            ("num_targets" if loss != "softmax_xent" else "num_classes"): str(outputs)}
    return write_checkpoint(path, tensors, meta)


@pytest.mark.parametrize("text", NETWORKS)
def test_forward_matches_c_model(text, tmp_path):
    cm = c_model()
    path = _synthetic_model(tmp_path / "m.safetensors", text, (2, 11, 10), 7, seed=5)
    model = dpt.load(path)
    assert isinstance(model, dpt.Model) and model.outputs == 7
    x = np.random.default_rng(2).normal(size=(300, 2, 11, 10)).astype(np.float32)
    want = cm.CModel(model).predict(x)
    np.testing.assert_allclose(model.predict(x), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(model.predict(x, dtype=np.float32), want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(model.predict(x, batch_size=7), model.predict(x), rtol=1e-12,
                               atol=1e-12)


def test_model_errors(tmp_path):
    path = _synthetic_model(tmp_path / "m.safetensors", "conv(2,k=3) flatten", (1, 5, 4), 3, 1)
    model = dpt.load(path)
    assert model.input_shape == (1, 5, 4) and model.input_dim == 20 and model.num_classes == 3
    assert repr(model).endswith(": supervised, 1x5x4 -> 3 classes>")
    x = np.zeros((2, 20), np.float32)
    assert model.predict(x).shape == (2, 3) and model.predict(x[:0]).shape == (0, 3)
    np.testing.assert_array_equal(model.predict(x.reshape(2, 1, 5, 4)), model.predict(x))
    np.testing.assert_array_equal(model.predict(x.reshape(2, 5, 4)), model.predict(x))
    with pytest.raises(ValueError, match=r"input of shape \[2, 21\]; the model takes \[N, 20\] "
                                         r"or \[N, 1, 5, 4\]"):
        model.predict(np.zeros((2, 21)))
    with pytest.raises(ValueError, match=r"input of shape \[2, 1, 4, 5\]"):
        model.predict(np.zeros((2, 1, 4, 5)))
    with pytest.raises(ValueError, match="has no ema. tensors"):
        dpt.load(path, weights="ema")
    with pytest.raises(ValueError, match="weights='best'"):
        dpt.load(path, weights="best")
    with pytest.raises(ValueError, match="leave out policy="):
        dpt.load(path, policy="a")
    with pytest.raises(ValueError, match="not an RL policy"):
        dpt.Policy(path)
    tensors, meta = dpt.read_checkpoint(path)
    bad = dict(tensors)
    bad["params.2.weight"] = np.zeros((3, 23), np.float32)  # conv gives 2*3*2 = 12 features
    with pytest.raises(ValueError, match=r"variable 2.weight has shape \[3, 23\]; the layer "
                                         r"needs \[3, 12\]"):
        dpt.load(write_checkpoint(tmp_path / "bad.safetensors", bad, meta))
    with pytest.raises(ValueError, match='network layer 1 "conv": conv needs arguments'):
        dpt.load(write_checkpoint(tmp_path / "bad2.safetensors", tensors,
                                  {**meta, "network": "conv flatten"}))
    with pytest.raises(ValueError, match="not a supervised model"):
        dpt.Model(write_checkpoint(tmp_path / "ppo.safetensors", tensors, {**meta, "job": "ppo"}))


# ---- runs trained by dpt ----------------------------------------------------------


def _spirals(n, rng):
    """Two interleaved spirals: points [n, 2] and labels [n]."""
    t = rng.uniform(0.25, 3.0, n) * np.pi
    label = rng.integers(0, 2, n)
    r = t / (3.0 * np.pi)
    a = t + np.pi * label
    x = np.stack([r * np.cos(a), r * np.sin(a)], 1) + rng.normal(0, 0.02, (n, 2))
    return x.astype(np.float32), label


def _write_csv(path, x, label=None, targets=None):
    cols = ["f%d" % i for i in range(x.shape[1])]
    rows = [["%.9g" % v for v in r] for r in x]
    if label is not None:
        cols.append("label")
        rows = [r + [str(int(lab))] for r, lab in zip(rows, label)]
    if targets is not None:
        cols += ["y%d" % i for i in range(targets.shape[1])]
        rows = [r + ["%.9g" % v for v in t] for r, t in zip(rows, targets)]
    path.write_text(",".join(cols) + "\n" + "".join(",".join(r) + "\n" for r in rows))


def _conf(path, **keys):
    path.write_text("".join("%s = %s\n" % kv for kv in keys.items()))
    return path


def _same_as_dpt_eval(model, result, x, y):
    """model.evaluate on the test rows against dpt eval's figures."""
    mine = model.evaluate(x, y)
    assert mine["samples"] == result["samples"] == len(x)
    assert mine["loss"] == pytest.approx(result["loss"], rel=1e-5)
    if "accuracy" in result:
        assert mine["correct"] == round(result["accuracy"] * len(x))
    else:
        for key in ("rmse", "mae", "r2"):
            assert mine[key] == pytest.approx(result[key], rel=1e-5, abs=1e-7), key
    return mine


@pytest.fixture(scope="module")
def spirals_csv(tmp_path_factory):
    d = tmp_path_factory.mktemp("spirals")
    rng = np.random.default_rng(4)
    xtr, ytr = _spirals(1024, rng)
    xte, yte = _spirals(400, rng)
    _write_csv(d / "train.csv", xtr, ytr)
    _write_csv(d / "test.csv", xte, yte)
    return d, xte, yte


@pytest.mark.parametrize("job", ["supervised", "sync_replicas"])
def test_mlp_on_csv_spirals(job, spirals_csv, dpt_bin, tmp_path):
    d, x, labels = spirals_csv
    conf = _conf(d / ("%s.conf" % job), job=job, dataset="csv", train_csv="train.csv",
                 test_csv="test.csv", hidden="16,16", activation="relu", epochs=15, lr=0.01,
                 batch_size=64, seed=3,
                 **({"ema_decay": 0.9} if job == "sync_replicas" else {"num_devices": 1}))
    run = train(tmp_path / "run", conf)
    model = dpt.load(run)
    assert isinstance(model, dpt.Model) and model.job == job
    assert model.input_shape == (2, 1, 1) and model.num_classes == 2 and model.loss == \
        "softmax_xent"
    assert sorted(model.weights) == ["0.bias", "0.weight", "2.bias", "2.weight", "4.bias",
                                     "4.weight"]
    mine = _same_as_dpt_eval(model, dpt_eval(dpt_bin, run), x, labels)
    assert mine["accuracy"] > 0.8  # it learned something
    np.testing.assert_array_equal(model.classify(x), np.argmax(model.predict(x), 1))
    cm = c_model()
    np.testing.assert_allclose(model.predict(x), cm.CModel(model).predict(x), rtol=1e-5,
                               atol=1e-6)
    if job == "sync_replicas":
        ema = dpt.load(run, weights="ema")
        assert not np.array_equal(ema.weights["0.weight"], model.weights["0.weight"])
        _same_as_dpt_eval(ema, dpt_eval(dpt_bin, run, "eval_ema=true"), x, labels)


def _write_idx(path, array, magic):
    dims = array.shape
    path.write_bytes(struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in dims) +
                     array.astype(np.uint8).tobytes())


def _images(n, rng):
    """12x12 images of 10 classes: a bright 3x3 square at a place of the
    class, on noise; pixels 0..255 and labels."""
    labels = rng.integers(0, 10, n)
    img = rng.integers(0, 60, (n, 12, 12))
    for i, c in enumerate(labels):
        r, col = 1 + 3 * (c // 4), 1 + 3 * (c % 4) - (c // 8)
        img[i, r:r + 3, col:col + 3] += 190
    return img.astype(np.uint8), labels


@pytest.fixture(scope="module")
def idx_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("idx")
    rng = np.random.default_rng(8)
    xtr, ytr = _images(1000, rng)
    xte, yte = _images(200, rng)
    _write_idx(d / "train-images-idx3-ubyte", xtr, 0x803)
    _write_idx(d / "train-labels-idx1-ubyte", ytr, 0x801)
    _write_idx(d / "t10k-images-idx3-ubyte", xte, 0x803)
    _write_idx(d / "t10k-labels-idx1-ubyte", yte, 0x801)
    return d, xte, yte


@pytest.mark.parametrize("text", NETWORKS[:2])
def test_cnn_on_idx_images(text, idx_dir, dpt_bin, tmp_path):
    d, images, labels = idx_dir
    conf = _conf(tmp_path / "cnn.conf", job="supervised", dataset="fashion_mnist",
                 data_dir=str(d), network=text, epochs=2, batch_size=16, lr=0.02,
                 num_devices=1, seed=2)
    run = train(tmp_path / "run", conf)
    model = dpt.load(run)
    assert model.network_text == text and model.input_shape == (1, 12, 12)
    assert model.num_classes == 10 and len(model.layers) == len(network.parse(text)) + 1
    # The loader's pixels: bytes / 255 in float32.
    x = images.astype(np.float32) / np.float32(255)
    mine = _same_as_dpt_eval(model, dpt_eval(dpt_bin, run), x, labels)
    assert mine["accuracy"] > 0.2
    np.testing.assert_allclose(model.predict(x), c_model().CModel(model).predict(x), rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_array_equal(model.predict(x.reshape(-1, 1, 12, 12)),
                                  model.predict(x.reshape(-1, 144)))
    with pytest.raises(ValueError, match=r"the model takes \[N, 144\] or \[N, 1, 12, 12\]"):
        model.predict(x[:, :11])


BN_NETWORK = ("conv(4,k=3,pad=1) batchnorm relu maxpool(2) conv(4,k=3,pad=1) bn(eps=1e-3) relu "
              "maxpool(2) flatten dense(16) bn(momentum=0.2) relu")


@pytest.mark.parametrize("job", ["supervised", "sync_replicas"])
def test_batchnorm_on_idx_images(job, idx_dir, dpt_bin, tmp_path):
    """A CNN with batchnorm layers trained by dpt (two towers; sync_replicas
    with two workers and a moving average): the running statistics moved,
    and dpt.load predicts with them as dpt eval and dpt's C model do."""
    d, images, labels = idx_dir
    keys = ({"num_devices": 2} if job == "supervised"
            else {"total_num_replicas": 2, "replicas_to_aggregate": 2, "ema_decay": 0.9})
    conf = _conf(tmp_path / "bn.conf", job=job, dataset="fashion_mnist", data_dir=str(d),
                 network=BN_NETWORK, epochs=2, batch_size=16, lr=0.01, seed=4, **keys)
    run = train(tmp_path / "run", conf)
    model = dpt.load(run)
    assert model.network_text == BN_NETWORK and model.job == job
    assert [sp.describe() for sp in model.layers if sp.kind == "batchnorm"] == [
        "batchnorm", "batchnorm(eps=0.00100000005)", "batchnorm(momentum=0.200000003)"]
    for i, c in ((1, 4), (5, 4), (10, 16)):
        for part in ("weight", "bias", "running_mean", "running_var"):
            assert model.weights["%d.%s" % (i, part)].shape == (c,)
        # Trained away from the initial statistics (zeros and ones).
        assert np.abs(model.weights["%d.running_mean" % i]).max() > 1e-3
        assert np.abs(model.weights["%d.running_var" % i] - 1).max() > 1e-3
        assert (model.weights["%d.running_var" % i] > 0).all()
    x = images.astype(np.float32) / np.float32(255)
    mine = _same_as_dpt_eval(model, dpt_eval(dpt_bin, run), x, labels)
    assert mine["accuracy"] > 0.2
    cm = c_model()
    want = cm.CModel(model).predict(x)
    np.testing.assert_allclose(model.predict(x), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(model.predict(x, dtype=np.float32), want, rtol=1e-4, atol=1e-4)
    # Evaluation uses no batch statistics: a row's output does not depend on its batch.
    np.testing.assert_array_equal(cm.CModel(model, max_batch=7).predict(x), want)
    np.testing.assert_allclose(model.predict(x, batch_size=1), model.predict(x), rtol=1e-12,
                               atol=1e-12)
    if job == "sync_replicas":
        ema = dpt.load(run, weights="ema")
        assert not np.array_equal(ema.weights["1.running_var"], model.weights["1.running_var"])
        _same_as_dpt_eval(ema, dpt_eval(dpt_bin, run, "eval_ema=true"), x, labels)


def _refused(dpt_bin, conf, tmp_path, *sets):
    """dpt train's exit status and error output for a config it refuses."""
    cmd = [dpt_bin, "train", str(conf), "--quiet", "--set", "output_dir=%s" % (tmp_path / "out")]
    for s in sets:
        cmd += ["--set", s]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    return done.returncode, done.stderr


def test_batchnorm_refused(idx_dir, dpt_bin, tmp_path):
    """dpt train refuses batchnorm in the RL jobs and with reduce_op = sum."""
    from conftest import EXAMPLES

    rc, err = _refused(dpt_bin, EXAMPLES / "cartpole_ppo.conf", tmp_path,
                       "network=dense(16) bn tanh")
    assert rc == 2 and ("network: layer 2 is batchnorm, which the RL jobs do not take (only "
                        "supervised and sync_replicas)") in err, err
    d = idx_dir[0]
    conf = _conf(tmp_path / "sum.conf", job="supervised", dataset="fashion_mnist",
                 data_dir=str(d), network="conv(2,k=3) relu batchnorm flatten", epochs=1,
                 reduce_op="sum")
    rc, err = _refused(dpt_bin, conf, tmp_path)
    assert rc == 2 and "network: layer 3 is batchnorm, which needs reduce_op = avg" in err, err


@pytest.mark.parametrize("loss", ["mse", "huber"])
def test_regression_on_csv(loss, dpt_bin, tmp_path):
    rng = np.random.default_rng(6)
    x = rng.uniform(-1, 1, (700, 3)).astype(np.float32)
    y = np.stack([np.sin(2 * x[:, 0]) + x[:, 1] * x[:, 2], 2 * x[:, 1] - x[:, 2] ** 2], 1)
    y = (y + rng.normal(0, 0.05, y.shape)).astype(np.float32)
    _write_csv(tmp_path / "train.csv", x[:500], targets=y[:500])
    _write_csv(tmp_path / "test.csv", x[500:], targets=y[500:])
    conf = _conf(tmp_path / "reg.conf", job="supervised", dataset="csv", train_csv="train.csv",
                 test_csv="test.csv", loss=loss, target_columns="y0,y1", hidden="32",
                 activation="relu", epochs=20, lr=0.01, batch_size=32, num_devices=1)
    run = train(tmp_path / "run", conf)
    model = dpt.load(run)
    assert model.num_targets == 2 and model.num_classes is None and model.loss == loss
    values = model.predict(x[500:])
    assert values.shape == (200, 2)
    mine = _same_as_dpt_eval(model, dpt_eval(dpt_bin, run), x[500:], y[500:])
    assert mine["r2"] > 0.5
    with pytest.raises(ValueError, match="regression"):
        model.classify(x[500:])


# ---- a policy with an encoder ----------------------------------------------------


def test_policy_encoder(tmp_path):
    """An RL checkpoint with metadata network and obs_shape: observations go
    through the encoder, then the actor and critic, as computed here by
    direct loops."""
    rng = np.random.default_rng(9)
    w = {"encoder.0.weight": rng.normal(0, 0.5, (2, 1, 3, 3)),
         "encoder.0.bias": rng.normal(0, 0.5, 2),
         "actor.0.weight": rng.normal(0, 0.5, (8, 8)), "actor.0.bias": rng.normal(0, 0.5, 8),
         "actor.2.weight": rng.normal(0, 0.5, (3, 8)), "actor.2.bias": rng.normal(0, 0.5, 3),
         "critic.0.weight": rng.normal(0, 0.5, (8, 8)), "critic.0.bias": rng.normal(0, 0.5, 8),
         "critic.2.weight": rng.normal(0, 0.5, (1, 8)), "critic.2.bias": rng.normal(0, 0.5, 1)}
    w = {k: v.astype(np.float32) for k, v in w.items()}
    meta = {"job": "ppo", "env": "CartPole-v1", "obs_dim": "16", "action_kind": "discrete",
            "num_actions": "3", "policy_hidden": "8", "use_lstm": "false",
            "network": "conv(2,k=3,pad=1) relu maxpool(2) flatten", "obs_shape": "1,4,4"}
    path = write_checkpoint(tmp_path / "enc.safetensors",
                            {"params." + k: v for k, v in w.items()}, meta)
    policy = dpt.load(path)
    assert isinstance(policy, dpt.Policy) and policy.encoder is not None
    obs = rng.normal(size=(50, 16)).astype(np.float32)
    w64 = {k: v.astype(np.float64) for k, v in w.items()}
    h = _direct_conv(obs.reshape(50, 1, 4, 4).astype(np.float64), w64["encoder.0.weight"],
                     w64["encoder.0.bias"], (1, 1, 1, 1), (1, 1))
    feat = _direct_pool(np.maximum(h, 0), (2, 2), (0, 0, 0, 0), (2, 2), "max").reshape(50, 8)

    def head(name):
        z = np.tanh(feat @ w64[name + ".0.weight"].T + w64[name + ".0.bias"])
        return z @ w64[name + ".2.weight"].T + w64[name + ".2.bias"]

    actions, state = policy.predict(obs)
    assert state is None
    np.testing.assert_array_equal(actions, np.argmax(head("actor"), 1))
    np.testing.assert_allclose(policy.value(obs), head("critic")[:, 0], rtol=1e-12, atol=1e-12)
    # Without the metadata the same file is a policy on the raw observations,
    # whose actor does not take 16 inputs.
    plain = {k: v for k, v in meta.items() if k not in ("network", "obs_shape")}
    policy = dpt.load(write_checkpoint(tmp_path / "plain.safetensors",
                                       {"params." + k: v for k, v in w.items()}, plain))
    assert policy.encoder is None
    with pytest.raises(ValueError):
        policy.predict(obs)
    with pytest.raises(ValueError, match=r"encoder: obs_shape 1,4,5 does not hold obs_dim 16"):
        dpt.load(write_checkpoint(tmp_path / "b1.safetensors",
                                  {"params." + k: v for k, v in w.items()},
                                  {**meta, "obs_shape": "1,4,5"}))
    # An encoder with batchnorm is refused, as dpt train refuses it for the RL
    # jobs, even with the layer's variables there.
    bn = {"params." + k: v for k, v in w.items()}
    bn.update({"params.encoder.1.%s" % part: np.ones(2, np.float32)
               for part in ("weight", "bias", "running_mean", "running_var")})
    with pytest.raises(ValueError, match=r"encoder: network: layer 2 is batchnorm, which the RL "
                                         r"jobs do not take \(only supervised and "
                                         r"sync_replicas\)"):
        dpt.load(write_checkpoint(tmp_path / "bn.safetensors", bn,
                                  {**meta, "network": "conv(2,k=3,pad=1) bn relu maxpool(2) "
                                                      "flatten"}))
    bad = {"params." + k: v for k, v in w.items()}
    bad["params.encoder.0.weight"] = np.zeros((2, 2, 3, 3), np.float32)
    with pytest.raises(ValueError, match=r"encoder: variable encoder.0.weight has shape "
                                         r"\[2, 2, 3, 3\]; the layer needs \[2, 1, 3, 3\]"):
        dpt.load(write_checkpoint(tmp_path / "b2.safetensors", bad, meta))
