#!/usr/bin/env python3
"""PyTorch training samples/s of two small CNNs: the counterpart of `dpt bench cnn`.

    python3 bench/torch_cnn.py [--net fashion|minatar]... [--threads N]
                               [--batch B] [--seconds S] [--rounds R]

The same work per step as dpt's benchmark, on the CPU with N intra-op threads
(torch.set_num_threads):

  fashion  Conv2d(1, 32, 3, padding=1) ReLU MaxPool2d(2) Conv2d(32, 64, 3,
           padding=1) ReLU MaxPool2d(2) Flatten Linear(3136, 128) ReLU
           Linear(128, 10) on [1, 28, 28] inputs, batch 256: forward,
           cross-entropy, backward, Adam (lr 1e-3); the accuracy of the batch
           is counted, as dpt's loss does.
  minatar  Pgx's MinAtar policy on [4, 10, 10] inputs, batch 512: the encoder
           Conv2d(4, 32, 2, padding='same') ReLU AvgPool2d(2) Flatten
           Linear(800, 64) ReLU under an actor Linear(64, 64) Tanh
           Linear(64, 64) Tanh Linear(64, 6) and a critic of the same hidden
           layers with 1 output (dpt's heads: tanh after each hidden layer,
           orthogonal init); one PPO minibatch step with dpt's loss
           (src/rl/policy.c, dpt__policy_ppo_core; dpt's defaults clip 0.2,
           value clip 0.2, value coefficient 0.5, entropy coefficient 0.01):
             ratio = exp(logp - logp_old)
             L_pi  = mean(max(-A ratio, -A clip(ratio, 1 - 0.2, 1 + 0.2)))
             V_c   = V_old + clip(V - V_old, -0.2, 0.2)
             L_v   = 0.5 mean(max((V - R)^2, (V_c - R)^2))
             L     = L_pi - 0.01 mean(H) + 0.5 L_v
           then backward and Adam (lr 1e-3) over all the parameters; the
           approximate KL and the clip fraction are computed as dpt's step
           reports them. padding='same' with the even kernel pads the extra
           row and column at the bottom and right, as XLA's SAME and dpt's
           pad=same do (checked at start).

Data: random with a fixed seed, 4 minibatches stepped in turn, 3 warm-up steps.
Each round times every selected network for S/R seconds in turn; the figure
is the median over the R rounds of samples/s. Prints a comment line, then one
JSON line per network. Without torch it prints "skipped: no torch" and exits 0.
"""
import argparse
import ctypes
import json
import math
import statistics
import sys
import time
import warnings

NETS = {"fashion": 256, "minatar": 512}  # name: default batch
MINIBATCHES = 4
WARMUP = 3
LR = 1e-3
ACTIONS = 6
CLIP, VF_CLIP, VF_COEF, ENT_COEF = 0.2, 0.2, 0.5, 0.01


def parse_args():
    ap = argparse.ArgumentParser(description="PyTorch CNN training samples/s")
    ap.add_argument("--net", action="append", choices=sorted(NETS),
                    help="workload (repeatable; default both)")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--batch", type=int, default=0, help="rows per step (default: 256, 512)")
    ap.add_argument("--seconds", type=float, default=7.0, help="timed seconds per network")
    ap.add_argument("--rounds", type=int, default=7, help="rounds (the median is taken)")
    a = ap.parse_args()
    a.net = a.net or ["fashion", "minatar"]
    if a.threads < 1 or a.batch < 0 or a.rounds < 1 or not a.seconds > 0:
        ap.error("--threads and --rounds must be at least 1, --seconds above 0")
    return a


def openblas_core():
    """The kernel OpenBLAS chose (torch's dense layers go through it), or '?'."""
    try:
        lib = ctypes.CDLL("libopenblas.so.0")
        lib.openblas_get_corename.restype = ctypes.c_char_p
        return lib.openblas_get_corename().decode()
    except (OSError, AttributeError):
        return "?"


def check_same_padding(torch):
    """padding='same' of a 2x2 kernel must pad the bottom and right (dpt's)."""
    F = torch.nn.functional
    conv = torch.nn.Conv2d(4, 32, 2, padding="same")
    x = torch.randn(2, 4, 10, 10)
    with torch.no_grad():
        same = conv(x)
        ref = F.conv2d(F.pad(x, (0, 1, 0, 1)), conv.weight, conv.bias)
    if not torch.equal(same, ref):
        raise SystemExit("torch_cnn.py: padding='same' does not pad bottom and right here")


