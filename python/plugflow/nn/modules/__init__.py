"""torch.nn.modules' classes for plugflow."""

from . import (module, container, linear, activation, conv, pooling, normalization, batchnorm, dropout, sparse,
               flatten, upsampling, loss, transformer, padding, distance, pixelshuffle, instancenorm, rnn, fold,
               loss_more, extra_layers, lazy, channelshuffle, adaptive)
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
from .channelshuffle import *  # noqa: F401,F403
from .adaptive import *  # noqa: F401,F403

# What `from plugflow.nn.modules import *` (and so plugflow.nn) exports: torch.nn's public names.
__all__ = [name for m in (module, container, linear, activation, conv, pooling, normalization, batchnorm, dropout,
                          sparse, flatten, upsampling, loss, transformer, padding, distance, pixelshuffle,
                          instancenorm, rnn, fold, loss_more, extra_layers, lazy, channelshuffle, adaptive)
           for name in m.__all__
           if name not in ("RemovableHandle", "NonDynamicallyQuantizableLinear", "LazyModuleMixin")]

# PyTorch's homes of the classes loss_more, extra_layers and lazy define, for code that imports
# them from there (`from torch.nn.modules.pooling import MaxUnpool2d`).
for _home, _names in [(loss, loss_more.__all__),
                      (pooling, ["LPPool1d", "LPPool2d", "MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d",
                                 "FractionalMaxPool2d", "FractionalMaxPool3d"]),
                      (normalization, ["LocalResponseNorm", "CrossMapLRN2d"]),
                      (padding, ["ConstantPad3d", "ReflectionPad3d", "ReplicationPad3d"]),
                      (instancenorm, ["InstanceNorm3d", "LazyInstanceNorm1d", "LazyInstanceNorm2d",
                                      "LazyInstanceNorm3d"]),
                      (sparse, ["EmbeddingBag"]),
                      (linear, ["LazyLinear"]),
                      (conv, ["LazyConv1d", "LazyConv2d", "LazyConv3d", "LazyConvTranspose1d", "LazyConvTranspose2d",
                              "LazyConvTranspose3d"]),
                      (batchnorm, ["LazyBatchNorm1d", "LazyBatchNorm2d", "LazyBatchNorm3d"])]:
    for _name in _names:
        setattr(_home, _name, globals()[_name])
del _home, _names, _name
