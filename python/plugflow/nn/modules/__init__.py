"""torch.nn.modules' classes for plugflow."""

from . import (module, container, linear, activation, conv, pooling, normalization, batchnorm, dropout, sparse,
               flatten, upsampling, loss, transformer, padding, distance, pixelshuffle, instancenorm, rnn, fold,
               loss_more, extra_layers, lazy)
from .module import *  # noqa: F401,F403
from .container import *  # noqa: F401,F403
from .linear import *  # noqa: F401,F403
from .activation import *  # noqa: F401,F403
from .conv import *  # noqa: F401,F403
from .pooling import *  # noqa: F401,F403
from .normalization import *  # noqa: F401,F403
from .batchnorm import *  # noqa: F401,F403
from .dropout import *  # noqa: F401,F403
from .sparse import *  # noqa: F401,F403
from .flatten import *  # noqa: F401,F403
from .upsampling import *  # noqa: F401,F403
from .loss import *  # noqa: F401,F403
from .transformer import *  # noqa: F401,F403
from .padding import *  # noqa: F401,F403
from .distance import *  # noqa: F401,F403
from .pixelshuffle import *  # noqa: F401,F403
from .instancenorm import *  # noqa: F401,F403
from .rnn import *  # noqa: F401,F403
from .fold import *  # noqa: F401,F403
from .loss_more import *  # noqa: F401,F403
from .extra_layers import *  # noqa: F401,F403
from .lazy import *  # noqa: F401,F403

# What `from plugflow.nn.modules import *` (and so plugflow.nn) exports: torch.nn's public names.
__all__ = [name for m in (module, container, linear, activation, conv, pooling, normalization, batchnorm, dropout,
                          sparse, flatten, upsampling, loss, transformer, padding, distance, pixelshuffle,
                          instancenorm, rnn, fold, loss_more, extra_layers, lazy) for name in m.__all__
           if name not in ("RemovableHandle", "NonDynamicallyQuantizableLinear", "LazyModuleMixin")]
