"""plugflow.optim: optimizers and learning-rate schedules (torch.optim's API and numbers).

    import plugflow.optim as optim
    opt = optim.SGD(params, lr=0.1, momentum=0.9)
    sched = optim.lr_scheduler.StepLR(opt, step_size=10)

Updates follow PyTorch's single-tensor (for-loop) implementations operation by operation, so the
parameters match PyTorch's step for step up to float rounding, and state dicts use PyTorch's format.
SGD, Adam and AdamW update each dense parameter in one fused kernel with that same arithmetic.
SparseAdam is refused at construction: plugflow has no sparse gradients.
"""

from .optimizer import Optimizer
from .sgd import SGD
from .adam import Adam
from .adamw import AdamW
from .rmsprop import RMSprop
from .adagrad import Adagrad
from .adadelta import Adadelta
from .adamax import Adamax
from .nadam import NAdam
from .radam import RAdam
from .asgd import ASGD
from .rprop import Rprop
from .lbfgs import LBFGS
from .sparse_adam import SparseAdam
from . import lr_scheduler
from . import swa_utils

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam", "RAdam", "ASGD", "Rprop",
           "LBFGS", "SparseAdam", "lr_scheduler", "swa_utils"]
