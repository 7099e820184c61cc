"""torch.backends.mkldnn's flags: enabled (stored only) and is_available()."""

enabled = True


def is_available():
    """True: plugflow's CPU plugin uses oneDNN (MKL-DNN) where it helps."""
    return True
