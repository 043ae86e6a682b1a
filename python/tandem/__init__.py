"""Tandem: data-parallel training. PyTorch users: ``import tandem.torch as td``."""
