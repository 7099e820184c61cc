"""plugflow.nn: neural-network building blocks (torch.nn's API).

Parameter and Module, containers, layers, losses (plugflow.nn.modules), the functional API
(plugflow.nn.functional), parameter initialisation (plugflow.nn.init), utilities
(plugflow.nn.utils) and DataParallel (plugflow.nn.parallel).
"""

from . import functional  # noqa: F401
from . import init  # noqa: F401
from .parameter import Parameter  # noqa: F401
from .modules import *  # noqa: F401,F403
from . import utils  # noqa: F401
from .graph import Graph, GraphConfig, GraphCaptureError, graph_mode  # noqa: F401,E402
from . import parallel  # noqa: F401
from .parallel import DataParallel  # noqa: F401
