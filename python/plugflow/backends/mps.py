"""torch.backends.mps: Apple's Metal backend, which no plugflow plugin provides."""


def is_available():
    """False: no plugin provides an "mps" device."""
    return False


def is_built():
    """False: plugflow is not built with Metal."""
    return False
