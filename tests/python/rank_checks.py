"""Checks the Horovod-API test scripts share, each failing with the rank
that saw it (every rank runs the script)."""
import tandem.torch as hvd


def raises(error, words, call):
    """``call()`` raises ``error`` saying ``words``; else this rank fails."""
    try:
        call()
    except error as e:
        assert words in str(e), f"rank {hvd.rank()}: {e!r} does not say {words!r}"
        return
    raise SystemExit(f"rank {hvd.rank()}: no {error.__name__} ({words})")
