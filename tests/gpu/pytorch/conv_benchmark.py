"""A convolution's forward and backward pass with torch.backends.cudnn.benchmark = True: cuDNN
times its algorithms and PyTorch keeps the fastest, which may accumulate the weight gradient
with atomics (and may differ between runs, being chosen by timing). With --deterministic only
deterministic algorithms are candidates.

    python3 conv_benchmark.py [--deterministic]
"""
import torch

from pytorch_common import checksum, make_parser, setup


def main():
    setup(make_parser(__doc__.splitlines()[0]).parse_args())
    torch.backends.cudnn.benchmark = True
    conv = torch.nn.Conv2d(64, 64, kernel_size=3, padding=1).cuda()
    x = torch.randn(64, 64, 32, 32, device="cuda", requires_grad=True)
    for _ in range(3):
        conv.zero_grad()
        x.grad = None
        conv(x).square().mean().backward()
    torch.cuda.synchronize()
    print("checksum", checksum(conv.weight.grad, conv.bias.grad, x.grad))


if __name__ == "__main__":
    main()
