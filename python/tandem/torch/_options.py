"""The training options' one declaration, read from the extension: the
table `tandem train --help` shows (src/train/train_options.cpp). init() and
DistributedOptimizer take their keyword defaults, their docstrings and
their checks from it instead of keeping copies."""
from tandem import _C

OPTIONS = {o["keyword"]: o for o in _C.options()}
DEFAULTS = {keyword: o["default"] for keyword, o in OPTIONS.items()}


def documented(*keywords):
    """Appends each keyword's flag, default and help to the docstring."""
    def wrap(fn):
        lines = ["", "    Options shared with ``tandem train`` (same defaults, same checks):", ""]
        for keyword in keywords:
            o = OPTIONS[keyword]
            lines.append(f"    ``{keyword}`` ({o['flag']}, default {o['default']!r}): {o['help']}.")
        fn.__doc__ = (fn.__doc__ or "").rstrip() + "\n" + "\n".join(lines) + "\n"
        return fn
    return wrap


def check(who, mode, **values):
    """Raises ValueError, naming ``who`` and the keyword, for a value its
    flag would refuse in a run of ``mode`` (None keeps the default)."""
    _C.check_options(who, values, mode)
