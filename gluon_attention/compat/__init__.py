"""The seed's PyTorch-style ``attend`` contract on MXNet arrays."""
