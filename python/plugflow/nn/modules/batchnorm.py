"""BatchNorm1d, BatchNorm2d, BatchNorm3d and SyncBatchNorm (torch.nn.modules.batchnorm), on
F.batch_norm (whose kernels take the (N, C, *) input as it is, row-major or channels last).

In training the batch statistics normalize and update the running ones (exponential average
with `momentum`, or the cumulative average when momentum is None); in eval the running
statistics normalize, unless track_running_stats=False, which always uses batch statistics.
SyncBatchNorm computes the training statistics over the whole process group's batch.
"""

from ... import _C, _creation
from ... import distributed as dist
from ...autograd.function import Function
from .. import functional as F
from .. import init
from ..parameter import Parameter
from .module import Module

__all__ = ["BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm"]


class _NormBase(Module):
    """Parameters and running statistics shared by the batch norms."""

    _version = 2  # version 2 added num_batches_tracked
    __constants__ = ["track_running_stats", "momentum", "eps", "num_features", "affine"]

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True, device=None,
                 dtype=None):
        factory_kwargs = {"device": device, "dtype": dtype}
        super().__init__()
        self.num_features = num_features
        self.eps = eps
        self.momentum = momentum
        self.affine = affine
        self.track_running_stats = track_running_stats
        if self.affine:
            self.weight = Parameter(_creation.empty(num_features, **factory_kwargs))
            self.bias = Parameter(_creation.empty(num_features, **factory_kwargs))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if self.track_running_stats:
            self.register_buffer("running_mean", _creation.zeros(num_features, **factory_kwargs))
            self.register_buffer("running_var", _creation.ones(num_features, **factory_kwargs))
            self.register_buffer("num_batches_tracked", _creation.tensor(0, dtype=_C.int64, device=device))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)
        self.reset_parameters()

    def reset_running_stats(self):
        if self.track_running_stats:
            self.running_mean.zero_()
            self.running_var.fill_(1)
            self.num_batches_tracked.zero_()

    def reset_parameters(self):
        self.reset_running_stats()
        if self.affine:
            init.ones_(self.weight)
            init.zeros_(self.bias)

    def _check_input_dim(self, input):
        raise NotImplementedError

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"track_running_stats={self.track_running_stats}")

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        version = local_metadata.get("version", None)
        if (version is None or version < 2) and self.track_running_stats:
            # Checkpoints from before num_batches_tracked existed load with a count of 0.
            state_dict.setdefault(prefix + "num_batches_tracked", _creation.tensor(0, dtype=_C.int64))
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)


class _BatchNorm(_NormBase):
    def forward(self, input):
        self._check_input_dim(input)
        exponential_average_factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average
                exponential_average_factor = 1.0 / float(self.num_batches_tracked)
        # Batch statistics in training, and in eval when there are no running statistics.
        bn_training = self.training or (self.running_mean is None and self.running_var is None)
        use_running = not self.training or self.track_running_stats
        return F.batch_norm(input, self.running_mean if use_running else None,
                            self.running_var if use_running else None, self.weight, self.bias, bn_training,
                            exponential_average_factor, self.eps)


class BatchNorm1d(_BatchNorm):
    """Batch norm over (N, C) or (N, C, L) inputs, per channel C."""

    def _check_input_dim(self, input):
        if input.dim() != 2 and input.dim() != 3:
            raise ValueError(f"expected 2D or 3D input (got {input.dim()}D input)")


class BatchNorm2d(_BatchNorm):
    """Batch norm over (N, C, H, W) inputs, per channel C."""

    def _check_input_dim(self, input):
        if input.dim() != 4:
            raise ValueError(f"expected 4D input (got {input.dim()}D input)")


class BatchNorm3d(_BatchNorm):
    """Batch norm over (N, C, D, H, W) inputs, per channel C."""

    def _check_input_dim(self, input):
        if input.dim() != 5:
            raise ValueError(f"expected 5D input (got {input.dim()}D input)")


