"""Loads libhfa_torch.so, which registers hfa's ops (torch.ops.hfa.*) with PyTorch's dispatcher.
It sits in this package next to libhfa.so (found through its $ORIGIN rpath); HFA_TORCH_OPS_LIBRARY
names another build of it (a development build folder)."""
import os

import torch

_here = os.path.dirname(os.path.abspath(__file__))
path = os.environ.get("HFA_TORCH_OPS_LIBRARY") or os.path.join(_here, "libhfa_torch.so")
if not os.path.exists(path):
    raise ImportError(f"hfa: the op library {path} is missing; install the package with "
                      "`pip install ./python` (it builds libhfa.so and libhfa_torch.so)")
torch.ops.load_library(path)
