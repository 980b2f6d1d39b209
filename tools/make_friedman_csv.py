#!/usr/bin/env python3
"""Writes the regression example's data: Friedman's function #1 (Friedman 1991,
scikit-learn's make_friedman1) with 10 uniform features, of which the first 5
matter, plus Gaussian noise of standard deviation 1:

    y = 10 sin(pi x1 x2) + 20 (x3 - 0.5)^2 + 10 x4 + 5 x5 + noise

usage: tools/make_friedman_csv.py OUT_DIR [TRAIN_ROWS] [TEST_ROWS] [SEED]
Writes OUT_DIR/friedman1_train.csv and OUT_DIR/friedman1_test.csv (a header
x1..x10,y, then one sample per line). Standard library only; the same seed
gives the same files.
"""
import math
import os
import random
import sys


def rows(rng, n):
    for _ in range(n):
        x = [rng.random() for _ in range(10)]
        y = (10 * math.sin(math.pi * x[0] * x[1]) + 20 * (x[2] - 0.5) ** 2 + 10 * x[3] +
             5 * x[4] + rng.gauss(0.0, 1.0))
        yield x + [y]


def write(path, data):
    with open(path, "w") as f:
        f.write(",".join(["x%d" % (i + 1) for i in range(10)] + ["y"]) + "\n")
        for r in data:
            f.write(",".join("%.6f" % v for v in r) + "\n")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    n_train = int(sys.argv[2]) if len(sys.argv) > 2 else 4000
    n_test = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
    rng = random.Random(int(sys.argv[4]) if len(sys.argv) > 4 else 1)
    write(os.path.join(out, "friedman1_train.csv"), list(rows(rng, n_train)))
    write(os.path.join(out, "friedman1_test.csv"), list(rows(rng, n_test)))


if __name__ == "__main__":
    main()
