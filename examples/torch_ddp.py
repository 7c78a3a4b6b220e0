"""A small PyTorch DDP training on CPU with the Gloo backend, started by mlrun (or torchrun).

Every rank trains the same model on its own shard of a fixed synthetic data set; DDP averages
the gradients, so every rank must end with identical parameters. Rank 0 gathers a checksum of
every rank's parameters and fails loudly if they differ.

    mlrun --nproc_per_node=4 examples/torch_ddp.py --steps 20
"""
import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()

    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert rank == int(os.environ["RANK"]) and world == int(os.environ["WORLD_SIZE"])

    torch.manual_seed(0)  # The same initial model everywhere; DDP also broadcasts rank 0's.
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)

    gen = torch.Generator().manual_seed(1234 + rank)  # Each rank its own data.
    w_true = torch.arange(16, dtype=torch.float32) / 16
    for step in range(args.steps):
        x = torch.randn(args.batch, 16, generator=gen)
        y = (x @ w_true).unsqueeze(1)
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    sums = [torch.zeros(2) for _ in range(world)]
    dist.all_gather(sums, torch.stack([flat.sum(), (flat * flat).sum()]))
    if rank == 0:
        for r, s in enumerate(sums):
            if not torch.equal(s, sums[0]):
                raise SystemExit(f"rank {r} parameters differ from rank 0: {s} vs {sums[0]}")
        print(f"ddp ok: {world} ranks, {args.steps} steps, loss {loss.item():.4f}, "
              f"parameter checksum {sums[0][0].item():.6f}", flush=True)
    # Free DDP's Gloo state before the group goes: PyTorch 1.13 can deadlock at interpreter
    # exit when a live DDP model is collected after destroy_process_group.
    del ddp
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
