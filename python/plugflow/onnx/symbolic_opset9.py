"""plugflow.onnx.symbolic_opset9 (torch.onnx.symbolic_opset9): the names custom symbolics import;
each raises NotImplementedError when called."""

from ._refused import refusing

_cast_Long = refusing("symbolic_opset9", "_cast_Long")
select = refusing("symbolic_opset9", "select")
squeeze = refusing("symbolic_opset9", "squeeze")
unsqueeze = refusing("symbolic_opset9", "unsqueeze")
