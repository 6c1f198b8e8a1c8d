"""A PyTorch-style ``attend`` function and its helpers on MXNet numpy arrays."""
