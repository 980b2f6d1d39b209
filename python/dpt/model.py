"""The model of a dpt supervised checkpoint (jobs supervised and
sync_replicas), rebuilt from the checkpoint alone with numpy.

    model = dpt.load("runs/supervised-fashion_mnist-20261123-101500")
    logits = model.predict(x)         # x [N, C, H, W] or [N, C*H*W] -> [N, classes]
    model.classify(x)                 # the arg-max class of each row
    model.evaluate(x, labels)         # {"samples", "loss", "accuracy"}, as dpt eval
    model.weights["0.weight"]         # the variables, as numpy arrays

The checkpoint's metadata says what to build: `network` (docs/MODELS.md)
with `input_shape` "C,H,W", or for the MLP of `hidden` `layers`
("in,h1,...,out") and `activation`; then `input_dim`, `num_classes` (or
`num_targets` for a regression) and `loss`. The job's own output layer, a
dense layer of one output per class or target, follows the network's layers
and is named by the next position. The variables are the tensors
params.<name>, or with weights="ema" the moving average a sync_replicas run
with ema_decay > 0 keeps as ema.<name>.

Inputs are what dpt's loaders give the C model: IDX pixels divided by 255,
CSV features as they are in the file. The forward pass runs in double
precision by default (dtype=np.float32 for speed), so its outputs differ
from dpt's float32 ones by float32 rounding: about 1e-6 relative on the
models of the tests, and the mean test loss within 1e-5; the classes are the
same except for rows whose two best scores are that close.
"""
import os

import numpy as np

from .network import LayerSpec, Network, parse, shape_of
from .policy import SUPERVISED_JOBS, find_checkpoint

__all__ = ["Model"]

LOSSES = ("softmax_xent", "mse", "huber")


def _mlp_layers(path, meta):
    """The layers of the MLP of `layers` and `activation`, its input shape
    and its output size."""
    try:
        sizes = [int(s) for s in meta["layers"].split(",")]
        act = meta["activation"]
    except (KeyError, ValueError) as e:
        raise ValueError("checkpoint %s: no valid layers and activation metadata (%s)" %
                         (path, e)) from None
    if len(sizes) < 2 or min(sizes) < 1 or act not in ("relu", "tanh"):
        raise ValueError("checkpoint %s: layers %r and activation %r do not describe an MLP" %
                         (path, meta["layers"], act))
    layers = []
    for h in sizes[1:-1]:
        layers += [LayerSpec("dense", out=h), LayerSpec(act)]
    return layers, (sizes[0], 1, 1), sizes[-1]


