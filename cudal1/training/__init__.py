"""Learning stages: SFT, self-supervised rounds and contrastive RL through TRL, and their reward functions.

Submodules import torch/transformers/TRL; this package file stays light so ``cudal1.training.settings``
and ``cudal1.training.rewards`` can be imported without them.
"""
