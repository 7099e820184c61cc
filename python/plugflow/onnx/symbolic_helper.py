"""plugflow.onnx.symbolic_helper (torch.onnx.symbolic_helper): parse_args, for registrations."""


def parse_args(*arg_descriptors):
    """The decorator symbolic functions are declared with; it describes how the exporter passes
    arguments, so without an exporter it returns the function unchanged."""
    return lambda fn: fn
