"""plugflow.ao.quantization (torch.ao.quantization): the names quantization-aware model code
imports, without quantization.

plugflow has no quantized tensors or kernels. QuantStub and DeQuantStub are what they are in
PyTorch before convert(): identity modules marking where a quantized model would (de)quantize,
so a quantizable model builds and runs in floating point. Everything that quantizes (QConfig,
the observers, fuse_modules, prepare, prepare_qat, convert, quantize, quantize_dynamic, ...)
raises NotImplementedError when called.
"""

from ...nn.modules.module import Module

__all__ = ["QuantStub", "DeQuantStub", "QConfig", "default_observer", "default_weight_observer",
           "default_per_channel_weight_observer", "get_default_qconfig", "get_default_qat_qconfig", "fuse_modules",
           "fuse_modules_qat", "prepare", "prepare_qat", "convert", "quantize", "quantize_dynamic", "quantize_qat"]


class QuantStub(Module):
    """Identity: where a quantized model would quantize its input (after convert())."""

    def __init__(self, qconfig=None):
        super().__init__()
        if qconfig:
            self.qconfig = qconfig

    def forward(self, x):
        return x


class DeQuantStub(Module):
    """Identity: where a quantized model would dequantize its output (after convert())."""

    def __init__(self, qconfig=None):
        super().__init__()
        if qconfig:
            self.qconfig = qconfig

    def forward(self, x):
        return x


def _refusing(name):
    def refused(*args, **kwargs):
        raise NotImplementedError(f"torch.ao.quantization.{name}: plugflow has no quantized tensors or kernels; "
                                  "train and run the model in floating point")

    refused.__name__ = refused.__qualname__ = name
    return refused


QConfig = _refusing("QConfig")
default_observer = _refusing("default_observer")
default_weight_observer = _refusing("default_weight_observer")
default_per_channel_weight_observer = _refusing("default_per_channel_weight_observer")
get_default_qconfig = _refusing("get_default_qconfig")
get_default_qat_qconfig = _refusing("get_default_qat_qconfig")
fuse_modules = _refusing("fuse_modules")
fuse_modules_qat = _refusing("fuse_modules_qat")
prepare = _refusing("prepare")
prepare_qat = _refusing("prepare_qat")
convert = _refusing("convert")
quantize = _refusing("quantize")
quantize_dynamic = _refusing("quantize_dynamic")
quantize_qat = _refusing("quantize_qat")
