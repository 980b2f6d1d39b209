"""Reads the TensorBoard events of dpt run directories with TensorBoard's
own readers and compares every scalar with result.jsonl.

usage: tensorboard_readback.py RUN_DIR:STEP_METRIC...

For each run: the scalar tags are the metrics of result.jsonl that have a
finite value (nested names joined with '/'); each tag has one event per row
where it has a value, at the row's STEP_METRIC, holding the value rounded to
float32. Both readers are checked: the legacy EventAccumulator and the
plugin one that TensorBoard's dashboards use (scalars as tensors).
"""
import json
import math
import struct
import sys

from tensorboard.backend.event_processing import event_accumulator as legacy
from tensorboard.backend.event_processing import plugin_event_accumulator as plugin
from tensorboard.util import tensor_util


def flatten(obj, prefix=""):
    out = {}
    for key, value in obj.items():
        name = prefix + key
        if isinstance(value, dict):
            out.update(flatten(value, name + "/"))
        elif value is not None and math.isfinite(value):
            out[name] = value
    return out


def as_float32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def expected(run_dir, step_metric):
    rows = []
    with open(run_dir + "/result.jsonl") as f:
        for line in f:
            rows.append(flatten(json.loads(line)))
    want = {}
    for row in rows:
        step = int(row[step_metric])
        for name, value in row.items():
            want.setdefault(name, []).append((step, as_float32(value)))
    return want


def compare(label, got, want):
    bad = 0
    if set(got) != set(want):
        print("FAIL %s: tags differ: only in events %s, only in result.jsonl %s"
              % (label, sorted(set(got) - set(want)), sorted(set(want) - set(got))))
        bad += 1
    for tag in sorted(set(got) & set(want)):
        if got[tag] != want[tag]:
            first = next((i for i, (a, b) in enumerate(zip(got[tag], want[tag])) if a != b),
                         min(len(got[tag]), len(want[tag])))
            print("FAIL %s: %s: %d events, %d rows in result.jsonl; the first difference at "
                  "%d: %s vs %s" % (label, tag, len(got[tag]), len(want[tag]), first,
                                    got[tag][first:first + 1], want[tag][first:first + 1]))
            bad += 1
    return bad


def main(args):
    passed = failed = 0
    for arg in args:
        run_dir, step_metric = arg.rsplit(":", 1)
        want = expected(run_dir, step_metric)

        acc = legacy.EventAccumulator(run_dir, size_guidance={legacy.SCALARS: 0})
        acc.Reload()
        got = {tag: [(e.step, e.value) for e in acc.Scalars(tag)]
               for tag in acc.Tags()[legacy.SCALARS]}
        bad = compare(run_dir + " (EventAccumulator)", got, want)

        acc = plugin.EventAccumulator(run_dir, size_guidance={plugin.TENSORS: 0})
        acc.Reload()
        got = {}
        for tag in acc.Tags()[plugin.TENSORS]:
            got[tag] = [(e.step, float(tensor_util.make_ndarray(e.tensor_proto)))
                        for e in acc.Tensors(tag)]
        bad += compare(run_dir + " (plugin EventAccumulator)", got, want)

        rows = len(want[step_metric])
        if bad:
            failed += 1
        else:
            passed += 1
            print("ok   %s: %d tags x %d steps read back by TensorBoard"
                  % (run_dir, len(want), rows))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
