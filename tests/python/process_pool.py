# Feature extraction on a process pool, as a preprocessing script writes it: multiprocessing.Pool
# of 2 workers maps 8 items, each computed from a generator seeded with the item, each task
# first waiting a few ms as if for I/O (so which worker takes which item varies from run to
# run), the results gathered in item order. Deterministic. --unseeded: the generators are seeded
# from the clock (seed()): the features differ in every run.
import multiprocessing
import random
import sys
import time

import torch


def features(item):
    time.sleep(random.random() / 100)
    generator = torch.Generator()
    if "--unseeded" in sys.argv:
        generator.seed()
    else:
        generator.manual_seed(item)
    x = torch.randn(64, 64, generator=generator)
    return (x @ x.T).trace().item()


if __name__ == "__main__":
    with multiprocessing.Pool(2) as pool:
        values = pool.map(features, range(8), chunksize=1)
    print(" ".join("%.3f" % value for value in values))
