"""What the example scripts share: the --deterministic switch and the checksum they print."""
import argparse
import hashlib
import os

import torch


def make_parser(description):
    """An argument parser with --deterministic, for the scripts to add their own options to."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--deterministic", action="store_true",
                        help="call torch.use_deterministic_algorithms(True)")
    return parser


def setup(args):
    """Applies --deterministic (before any CUDA work) and seeds every generator."""
    if args.deterministic:
        # cuBLAS needs a fixed workspace configuration to be deterministic (PyTorch's
        # "Reproducibility" notes); it is read when the first cuBLAS handle is made.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
    torch.manual_seed(0)
    return args


def checksum(*tensors):
    """The first 16 hex digits of SHA-256 over the tensors' bytes: equal iff bitwise equal."""
    digest = hashlib.sha256()
    for tensor in tensors:
        raw = tensor.detach().contiguous().cpu().flatten().view(torch.uint8)
        try:
            digest.update(raw.numpy().tobytes())
        except RuntimeError:  # a PyTorch built without NumPy
            digest.update(bytes(raw.tolist()))
    return digest.hexdigest()[:16]


def mixed_magnitudes(*shape):
    """Normal values scaled by powers of two from 2^-20 to 2^20: float sums of these depend on
    the order of the additions."""
    exponents = torch.randint(-20, 21, shape).float()
    return torch.randn(*shape) * torch.pow(2.0, exponents)
