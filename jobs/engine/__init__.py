"""What every job shares: the data-parallel training loop, the optimiser, learning-rate schedule
and checkpoints, job configs as dataclasses, the ``--ctx`` grammar, and the launcher of a
distributed job. Imports no other room of ``jobs``."""
