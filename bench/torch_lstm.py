#!/usr/bin/env python3
"""PyTorch nn.LSTM forward + backward time: the counterpart of `dpt bench lstm`.

    python3 bench/torch_lstm.py [--hidden H]... [--batch B] [--seq T]
                                [--input I] [--threads N] [--seconds S]

The same work per iteration as dpt's benchmark: clear the gradients, run the
forward pass over a time-major batch x [T, B, I] (which requires a gradient,
as dpt computes dx) from a given state (h0, c0), and the backward pass of a
gradient for every step's output into the weights and x. N is torch's
intra-op thread count (torch.set_num_threads). Every iteration is timed on
its own after 3 warm-up iterations; the cell sizes take turns in 5 rounds of
S / (5 * sizes) seconds each. Prints a comment line, then one JSON line per
cell size with the median and minimum milliseconds and
GFLOP/s = 6 T B 4H (I + H) / median (the matrix products only, as dpt counts).
Without torch it prints "skipped: no torch" and exits 0.
"""
import argparse
import json
import statistics
import sys
import time

ROUNDS = 5
WARMUP = 3


def parse_args():
    ap = argparse.ArgumentParser(description="PyTorch nn.LSTM forward + backward time")
    ap.add_argument("--hidden", type=int, action="append", help="cell size (repeatable; default 64 and 256)")
    ap.add_argument("--batch", type=int, default=64, help="sequences per batch")
    ap.add_argument("--seq", type=int, default=20, help="steps per sequence")
    ap.add_argument("--input", type=int, default=16, help="input features")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--seconds", type=float, default=4.0, help="timed seconds in all")
    a = ap.parse_args()
    a.hidden = a.hidden or [64, 256]
    if min(a.hidden + [a.batch, a.seq, a.input, a.threads]) < 1 or not a.seconds > 0:
        ap.error("sizes and --threads must be at least 1, --seconds above 0")
    return a


def main():
    a = parse_args()
    try:
        import torch
    except ImportError:
        print("skipped: no torch")
        return 0
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    cfgs = []
    for h in a.hidden:
        cfgs.append({
            "hidden": h,
            "lstm": torch.nn.LSTM(a.input, h),  # batch_first=False: [T, B, I]
            "x": torch.empty(a.seq, a.batch, a.input).uniform_(-1, 1).requires_grad_(),
            "h0": torch.empty(1, a.batch, h).uniform_(-0.5, 0.5),
            "c0": torch.empty(1, a.batch, h).uniform_(-0.5, 0.5),
            "dy": torch.empty(a.seq, a.batch, h).uniform_(-1, 1),
            "times": [],
            "fwd": [],
        })

    def step(c):
        t0 = time.perf_counter()
        for p in c["lstm"].parameters():
            p.grad = None  # what optimizer.zero_grad() does by default
        c["x"].grad = None
        y, _ = c["lstm"](c["x"], (c["h0"], c["c0"]))
        t1 = time.perf_counter()
        y.backward(c["dy"])
        t2 = time.perf_counter()
        return t2 - t0, t1 - t0

    for c in cfgs:
        for _ in range(WARMUP):
            step(c)
    slice_s = a.seconds / (ROUNDS * len(cfgs))
    for _ in range(ROUNDS):
        for c in cfgs:
            end = time.perf_counter() + slice_s
            while True:
                total, fwd = step(c)
                c["times"].append(total)
                c["fwd"].append(fwd)
                if time.perf_counter() >= end:
                    break

    print("# torch %s, %d thread(s), mkldnn %s" % (torch.__version__, torch.get_num_threads(),
                                                  torch.backends.mkldnn.is_available()))
    for c in cfgs:
        h = c["hidden"]
        med = statistics.median(c["times"])
        flop = 6.0 * a.seq * a.batch * 4 * h * (a.input + h)
        print(json.dumps({
            "impl": "torch",
            "hidden": h,
            "batch": a.batch,
            "seq": a.seq,
            "input": a.input,
            "threads": a.threads,
            "iters": len(c["times"]),
            "median_ms": round(med * 1e3, 4),
            "min_ms": round(min(c["times"]) * 1e3, 4),
            "fwd_ms": round(statistics.median(c["fwd"]) * 1e3, 4),
            "gflops": round(flop / med * 1e-9, 2),
        }, separators=(",", ":")))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