def fashion(torch, batch):
    nn = torch.nn
    F = nn.functional
    model = nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    data = [(torch.rand(batch, 1, 28, 28), torch.randint(0, 10, (batch,)))
            for _ in range(MINIBATCHES)]

    def step(k):
        x, y = data[k % MINIBATCHES]
        opt.zero_grad(set_to_none=True)
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        loss.backward()
        opt.step()
        with torch.no_grad():
            (logits.argmax(1) == y).sum()

    return step


def head(nn, out, gain):
    layers = [nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, out)]
    for layer, g in zip(layers[::2], (math.sqrt(2.0), math.sqrt(2.0), gain)):
        nn.init.orthogonal_(layer.weight, g)
        nn.init.zeros_(layer.bias)
    return nn.Sequential(*layers)


def minatar_data(torch, batch):
    return [{
        "obs": torch.randint(0, 2, (batch, 4, 10, 10)).float(),
        "act": torch.randint(0, ACTIONS, (batch,)),
        "logp": -math.log(ACTIONS) + 0.1 * torch.randn(batch),
        "adv": torch.randn(batch),
        "ret": torch.randn(batch),
        "val": torch.randn(batch),
    } for _ in range(MINIBATCHES)]


def minatar(torch, batch):
    nn = torch.nn
    F = nn.functional
    encoder = nn.Sequential(
        nn.Conv2d(4, 32, 2, padding="same"), nn.ReLU(), nn.AvgPool2d(2),
        nn.Flatten(), nn.Linear(32 * 5 * 5, 64), nn.ReLU())
    actor, critic = head(nn, ACTIONS, 0.01), head(nn, 1, 1.0)
    params = [*encoder.parameters(), *actor.parameters(), *critic.parameters()]
    opt = torch.optim.Adam(params, lr=LR)
    data = minatar_data(torch, batch)

    def step(k):
        d = data[k % MINIBATCHES]
        opt.zero_grad(set_to_none=True)
        feat = encoder(d["obs"])
        logp_all = F.log_softmax(actor(feat), dim=1)
        value = critic(feat).squeeze(1)
        logp = logp_all.gather(1, d["act"].unsqueeze(1)).squeeze(1)
        entropy = -(logp_all.exp() * logp_all).sum(1)
        log_ratio = logp - d["logp"]
        ratio = log_ratio.exp()
        adv = d["adv"]
        pg = torch.max(-adv * ratio, -adv * ratio.clamp(1 - CLIP, 1 + CLIP)).mean()
        v_clip = d["val"] + (value - d["val"]).clamp(-VF_CLIP, VF_CLIP)
        vf = 0.5 * torch.max((value - d["ret"]) ** 2, (v_clip - d["ret"]) ** 2).mean()
        loss = pg - ENT_COEF * entropy.mean() + VF_COEF * vf
        loss.backward()
        opt.step()
        with torch.no_grad():
            ((ratio - 1) - log_ratio).mean()
            ((ratio - 1).abs() > CLIP).float().mean()

    return step


def main():
    a = parse_args()
    try:
        import torch
    except ImportError:
        print("skipped: no torch")
        return 0
    warnings.filterwarnings("ignore", message="Using padding='same'")
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    check_same_padding(torch)
    cfgs = []
    for name in a.net:
        batch = a.batch or NETS[name]
        step = fashion(torch, batch) if name == "fashion" else minatar(torch, batch)
        for k in range(WARMUP):
            step(k)
        cfgs.append({"net": name, "batch": batch, "step": step, "k": WARMUP, "rates": []})
    slice_s = a.seconds / a.rounds
    for _ in range(a.rounds):
        for c in cfgs:
            steps, t0 = 0, time.perf_counter()
            while True:
                c["step"](c["k"])
                c["k"] += 1
                steps += 1
                dt = time.perf_counter() - t0
                if dt >= slice_s:
                    break
            c["rates"].append(steps * c["batch"] / dt)

    print("# torch %s, %d thread(s), mkldnn %s, openblas core %s" % (
        torch.__version__, torch.get_num_threads(), torch.backends.mkldnn.is_available(),
        openblas_core()))
    for c in cfgs:
        print(json.dumps({
            "impl": "torch",
            "net": c["net"],
            "threads": a.threads,
            "batch": c["batch"],
            "rounds": a.rounds,
            "samples_per_s": round(statistics.median(c["rates"]), 1),
            "min_samples_per_s": round(min(c["rates"]), 1),
            "max_samples_per_s": round(max(c["rates"]), 1),
        }, separators=(",", ":")))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
