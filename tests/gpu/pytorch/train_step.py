"""A few training steps of a small CNN on random data, all of it under torch.profiler with CUDA
activity, which counts the kernels the GPU ran. gpu_suite.sh records this script with ndtrace
and compares the kernel launches in the trace with these counts.

    python3 train_step.py [--deterministic] [--steps N]

Prints "profiler kernels N", "profiler memcpys N", "profiler memsets N", "profiler launch calls N"
(runtime and driver API calls whose name contains "LaunchKernel") and the checksum of the
trained weights.
"""
import json
import os
import tempfile

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

from pytorch_common import checksum, make_parser, setup


def make_model():
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 8 * 8, 10))


def train(steps):
    model = make_model().cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    images = torch.randn(steps, 32, 3, 32, 32, device="cuda")
    labels = torch.randint(0, 10, (steps, 32), device="cuda")
    for step in range(steps):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(images[step]), labels[step])
        loss.backward()
        optimizer.step()
    torch.cuda.synchronize()
    return model


def count_events(prof):
    """Counts the profiler's GPU activity by category, from its Chrome trace."""
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    counts = {"kernels": 0, "memcpys": 0, "memsets": 0, "launch calls": 0}
    for event in events:
        category = event.get("cat", "")
        if category == "kernel":
            counts["kernels"] += 1
        elif category == "gpu_memcpy":
            counts["memcpys"] += 1
        elif category == "gpu_memset":
            counts["memsets"] += 1
        elif category in ("cuda_runtime", "cuda_driver") and "LaunchKernel" in event["name"]:
            counts["launch calls"] += 1
    return counts


def main():
    parser = make_parser(__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    args = setup(parser.parse_args())
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        model = train(args.steps)
    for name, count in count_events(prof).items():
        print("profiler", name, count)
    print("checksum", checksum(*model.parameters()))


if __name__ == "__main__":
    main()
