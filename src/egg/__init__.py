"""egg: turns PyTorch programs into faster, verified Triton kernels."""

__version__ = "0.1.0"
