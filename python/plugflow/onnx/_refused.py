"""The one error every torch.onnx export entry point raises."""


def refused(call):
    return NotImplementedError(f"{call}: plugflow cannot export to ONNX (that needs PyTorch's TorchScript tracer); "
                               "export the model from PyTorch with the same weights (torch.save's state_dict loads "
                               "in both)")


def refusing(module, name):
    """A symbolic function that raises when called: symbolic functions only run inside an export."""
    def symbolic(*args, **kwargs):
        raise refused(f"torch.onnx.{module}.{name}")

    symbolic.__name__ = symbolic.__qualname__ = name
    return symbolic