class Model:
    """The model of a supervised or sync_replicas checkpoint file or run
    directory (its newest valid checkpoint); weights "params" (default) or
    "ema"."""

    def __init__(self, path, weights="params", _found=None):
        self.path, tensors, meta = _found or find_checkpoint(os.fspath(path))
        self.meta = meta
        self.job = meta.get("job")
        if self.job not in SUPERVISED_JOBS:
            raise ValueError("checkpoint %s is a %s checkpoint, not a supervised model" %
                             (self.path, self.job or "job-less"))
        if "model" in meta:
            raise ValueError("checkpoint %s holds a model plug-in's variables (%s): only the "
                             "plug-in computes its forward pass" % (self.path, meta["model"]))
        if meta.get("dataset") == "bags":
            raise ValueError("checkpoint %s: the bags dataset's embedding model is not rebuilt "
                             "in Python" % self.path)
        self.loss = meta.get("loss", "softmax_xent")
        if self.loss not in LOSSES:
            raise ValueError("checkpoint %s: unknown loss %r" % (self.path, self.loss))
        try:
            self.input_dim = int(meta["input_dim"])
            key = "num_targets" if "num_targets" in meta else "num_classes"
            self.outputs = int(meta[key])
        except (KeyError, ValueError) as e:
            raise ValueError("checkpoint %s has no valid metadata %s: not a dpt supervised "
                             "checkpoint" % (self.path, e)) from None
        self.regression = key == "num_targets"
        self.num_targets = self.outputs if self.regression else None
        self.num_classes = None if self.regression else self.outputs
        self.network_text = meta.get("network", "")
        try:
            if self.network_text:
                layers = parse(self.network_text)
                self.input_shape = shape_of(meta.get("input_shape", ""))
            else:
                layers, self.input_shape, out = _mlp_layers(self.path, meta)
                if out != self.outputs:
                    raise ValueError("layers %s end in %d outputs, not %d" %
                                     (meta["layers"], out, self.outputs))
            if int(np.prod(self.input_shape)) != self.input_dim:
                raise ValueError("input_shape %s does not hold input_dim %d values" %
                                 (meta.get("input_shape"), self.input_dim))
            self.layers = layers + [LayerSpec("dense", out=self.outputs)]
        except ValueError as e:
            raise ValueError("checkpoint %s: %s" % (self.path, e)) from None
        if weights not in ("params", "ema"):
            raise ValueError('weights=%r: "params" (the variables) or "ema" (their moving '
                             'average)' % (weights,))
        prefix = weights + "."
        self.weights = {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}
        if not self.weights:
            raise ValueError("checkpoint %s has no %s tensors%s" %
                             (self.path, prefix,
                              " (a sync_replicas run keeps them with ema_decay > 0)"
                              if weights == "ema" else ""))
        try:
            self.net = Network(self.layers, self.input_shape, self.weights)
        except ValueError as e:
            raise ValueError("checkpoint %s: %s" % (self.path, e)) from None

    def __repr__(self):
        what = ("%d targets (%s)" % (self.outputs, self.loss) if self.regression
                else "%d classes" % self.outputs)
        shape = "x".join(str(d) for d in self.input_shape)
        return "<dpt.Model %s: %s, %s -> %s>" % (self.path, self.job, shape, what)

    def _rows(self, x):
        """x as [N, C, H, W], or ValueError naming the shapes it may have."""
        x = np.asarray(x)
        c, h, w = self.input_shape
        if x.ndim == 2 and x.shape[1] == self.input_dim:
            return x.reshape((len(x),) + self.input_shape)
        if x.ndim == 4 and x.shape[1:] == self.input_shape:
            return x
        if x.ndim == 3 and c == 1 and x.shape[1:] == (h, w):
            return x[:, None]
        image = (h, w) != (1, 1)
        raise ValueError("input of shape %s; the model takes [N, %d]%s" %
                         (list(x.shape), self.input_dim,
                          " or [N, %d, %d, %d]" % self.input_shape if image else ""))

    def predict(self, x, batch_size=1024, dtype=np.float64):
        """The outputs [N, classes] (logits: class scores before the softmax)
        or [N, targets] of the rows of x: [N, C*H*W] or [N, C, H, W] (or
        [N, H, W] when C = 1), computed in dtype, batch_size rows at a time."""
        x = self._rows(x)
        if len(x) == 0:
            return np.zeros((0, self.outputs), dtype)
        step = max(int(batch_size), 1)
        return np.concatenate([self.net.forward(x[i:i + step], dtype)
                               for i in range(0, len(x), step)])

    def classify(self, x, **kw):
        """The class of each row of x (the arg-max of its logits, the first
        on ties, as dpt counts correct rows): int64 [N]."""
        if self.regression:
            raise ValueError("checkpoint %s is a regression (%d targets): use predict" %
                             (self.path, self.outputs))
        return np.argmax(self.predict(x, **kw), axis=1)

    def evaluate(self, x, y, **kw):
        """The figures `dpt eval` prints for rows x with labels y [N] (a
        classification) or targets y [N, targets]: samples, loss (the
        checkpoint's) and accuracy, or for a regression loss, rmse, mae and
        r2 (per target, averaged)."""
        out = self.predict(x, **kw).astype(np.float64)
        n = len(out)
        if n == 0:
            raise ValueError("evaluate: no rows")
        if not self.regression:
            labels = np.asarray(y).reshape(-1).astype(np.int64)
            if labels.shape != (n,) or labels.min() < 0 or labels.max() >= self.outputs:
                raise ValueError("evaluate: labels must be [%d] integers in [0, %d)" %
                                 (n, self.outputs))
            zmax = out.max(axis=1, keepdims=True)
            lse = zmax[:, 0] + np.log(np.exp(out - zmax).sum(axis=1))
            loss = float(np.mean(lse - out[np.arange(n), labels]))
            correct = int((np.argmax(out, axis=1) == labels).sum())
            return {"samples": n, "loss": loss, "accuracy": correct / n, "correct": correct}
        t = np.asarray(y, np.float64).reshape(n, -1)
        if t.shape[1] != self.outputs:
            raise ValueError("evaluate: targets of shape %s; the model predicts [%d, %d]" %
                             (list(np.shape(y)), n, self.outputs))
        e = out - t
        a = np.abs(e)
        loss = np.mean(np.where(a <= 1.0, 0.5 * e * e, a - 0.5)) if self.loss == "huber" \
            else np.mean(e * e)
        ss_tot = ((t - t.mean(axis=0)) ** 2).sum(axis=0)
        ss_res = (e * e).sum(axis=0)
        r2 = np.where(ss_tot > 0, 1.0 - ss_res / np.where(ss_tot > 0, ss_tot, 1.0),
                      (ss_res == 0).astype(np.float64))
        return {"samples": n, "loss": float(loss), "rmse": float(np.sqrt(np.mean(e * e))),
                "mae": float(np.mean(a)), "r2": float(np.mean(r2))}
