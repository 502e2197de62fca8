"""A small convolutional network trained for a few steps with torch.backends.cudnn.benchmark =
True (cuDNN times its algorithms, PyTorch keeps the fastest): prints the median step time and a
checksum of the trained weights. For ndtrace's policies: `ndtrace run --pin TRACE` should make
two runs bitwise identical at benchmark speed, `ndtrace run --deterministic` should make them
identical, both measured against PyTorch's own --deterministic.

    python3 conv_net.py [--deterministic | --cudnn-deterministic] [--steps N] [--batch B]
                        [--emit-nvtx]

--cudnn-deterministic sets torch.backends.cudnn.deterministic = True and keeps benchmark on:
cuDNN then times deterministic algorithms only, and a reference recorded so is one that
`ndtrace run --pin` can reproduce bitwise (a pinned nondeterministic algorithm is chosen
again, but its result still varies).

--emit-nvtx runs the steps inside torch.autograd.profiler.emit_nvtx (PyTorch's per-op NVTX
ranges, what ndtrace's Python shim turns on): what those ranges cost without ndtrace.
"""
import contextlib
import statistics
import time

import torch

from pytorch_common import checksum, make_parser, setup


class ConvNet(torch.nn.Module):
    """Three convolution blocks and a linear classifier over 32x32 images."""

    def __init__(self, width=64, classes=10):
        super().__init__()
        layers = []
        channels = 3
        for out in (width, 2 * width, 4 * width):
            layers += [torch.nn.Conv2d(channels, out, 3, padding=1), torch.nn.BatchNorm2d(out),
                       torch.nn.ReLU(), torch.nn.Conv2d(out, out, 3, padding=1),
                       torch.nn.ReLU(), torch.nn.MaxPool2d(2)]
            channels = out
        self.features = torch.nn.Sequential(*layers)
        self.classifier = torch.nn.Linear(channels * 4 * 4, classes)

    def forward(self, x):
        return self.classifier(self.features(x).flatten(1))


def main():
    parser = make_parser(__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="training steps (default 20)")
    parser.add_argument("--batch", type=int, default=128, help="batch size (default 128)")
    parser.add_argument("--cudnn-deterministic", action="store_true",
                        help="torch.backends.cudnn.deterministic = True, benchmark still on")
    parser.add_argument("--emit-nvtx", action="store_true",
                        help="run the steps inside torch.autograd.profiler.emit_nvtx")
    args = setup(parser.parse_args())
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.deterministic = args.cudnn_deterministic
    model = ConvNet().cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    images = torch.randn(args.batch, 3, 32, 32, device="cuda")
    # Mean squared error against one-hot targets: unlike cross_entropy (nll_loss), it has no op
    # that torch.use_deterministic_algorithms(True) refuses on CUDA.
    targets = torch.nn.functional.one_hot(torch.randint(0, 10, (args.batch,)), 10).float().cuda()
    times = []
    ranges = (torch.autograd.profiler.emit_nvtx(record_shapes=False) if args.emit_nvtx
              else contextlib.nullcontext())
    with ranges:
        for _ in range(args.steps):
            torch.cuda.synchronize()
            start = time.perf_counter()
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(images), targets).backward()
            optimizer.step()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
    # The first steps include cuDNN's benchmarking: the median is over the later half.
    print("step_ms %.3f" % (1000 * statistics.median(times[len(times) // 2:])))
    print("checksum", checksum(*model.parameters()))


if __name__ == "__main__":
    main()
