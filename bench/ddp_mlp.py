"""PyTorch DistributedDataParallel over gloo: the Fashion-MNIST MLP
(784-256-128-10, ReLU), Adam (lr 1e-3), a global batch split over the
processes, one thread per process. Prints the samples/s of the timed steps
(rank 0), one line: "ddp samples/s N". The data are random (the same shapes
as Fashion-MNIST): the arithmetic does not depend on the values.

    python ddp_mlp.py --procs 2 --batch 128 --steps 468 --port 29531
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, args, out):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(args.port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=args.procs)
    torch.manual_seed(1)
    model = torch.nn.Sequential(
        torch.nn.Linear(784, 256), torch.nn.ReLU(),
        torch.nn.Linear(256, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 10))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(ddp.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    rows = args.batch // args.procs
    g = torch.Generator().manual_seed(rank)
    x = torch.rand(args.steps, rows, 784, generator=g)
    y = torch.randint(0, 10, (args.steps, rows), generator=g)

    def step(i):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(x[i % args.steps]), y[i % args.steps])
        loss.backward()
        opt.step()

    for i in range(args.warmup):
        step(i)
    dist.barrier()
    t0 = time.perf_counter()
    for i in range(args.steps):
        step(i)
    dist.barrier()
    t1 = time.perf_counter()
    if rank == 0:
        out.put(args.steps * rows * args.procs / (t1 - t0))
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--procs", type=int, default=2)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=468)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--port", type=int, default=29531)
    args = p.parse_args()
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, args, out)) for r in range(args.procs)]
    for q in procs:
        q.start()
    rate = out.get()
    for q in procs:
        q.join()
    print("ddp samples/s %.1f" % rate)


if __name__ == "__main__":
    main()
