"""A small PyTorch DDP training (Gloo on CPU, or NCCL on GPUs), started by mlrun or torchrun.

Every rank trains the same model on its own shard of a fixed synthetic data set; DDP averages
the gradients, so every rank must end with identical parameters. Rank 0 gathers a checksum of
every rank's parameters and fails loudly if they differ.

    mlrun --nproc_per_node=4 examples/torch_ddp.py --steps 20
    mlrun --nproc_per_node=gpu examples/torch_ddp.py --backend nccl   # one rank a GPU
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
    parser.add_argument("--backend", choices=["gloo", "nccl"], default="gloo")
    args = parser.parse_args()

    # NCCL: this rank's GPU is LOCAL_RANK among those it sees (mlrun sets CUDA_VISIBLE_DEVICES).
    device = torch.device("cpu")
    if args.backend == "nccl":
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
    dist.init_process_group(args.backend, init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert rank == int(os.environ["RANK"]) and world == int(os.environ["WORLD_SIZE"])

    torch.manual_seed(0)  # The same initial model everywhere; DDP also broadcasts rank 0's.
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    model = model.to(device)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)

    gen = torch.Generator().manual_seed(1234 + rank)  # Each rank its own data, made on the CPU.
    w_true = torch.arange(16, dtype=torch.float32) / 16
    for step in range(args.steps):
        x = torch.randn(args.batch, 16, generator=gen).to(device)
        y = (x @ w_true.to(device)).unsqueeze(1)
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    sums = [torch.zeros(2, device=device) for _ in range(world)]
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