class _SyncBatchNormFunction(Function):
    """Batch norm with statistics over every rank's batch: forward all-reduces the per-channel
    sums (mean first, then the centred squares, which keeps float32 variances accurate),
    backward the per-channel sums of grad and grad * (x - mean). The weight's and bias's
    gradients stay local, as in PyTorch: DistributedDataParallel averages them."""

    @staticmethod
    def forward(ctx, input, weight, bias, running_mean, running_var, eps, momentum, group):
        channels = input.shape[1]
        dims = [0] + list(range(2, input.dim()))
        shape = [1, channels] + [1] * (input.dim() - 2)
        local_count = input.numel() // channels
        # The global count stays a tensor (no host read), so an nn.Graph can capture this
        # forward; the check is PyTorch's, on what this rank knows.
        if local_count == 1 and dist.get_world_size(group) < 2:
            raise ValueError(f"Expected more than 1 value per channel when training, got input size {list(input.shape)}")
        stats = _C.cat([input.sum(dims), _creation.tensor([float(local_count)], dtype=input.dtype,
                                                          device=input.device)])
        dist.all_reduce(stats, group=group)
        count = stats[channels]
        mean = stats[:channels] / count
        xmu = input - mean.view(shape)
        var_sum = (xmu * xmu).sum(dims)
        dist.all_reduce(var_sum, group=group)
        var = var_sum / count
        invstd = (var + eps).rsqrt()
        if running_mean is not None:
            running_mean.mul_(1 - momentum).add_(mean * momentum)
            running_var.mul_(1 - momentum).add_(var * (count / (count - 1)) * momentum)
        xhat = xmu * invstd.view(shape)
        out = xhat if weight is None else xhat * weight.view(shape) + bias.view(shape)
        ctx.save_for_backward(xhat, invstd, weight)
        ctx.count, ctx.group, ctx.dims, ctx.shape = count, group, dims, shape
        return out

    @staticmethod
    def backward(ctx, grad_output):
        xhat, invstd, weight = ctx.saved_tensors
        dims, shape = ctx.dims, ctx.shape
        channels = xhat.shape[1]
        sum_dy = grad_output.sum(dims)
        sum_dy_xhat = (grad_output * xhat).sum(dims)
        grad_weight = sum_dy_xhat if weight is not None else None
        grad_bias = sum_dy if weight is not None else None
        sums = _C.cat([sum_dy, sum_dy_xhat])
        dist.all_reduce(sums, group=ctx.group)
        mean_dy = (sums[:channels] / ctx.count).view(shape)
        mean_dy_xhat = (sums[channels:] / ctx.count).view(shape)
        scale = invstd if weight is None else invstd * weight
        grad_input = (grad_output - mean_dy - xhat * mean_dy_xhat) * scale.view(shape)
        return grad_input, grad_weight, grad_bias, None, None, None, None, None


class SyncBatchNorm(_BatchNorm):
    """Batch norm whose training statistics cover the batches of every rank of
    `process_group` (default: the whole job), on any device the group's backend takes
    (PyTorch 1.13's only takes CUDA tensors; plugflow's also CPU ones over gloo). In eval, or
    outside an initialized process group, it is BatchNorm."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True,
                 process_group=None, device=None, dtype=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype)
        self.process_group = process_group

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def _check_non_zero_input_channels(self, input):
        if input.size(1) == 0:
            raise ValueError("SyncBatchNorm number of input channels should be non-zero")

    def forward(self, input):
        self._check_input_dim(input)
        self._check_non_zero_input_channels(input)
        bn_training = self.training or (self.running_mean is None and self.running_var is None)
        if not bn_training or not dist.is_initialized():
            return super().forward(input)
        exponential_average_factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:
                exponential_average_factor = 1.0 / float(self.num_batches_tracked)
        track = self.training and self.track_running_stats
        return _SyncBatchNormFunction.apply(input, self.weight, self.bias, self.running_mean if track else None,
                                            self.running_var if track else None, self.eps,
                                            exponential_average_factor, self.process_group)

    @classmethod
    def convert_sync_batchnorm(cls, module, process_group=None):
        """`module` with every BatchNorm*D inside replaced by a SyncBatchNorm holding the same
        parameters and buffers (the module itself when it is a batch norm)."""
        converted = module
        if isinstance(module, _BatchNorm) and not isinstance(module, SyncBatchNorm):
            converted = SyncBatchNorm(module.num_features, module.eps, module.momentum, module.affine,
                                      module.track_running_stats, process_group)
            if module.affine:
                converted.weight = module.weight
                converted.bias = module.bias
            converted.running_mean = module.running_mean
            converted.running_var = module.running_var
            converted.num_batches_tracked = module.num_batches_tracked
            converted.training = module.training
        for name, child in module.named_children():
            converted.add_module(name, cls.convert_sync_batchnorm(child, process_group))
        del module
        return converted
