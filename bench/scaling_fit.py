#!/usr/bin/env python3
"""Fit the alpha-beta model of dpt's allreduce at P = 2 (docs/SCALING.md).

Reads the JSON lines of `dpt bench allreduce --json` written by
bench/scaling_run.sh (OUTDIR/threads.jsonl, mpi-shm.jsonl, mpi-tcp.jsonl),
fits t(n) = a + b * n per transport, algorithm and size segment on the
TRAINING sizes (n = 4^k bytes: even powers of 2) and predicts the HELD-OUT
sizes (odd powers of 2), printing the fitted parameters and each held-out
prediction's relative error. Python 3 standard library only.

    python3 bench/scaling_fit.py OUTDIR [--breaks LABEL[:ALG]=B1,B2,...]...
                                        [--compute-ms MODEL=MS]...

--compute-ms gives a model's measured compute time per step on one rank
(MODEL is "mlp" for 784-256-128-10, 235,146 parameters, or "mlp25m" for
784-4096-4096-1280-10, 25,253,642 parameters); with it the script projects
the step time to 8..1024 ranks on the NETWORKS below (datasheet figures).

Breaks split a transport's sizes into segments [B_i, B_i+1) fitted
separately, where a protocol switch or the last-level cache changes the
slope; the defaults (BREAKS below) are where this machine's curves bend.
The fit minimises the squared RELATIVE error (weights 1/t^2), so small and
large messages count alike. At P = 2 every algorithm is linear in n:
  ring:   t = 2(P-1) alpha + 2(P-1)/P n beta      = 2 alpha + n beta
  tree:   t = log2(P) (alpha + n beta)            =   alpha + n beta
  native: t = a + b n (threads: 2 barriers + one pass over P buffers;
          MPI: the library's MPI_Iallreduce)
where beta also holds the reduction's cost per byte (gamma; one P cannot
separate the two).
"""
import json
import os
import sys

STEPS = {"ring": 2.0, "tree": 1.0, "native": 1.0}  # alpha terms at P = 2
# threads: small-message path up to 8 KiB; 2 x 2 buffers of >= 16 MiB leave the
# 32 MiB L3. MPI: Open MPI's eager/rendezvous switches and the same L3 edge.
BREAKS = {
    "threads": [16384, 16777216],
    "mpi-shm": [4096, 16777216],
    "mpi-tcp": [65536, 16777216],
}
BYTE_FACTOR = {"ring": 1.0, "tree": 1.0, "native": 1.0}  # n beta terms at P = 2


def load(path):
    rows = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            if r.get("participants", 2) != 2 and "mpi" not in r["backend"]:
                continue
            rows.setdefault(r["algorithm"], []).append((r["bytes"], r["time_us"]))
    return rows


def fit(points):
    # minimise sum ((a + b n - t) / t)^2
    s00 = s01 = s11 = r0 = r1 = 0.0
    for n, t in points:
        w = 1.0 / (t * t)
        s00 += w
        s01 += w * n
        s11 += w * n * n
        r0 += w * t
        r1 += w * t * n
    det = s00 * s11 - s01 * s01
    if abs(det) < 1e-300:
        return None
    a = (r0 * s11 - r1 * s01) / det
    b = (s00 * r1 - s01 * r0) / det
    return a, b


# Published figures: line rate, and the adapter's latency (NVIDIA ConnectX-6
# user manual / product brief: InfiniBand HDR "sub-600ns", Ethernet "sub
# 0.8usec"). The software's own cost per step is added from the fit: alpha of
# MPI ring over shared memory for InfiniBand verbs; for Ethernet the TCP
# stack's, from MPI native over loopback TCP (one exchange at P = 2).
NETWORKS = [
    ("25GbE, TCP", 25e9 / 8, 0.8, ("mpi-tcp", "native"), 1.0),
    ("100GbE, TCP", 100e9 / 8, 0.8, ("mpi-tcp", "native"), 1.0),
    ("IB HDR100 (100 Gb/s)", 100e9 / 8, 0.6, ("mpi-shm", "ring"), 2.0),
    ("IB HDR (200 Gb/s)", 200e9 / 8, 0.6, ("mpi-shm", "ring"), 2.0),
]
MODELS = {"mlp": 235146, "mlp25m": 25253642}


