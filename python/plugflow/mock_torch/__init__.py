"""Run code written for PyTorch on plugflow without editing it.

    import plugflow.mock_torch
    plugflow.mock_torch.enable()
    import torch                      # plugflow
    from torch.utils.data import DataLoader
    ...
    plugflow.mock_torch.disable()

or scoped:

    with plugflow.mock_torch.enable():
        third_party_training_script.main()   # its `import torch` gets plugflow

or for a whole script, unedited:

    python -m plugflow.mock_torch train.py --epochs 3

What is mapped: after enable(), an import of `torch` anywhere in the process (your code, third-
party modules such as torchvision, importlib.import_module) returns the plugflow module, and
`torch.X.Y` returns `plugflow.X.Y`: torch.nn, torch.nn.functional, torch.optim, torch.autograd,
torch.cuda, torch.distributed, torch.utils.data, torch.hub, torch.jit, torch.fx, torch.onnx,
torch.multiprocessing, torch.utils.checkpoint, ... (docs/compat.md lists them, with what each does
and what it refuses). Attributes come along (torch.Tensor is plugflow.Tensor, torch.float32 is
plugflow.float32, torch.save is plugflow.save). Real torch modules that were imported before
enable() are set aside (code that already holds them keeps using them) and put back by disable().

What is not mapped: a torch submodule plugflow does not have (torch.fft, ...) raises
ModuleNotFoundError naming it rather than loading real torch next to plugflow, and a function
plugflow lacks raises AttributeError. Compiled PyTorch extensions cannot load:
torch.ops.load_library raises OSError, except on torchvision's operator library, for which it
registers plugflow's own nms, roi_align and roi_pool as torch.ops.torchvision. Modules' `__name__` stays `plugflow...`. disable() cannot reach into modules that imported
torch while enabled: they keep plugflow.

Processes: forked children (DataLoader workers by default) inherit the hook; spawned ones start
without it, so call enable() at the top of the main script, which spawn re-runs in each child.
"""

import importlib
import importlib.abc
import importlib.util
import sys

__all__ = ["enable", "disable", "is_enabled"]

_TORCH = "torch"
_PLUGFLOW = "plugflow"


def _is_torch_name(name):
    return name == _TORCH or name.startswith(_TORCH + ".")


class _AliasLoader(importlib.abc.Loader):
    """Loads a torch name as the already imported plugflow module."""

    def __init__(self, module):
        self._module = module

    def create_module(self, spec):
        return self._module

    def exec_module(self, module):
        pass  # already executed as plugflow...


class _TorchToPlugflowFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if not _is_torch_name(fullname):
            return None
        real_name = _PLUGFLOW + fullname[len(_TORCH):]
        try:
            module = importlib.import_module(real_name)
        except ModuleNotFoundError as e:
            if e.name is not None and e.name != real_name and not real_name.startswith(e.name + "."):
                raise  # plugflow.X exists but itself failed to import something
            raise ModuleNotFoundError(f"No module named '{fullname}': plugflow.mock_torch maps it to '{real_name}', "
                                      "which plugflow does not have", name=fullname) from None
        # is_package keeps the import system from rewriting the module's own __path__.
        return importlib.util.spec_from_loader(fullname, _AliasLoader(module),
                                               is_package=hasattr(module, "__path__"))


_finder = None
_displaced = {}  # the real torch modules enable() set aside: name -> module


def is_enabled():
    """Whether `import torch` currently gives plugflow."""
    return _finder is not None


class enable:
    """Makes every later `import torch` / `import torch.X` load plugflow / plugflow.X, until
    disable(). Also a context manager: `with plugflow.mock_torch.enable(): ...` disables on
    exit (when this call was the one that enabled it)."""

    def __init__(self):
        global _finder
        self._enabled_here = _finder is None
        if not self._enabled_here:
            return
        for name in [n for n in sys.modules if _is_torch_name(n)]:
            _displaced[name] = sys.modules.pop(name)
        _finder = _TorchToPlugflowFinder()
        sys.meta_path.insert(0, _finder)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        if self._enabled_here:
            disable()
        return False


def disable():
    """Undoes enable(): `import torch` finds real PyTorch again, and the real torch modules that
    were imported before enable() are restored."""
    global _finder
    if _finder is None:
        return
    sys.meta_path.remove(_finder)
    _finder = None
    for name in [n for n in sys.modules if _is_torch_name(n)]:
        module = sys.modules[name]
        if getattr(module, "__name__", "").split(".")[0] == _PLUGFLOW:
            del sys.modules[name]
    sys.modules.update(_displaced)
    _displaced.clear()
