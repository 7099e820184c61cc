"""plugflow.ops (torch.ops): PyTorch's registry of C++ operators, which plugflow does not have.

Libraries such as torchvision register C++ kernels through torch.ops.load_library and call them as
torch.ops.<namespace>.<op>. Those libraries are compiled against PyTorch's C++ ABI, so plugflow
cannot load them: load_library raises OSError (what torchvision catches to fall back to its
Python code), and looking up an operator raises AttributeError naming it (PyTorch's error type for
an unknown operator, so `getattr(torch.ops.ns, "op", None)` works).
"""

import types

__all__ = ["ops"]

_WHY = "plugflow cannot load PyTorch C++ extensions (they are built against PyTorch's C++ ABI)"


class _OpNamespace(types.ModuleType):
    """torch.ops.<namespace>: every operator lookup fails."""

    def __init__(self, name):
        super().__init__("torch.ops." + name)
        self.name = name

    def __getattr__(self, op_name):
        if op_name.startswith("__"):
            raise AttributeError(op_name)
        raise AttributeError(f"torch.ops.{self.name}.{op_name}: {self.name}::{op_name} is a PyTorch C++ operator; "
                             f"{_WHY}")


class _Ops(types.ModuleType):
    def __init__(self):
        super().__init__("torch.ops")
        self.loaded_libraries = set()  # as in PyTorch; it stays empty

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        namespace = _OpNamespace(name)
        setattr(self, name, namespace)
        return namespace

    def load_library(self, path):
        """Raises OSError: plugflow cannot load a library of PyTorch C++ operators."""
        raise OSError(f"torch.ops.load_library({str(path)!r}): {_WHY}")


ops = _Ops()
