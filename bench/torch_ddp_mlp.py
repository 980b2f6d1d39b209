"""PyTorch DistributedDataParallel peer of `mpirun -np 2 dpt train` on the
Fashion-MNIST MLP 784-256-128-10 (ReLU), Adam, for bench/compare_ddp_torch.sh.

2 processes (torch.multiprocessing) x 1 thread, gloo backend; the global batch
is split evenly across the processes as dpt splits it across ranks. Prints the
samples/s of the last epoch's training (no evaluation), as dpt's epoch line.

    python torch_ddp_mlp.py DATA_DIR [--procs 2] [--batch 128] [--epochs 2]
"""

import argparse
import gzip
import os
import struct
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = struct.unpack(">" + "I" * ndim, data[4 : 4 + 4 * ndim])
    t = torch.frombuffer(bytearray(data[4 + 4 * ndim :]), dtype=torch.uint8)
    return t.reshape(dims)


def find(data_dir, stem):
    for name in (stem, stem + ".gz"):
        p = os.path.join(data_dir, name)
        if os.path.exists(p):
            return p
    raise FileNotFoundError(os.path.join(data_dir, stem))


def worker(rank, args):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(args.port)
    dist.init_process_group("gloo", rank=rank, world_size=args.procs)
    x = read_idx(find(args.data_dir, "train-images-idx3-ubyte")).reshape(-1, 784).float() / 255.0
    y = read_idx(find(args.data_dir, "train-labels-idx1-ubyte")).long()
    torch.manual_seed(1)
    model = torch.nn.Sequential(
        torch.nn.Linear(784, 256),
        torch.nn.ReLU(),
        torch.nn.Linear(256, 128),
        torch.nn.ReLU(),
        torch.nn.Linear(128, 10),
    )
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(ddp.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    n = x.shape[0]
    share = args.batch // args.procs
    steps = n // args.batch
    rate = 0.0
    for epoch in range(args.epochs):
        g = torch.Generator().manual_seed(epoch)
        order = torch.randperm(n, generator=g)
        dist.barrier()
        t0 = time.perf_counter()
        for s in range(steps):
            idx = order[s * args.batch + rank * share : s * args.batch + (rank + 1) * share]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(ddp(x[idx]), y[idx])
            loss.backward()
            opt.step()
        dist.barrier()
        rate = steps * args.batch / (time.perf_counter() - t0)
    if rank == 0:
        print(f"torch ddp procs {args.procs} batch {args.batch}: {rate:.0f} samples/s")
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data_dir")
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--port", type=int, default=29517)
    args = ap.parse_args()
    mp.spawn(worker, args=(args,), nprocs=args.procs)


if __name__ == "__main__":
    main()
