"""scatter_add_ on the GPU: a million values added into 256 bins of a 1-d tensor (the case
torch.use_deterministic_algorithms makes deterministic). The CUDA kernel adds with atomics, so
the checksum can change from run to run without --deterministic.

    python3 scatter_add.py [--deterministic]
"""
import torch

from pytorch_common import checksum, make_parser, mixed_magnitudes, setup


def main():
    setup(make_parser(__doc__.splitlines()[0]).parse_args())
    count, bins = 1 << 20, 256
    source = mixed_magnitudes(count).cuda()
    index = torch.randint(0, bins, (count,)).cuda()
    out = torch.zeros(bins, device="cuda")
    for _ in range(3):
        out.scatter_add_(0, index, source)
    torch.cuda.synchronize()
    print("checksum", checksum(out))


if __name__ == "__main__":
    main()
