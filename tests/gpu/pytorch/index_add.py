"""index_add_ on the GPU: a million rows added into 64 rows. PyTorch's CUDA kernel adds with
atomics, so the float sums depend on the order the additions land in and the checksum can
change from run to run; with --deterministic PyTorch takes a sorted, deterministic path.

    python3 index_add.py [--deterministic]
"""
import torch

from pytorch_common import checksum, make_parser, mixed_magnitudes, setup


def main():
    setup(make_parser(__doc__.splitlines()[0]).parse_args())
    rows, width, buckets = 1 << 20, 16, 64
    source = mixed_magnitudes(rows, width).cuda()
    index = torch.randint(0, buckets, (rows,)).cuda()
    out = torch.zeros(buckets, width, device="cuda")
    for _ in range(3):
        out.index_add_(0, index, source)
    torch.cuda.synchronize()
    print("checksum", checksum(out))


if __name__ == "__main__":
    main()
