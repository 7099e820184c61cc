"""plugflow.onnx.symbolic_opset11 (torch.onnx.symbolic_opset11): the names custom symbolics
import; each raises NotImplementedError when called."""

from ._refused import refusing

select = refusing("symbolic_opset11", "select")
squeeze = refusing("symbolic_opset11", "squeeze")
unsqueeze = refusing("symbolic_opset11", "unsqueeze")
