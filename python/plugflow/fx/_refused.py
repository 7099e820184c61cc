"""The one error every torch.fx entry point raises."""


def refused(call):
    return NotImplementedError(f"{call}: plugflow has no symbolic tracing (torch.fx); run the module eagerly, "
                               "or trace it with plugflow.nn.Graph")


class RefusedConstruction:
    """Base of the torch.fx classes: constructing one (or a subclass) raises."""

    def __init__(self, *args, **kwargs):
        raise refused(f"torch.fx.{self._fx_name}")
