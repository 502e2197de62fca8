# A small training script as a user writes one, run on a PyTorch without a GPU: a DataLoader
# with two worker processes shuffling a seeded dataset, a two-layer model, SGD with momentum,
# the loss printed every epoch. --unseeded: the DataLoader's generator is not seeded, so the
# batches come in another order in every run (and the losses differ). --python-noise: the
# targets of each batch are jittered by Python's own random module, which nothing seeds.
import random
import sys

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
features = torch.randn(256, 16)
targets = features @ torch.randn(16, 1) + 0.1 * torch.randn(256, 1)
generator = torch.Generator()
if "--unseeded" in sys.argv:
    generator.seed()
else:
    generator.manual_seed(1234)
loader = DataLoader(TensorDataset(features, targets), batch_size=32, shuffle=True,
                    generator=generator, num_workers=2)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
for epoch in range(2):
    total = 0.0
    for x, y in loader:
        optimizer.zero_grad()
        if "--python-noise" in sys.argv:
            y = y + random.gauss(0.0, 1e-3)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.item()
    print("epoch %d loss %.6f" % (epoch, total))
