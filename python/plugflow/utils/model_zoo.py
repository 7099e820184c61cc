"""plugflow.utils.model_zoo (torch.utils.model_zoo): the older name of the hub's weight loading."""

from ..hub import load_state_dict_from_url as load_url  # noqa: F401


def __getattr__(name):
    if name == "tqdm":  # torchvision imports torch.hub's progress bar from here
        from .. import hub

        return hub.tqdm
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
