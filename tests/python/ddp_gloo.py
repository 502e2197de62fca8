# Data-parallel training as a user writes it on machines without a GPU: two processes started by
# torch.multiprocessing.spawn, DistributedDataParallel over gloo, each rank drawing its own
# batches from a generator seeded with its rank, Adam, the loss printed by rank 0, the process
# group destroyed at the end. --unseeded: the ranks' generators are seeded from the clock
# (seed()), so the batches, and the losses, differ in every run. --teardown: 48 models in turn,
# each on a process group of its own (dist.new_group) trained for 3 steps and destroyed, as
# sweeps and test suites do: the moment when a group's last reference goes (with the model, its
# reducer's) while gloo's thread may still be letting go of the last step's work comes often.
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel


def worker(rank, world, port, flags):
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                            world_size=world)
    for _ in range(48 if "--teardown" in flags else 1):
        train(rank, dist.new_group(), flags)
    dist.destroy_process_group()


def train(rank, group, flags):
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1)),
                                    process_group=group)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    generator = torch.Generator()
    if "--unseeded" in flags:
        generator.seed()
    else:
        generator.manual_seed(rank)
    for step in range(3 if "--teardown" in flags else 20):
        x = torch.randn(32, 8, generator=generator)
        y = x.sum(1, keepdim=True)
        optimizer.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        optimizer.step()
    if rank == 0:
        print("loss %.6f" % loss.item(), flush=True)
    dist.destroy_process_group(group)  # the model, and its reducer, still hold it


if __name__ == "__main__":
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()
    mp.spawn(worker, args=(2, port, sys.argv[1:]), nprocs=2)
