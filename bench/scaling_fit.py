#!/usr/bin/env python3
"""Fit the alpha-beta model of dpt's allreduce at P = 2 (docs/SCALING.md).

Reads the JSON lines of `dpt bench allreduce --json` written by
bench/scaling_run.sh (OUTDIR/threads.jsonl, mpi-shm.jsonl, mpi-tcp.jsonl),
fits t(n) = a + b * n per transport, algorithm and size segment on the
TRAINING sizes (n = 2^k bytes, 4 B .. 64 MiB) and predicts the HELD-OUT sizes
(n = 3 * 2^k, 12 B .. 48 MiB: one between every two training sizes, never
seen by the fit), printing the fitted parameters and each held-out
prediction's relative error. A size measured in several rounds counts with
its fastest round's median: a shared machine only ever adds time, and a
disturbed stretch hits one round, not all. Python 3 standard library only.

    python3 bench/scaling_fit.py OUTDIR [--breaks LABEL[:ALG]=B1,B2,...]...
                                        [--compute-ms MODEL=MS]...

--compute-ms gives a model's measured compute time per step on one rank
(MODEL is "mlp" for 784-256-128-10, 235,146 parameters, or "mlp25m" for
784-4096-4096-1280-10, 25,253,642 parameters); with it the script projects
the step time to 8..1024 ranks on the NETWORKS below (datasheet figures).

The curve bends where the buffers leave the caches and jumps where the
transport changes protocol (Open MPI's eager limit, 4 KiB over shared
memory: the ring's halves cross it between 6 and 8 KiB, the tree's whole
buffers between 3 and 4 KiB), so the model is piecewise: segments between
knots K_1 < K_2 < ..., each with its own alpha and beta:
  t = a + b n + sum_i c_i max(0, n - K_i) + sum_j d_j [n >= J_j]
(beta changes by c_i at K_i; alpha jumps by d_j at J_j). The knots are
chosen from the TRAINING sizes alone, greedily: at each step the change
(a bend, a jump, or both at one training size) that lowers the summed
squared relative error plus PENALTY per term the most is made, as long as
it lowers it, every segment staying at least MIN_OCTAVES octaves long; a
term must remove as much error as one training size off by 20%. A jump
takes effect at the first training size that shows it. --breaks
LABEL[:ALG]=K1,K2,... fixes bends (no jumps) instead. Every fit minimises
the squared RELATIVE error (weights 1/t^2), so small and large messages
count alike.

At P = 2 every algorithm is linear in n:
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
PENALTY = 0.04  # squared relative error a knot must remove: one size off by 20%
MIN_OCTAVES = 2  # shortest segment between knots (3 training sizes)
BYTE_FACTOR = {"ring": 1.0, "tree": 1.0, "native": 1.0}  # n beta terms at P = 2


def load(path):
    best = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            if r.get("participants", 2) != 2 and "mpi" not in r["backend"]:
                continue
            key = (r["algorithm"], r["bytes"])
            best[key] = min(best.get(key, r["time_us"]), r["time_us"])
    rows = {}
    for (alg, n), t in best.items():
        rows.setdefault(alg, []).append((n, t))
    return rows


def solve(rows, rhs):
    """Least squares min |rows x - rhs| by the normal equations on
    column-scaled rows (a handful of columns), Gaussian elimination with
    partial pivoting. None when singular."""
    m = len(rows[0])
    scale = [max(abs(r[j]) for r in rows) or 1.0 for j in range(m)]
    cols = [[r[j] / scale[j] for j in range(m)] for r in rows]
    ata = [[sum(c[i] * c[j] for c in cols) for j in range(m)] for i in range(m)]
    atb = [sum(c[i] * y for c, y in zip(cols, rhs)) for i in range(m)]
    for k in range(m):
        piv = max(range(k, m), key=lambda i: abs(ata[i][k]))
        if abs(ata[piv][k]) < 1e-14:
            return None
        ata[k], ata[piv] = ata[piv], ata[k]
        atb[k], atb[piv] = atb[piv], atb[k]
        for i in range(k + 1, m):
            f = ata[i][k] / ata[k][k]
            for j in range(k, m):
                ata[i][j] -= f * ata[k][j]
            atb[i] -= f * atb[k]
    x = [0.0] * m
    for k in reversed(range(m)):
        x[k] = (atb[k] - sum(ata[k][j] * x[j] for j in range(k + 1, m))) / ata[k][k]
    return [x[j] / scale[j] for j in range(m)]


# A knot is (size, kind): kind "bend" adds max(0, n - size) (beta changes),
# "jump" adds [n >= size] (alpha changes).
def basis(n, knots):
    return [1.0, float(n)] + [
        float(max(0, n - k)) if kind == "bend" else float(n >= k) for k, kind in knots
    ]


def fit(points, knots=()):
    """The piecewise line through `points` with these knots, minimising the
    squared relative error: its coefficients, or None."""
    rows = [[v / t for v in basis(n, knots)] for n, t in points]
    return solve(rows, [1.0] * len(points))


def predict(coef, knots, n):
    return sum(c * v for c, v in zip(coef, basis(n, knots)))


def sq_rel_err(points, coef, knots):
    return sum(((predict(coef, knots, n) - t) / t) ** 2 for n, t in points)


def choose_knots(train):
    """Knots from the training points alone (see the docstring): greedy on
    the summed squared relative error plus PENALTY per term."""
    sizes = [n for n, _ in train]
    knots = []
    coef = fit(train)
    if coef is None:
        return knots, coef
    cost = sq_rel_err(train, coef, knots)
    while True:
        best = None
        for k in sizes[1:]:
            # a bend, a jump, or both (a segment of its own)
            for kinds in (("bend",), ("jump",), ("bend", "jump")):
                if any((k, kind) in knots for kind in kinds):
                    continue
                edges = sorted(set([sizes[0], sizes[-1]] + [x for x, _ in knots] + [k]))
                if any(hi < lo * (1 << MIN_OCTAVES) for lo, hi in zip(edges, edges[1:])):
                    continue
                trial = sorted(knots + [(k, kind) for kind in kinds])
                c = fit(train, trial)
                if c is None:
                    continue
                e = sq_rel_err(train, c, trial) + PENALTY * len(trial)
                if best is None or e < best[0]:
                    best = (e, trial, c)
        if best is None or best[0] >= cost:
            return knots, coef
        cost, knots, coef = best


def segments(coef, knots):
    """(lo, hi, a, b): the line a + b n of each segment between knots."""
    out = []
    edges = [0] + sorted(set(k for k, _ in knots)) + [1 << 62]
    for lo, hi in zip(edges, edges[1:]):
        a, b = coef[0], coef[1]
        for j, (k, kind) in enumerate(knots):
            if k > lo:
                continue
            if kind == "bend":
                a -= coef[2 + j] * k
                b += coef[2 + j]
            else:
                a += coef[2 + j]
        out.append((lo, hi, a, b))
    return out


# Published figures: line rate, and the adapter's latency (NVIDIA ConnectX-6
# user manual / product brief: InfiniBand HDR "sub-600ns", Ethernet "sub
# 0.8usec"). The software's own cost per step is added from the fit: alpha of
# MPI ring over shared memory for InfiniBand verbs; for Ethernet the TCP
# stack's, from dpt's tree over loopback TCP (one exchange at P = 2).
NETWORKS = [
    ("25GbE, TCP", 25e9 / 8, 0.8, ("mpi-tcp", "tree"), 1.0),
    ("100GbE, TCP", 100e9 / 8, 0.8, ("mpi-tcp", "tree"), 1.0),
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
    return n & (n - 1) == 0  # a power of 2


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    out = argv[1]
    breaks = {}
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
            train = [(n, t) for n, t in pts if is_train(n)]
            fixed = breaks.get(label + ":" + alg, breaks.get(label))
            if fixed is None:
                knots, coef = choose_knots(train)
            else:
                knots = [(k, "bend") for k in sorted(fixed)]
                coef = fit(train, knots)
            if coef is None:
                continue
            print(f"\n## {label} {alg} (P = 2)")
            print(f"{'segment':>22} {'a_us':>9} {'b_ns/B':>9} {'alpha_us':>9} {'1/beta_GB/s':>12}")
            models = segments(coef, knots)
            for lo, hi, a, b in models:
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
                p = predict(coef, knots, n)
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
