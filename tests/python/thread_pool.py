# Batch inference on a thread pool, as a serving or evaluation script writes it: a seeded model,
# 8 inputs scored by a ThreadPoolExecutor of 2 threads, each task first waiting a few ms as if for
# I/O (each input goes to whichever thread is free, so which thread runs which input varies from
# run to run), the scores gathered in input order. Deterministic. --noise: each task adds noise drawn from the global generator, so which
# input gets which draw depends on which thread got there first: the scores vary.
import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)).eval()
inputs = [torch.randn(16, 32) for _ in range(8)]


def score(x):
    time.sleep(random.random() / 200)
    with torch.no_grad():
        if "--noise" in sys.argv:
            x = x + 0.01 * torch.randn_like(x)
        return model(x).softmax(-1).sum(0)


with ThreadPoolExecutor(2) as pool:
    scores = list(pool.map(score, inputs))
print(" ".join("%.5f" % s[0].item() for s in scores))
