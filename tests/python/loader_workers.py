# A DataLoader whose two persistent workers augment each sample with torch.rand (each worker's
# generator seeded from the loader's, which the script seeds), training a linear model for two
# epochs; then an IterableDataset sharded by worker id. Deterministic. The records of a worker's
# threads reach its trace file in varying order, so its processes must be told apart by what
# they did, not by the order in which their files list it.
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info

torch.manual_seed(0)


class Augmented(Dataset):
    def __init__(self):
        self.x = torch.randn(64, 8)

    def __len__(self):
        return 64

    def __getitem__(self, i):
        return self.x[i] + 0.1 * torch.rand(8), i


class Shards(IterableDataset):
    def __iter__(self):
        worker = get_worker_info()
        start, step = (worker.id, worker.num_workers) if worker else (0, 1)
        for i in range(start, 32, step):
            yield torch.full((4,), float(i))


generator = torch.Generator().manual_seed(5)
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(Augmented(), batch_size=16, shuffle=True, num_workers=2,
                    persistent_workers=True, generator=generator)
for epoch in range(2):
    for x, _ in loader:
        loss = model(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
total = sum(batch.sum() for batch in DataLoader(Shards(), batch_size=4, num_workers=2))
print("%.6f %.1f" % (loss.item(), total.item()))