def project(fits, compute_ms):
    """Ring allreduce over P ranks, one rank per node:
    t = 2(P-1) (alpha_net + alpha_sw) + 2(P-1)/P n (1/bw + gamma)
    gamma = the reduction's cost per byte, taken from the threads ring fit
    (memory-bound adds on this CPU)."""
    print("\n## projected step time, ring allreduce, 1 rank per node")
    for model, ms in compute_ms.items():
        nbytes = 4 * MODELS[model]
        segs = fits.get(("threads", "ring"), [])
        seg = [x for x in segs if x[0] <= nbytes < x[1]]
        gamma = seg[0][3] if seg else 0.0  # us per byte
        print(f"gamma (threads ring fit, segment of {nbytes} B) = {gamma * 1e3:.4f} ns/B")
        print(f"\n{model}: {MODELS[model]} parameters, {nbytes} bytes; compute {ms:.3f} ms/step")
        print(f"{'network':>22} {'alpha_us':>8} " + " ".join(f"{'P=' + str(p):>9}" for p in PS))
        for name, bw, lat, sw, steps in NETWORKS:
            segs = fits.get(sw)
            if not segs:
                continue
            alpha = lat + segs[0][2] / steps  # per step: datasheet + software
            cells = []
            for p in PS:
                t_us = 2 * (p - 1) * alpha + 2 * (p - 1) / p * nbytes * (1e6 / bw + gamma)
                cells.append(f"{ms + t_us / 1e3:9.2f}")
            print(f"{name:>22} {alpha:8.2f} " + " ".join(cells))
    print("(ms per step = compute + allreduce, no overlap; P ranks each with the same batch)")


PS = [8, 16, 64, 256, 1024]


def is_train(n):
    k = n.bit_length() - 1
    return k % 2 == 0


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    out = argv[1]
    breaks = dict(BREAKS)
    compute_ms = {}
    k = 2
    while k + 1 < len(argv):
        key, _, val = argv[k + 1].partition("=")
        if argv[k] == "--breaks":
            breaks[key] = [int(x) for x in val.split(",") if x]
        elif argv[k] == "--compute-ms" and key in MODELS:
            compute_ms[key] = float(val)
        else:
            print(__doc__)
            return 2
        k += 2
    fits = {}
    worst_all = {}
    for label in ("threads", "mpi-shm", "mpi-tcp"):
        path = os.path.join(out, label + ".jsonl")
        if not os.path.exists(path):
            continue
        data = load(path)
        for alg in ("native", "ring", "tree"):
            pts = sorted(data.get(alg, []))
            if not pts:
                continue
            edges = [0] + breaks.get(label + ":" + alg, breaks.get(label, [])) + [1 << 62]
            print(f"\n## {label} {alg} (P = 2)")
            print(f"{'segment':>22} {'a_us':>9} {'b_ns/B':>9} {'alpha_us':>9} {'1/beta_GB/s':>12}")
            models = []
            for lo, hi in zip(edges, edges[1:]):
                seg = [(n, t) for n, t in pts if lo <= n < hi]
                train = [(n, t) for n, t in seg if is_train(n)]
                if len(train) < 2:
                    continue
                ab = fit(train)
                if ab is None:
                    continue
                a, b = ab
                models.append((lo, hi, a, b))
                alpha = a / STEPS[alg]
                beta = b / BYTE_FACTOR[alg]  # us per byte
                bw = 1e-3 / beta if beta > 0 else float("inf")
                hi_s = str(hi) if hi < (1 << 62) else "inf"
                print(f"{'[' + str(lo) + ', ' + hi_s + ')':>22} {a:9.3f} {b * 1e3:9.4f} "
                      f"{alpha:9.3f} {bw:12.2f}")
            print(f"{'held-out bytes':>14} {'measured_us':>12} {'predicted_us':>12} {'error':>8}")
            worst = 0.0
            for n, t in pts:
                if is_train(n):
                    continue
                m = [x for x in models if x[0] <= n < x[1]]
                if not m:
                    continue
                _, _, a, b = m[0]
                p = a + b * n
                e = (p - t) / t
                worst = max(worst, abs(e))
                print(f"{n:14d} {t:12.3f} {p:12.3f} {e * 100:7.1f}%")
            print(f"max held-out error: {worst * 100:.1f}%")
            worst_all[(label, alg)] = worst
            fits[(label, alg)] = models
    if not worst_all:
        print("no benchmark output in " + out)
        return 1
    print("\n## max held-out relative error")
    for (label, alg), w in worst_all.items():
        print(f"{label:8} {alg:7} {w * 100:6.1f}%")
    if compute_ms:
        project(fits, compute_ms)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
