"""plugflow.nn: neural-network building blocks (torch.nn's API).

Only `plugflow.nn.functional` lives here so far; modules, parameters and init join it.
"""

from . import functional  # noqa: F401
