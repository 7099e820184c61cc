"""plugflow.jit.annotations (torch.jit.annotations): the typing names TorchScript code imports."""

from typing import Any, Dict, List, Optional, Tuple, Union  # noqa: F401


class _BroadcastingList:
    """BroadcastingList2[int]: to TorchScript, an int or a list of two ints; to Python, nothing."""

    def __getitem__(self, types):
        return None


BroadcastingList1 = BroadcastingList2 = BroadcastingList3 = _BroadcastingList()
