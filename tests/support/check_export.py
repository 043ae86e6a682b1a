"""Reads what `tandem export` wrote, with plain PyTorch, as a user would.
  check_export.py state_dict FILE
      prints {name: [shape, sum]} for the dict torch.load returns
  check_export.py torchscript EXPORTED STATE_DICT ORIGINAL
      checks the exported module runs, holds the state dict's weights, and
      moved away from the ORIGINAL module it was trained from; a
      torch.nn.Module of the same structure loads the state dict strictly.
Exits non-zero with a message on any failure."""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_torchscript  # noqa: E402  (the test modules' Python definitions)


def load_state_dict(path):
    state = torch.load(path)
    if not isinstance(state, dict):
        sys.exit(f"{path}: torch.load gave {type(state).__name__}, not a dict")
    for name, value in state.items():
        if not isinstance(name, str) or not isinstance(value, torch.Tensor):
            sys.exit(f"{path}: entry {name!r} is not name -> tensor")
    return state


def check_torchscript(exported, state_path, original_path):
    module = torch.jit.load(exported)
    state = load_state_dict(state_path)
    mine = dict(module.named_parameters())
    mine.update(dict(module.named_buffers()))
    if set(mine) != set(state):
        sys.exit(f"names differ: module {sorted(mine)} vs state dict {sorted(state)}")
    for name, value in state.items():
        if not torch.equal(mine[name], value):
            sys.exit(f"{name}: the exported module's weights differ from the state dict's")
    original = dict(torch.jit.load(original_path).named_parameters())
    if all(torch.equal(original[n], mine[n]) for n in original):
        sys.exit("the exported module still holds its initial weights")
    plain = make_torchscript.Mlp()
    plain.load_state_dict(state, strict=True)
    plain.eval()
    module.eval()
    x = torch.randn(5, 1, 28, 28)
    if not torch.allclose(plain(x), module(x), rtol=0, atol=1e-6):
        sys.exit("torch.nn.Module with the state dict and the exported module disagree")
    print("ok")


def main():
    if sys.argv[1] == "state_dict":
        state = load_state_dict(sys.argv[2])
        print(json.dumps({n: [list(t.shape), float(t.double().sum())] for n, t in state.items()}))
    elif sys.argv[1] == "torchscript":
        check_torchscript(*sys.argv[2:5])
    else:
        sys.exit(f"unknown mode {sys.argv[1]}")


if __name__ == "__main__":
    main()
