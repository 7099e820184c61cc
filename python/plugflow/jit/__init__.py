"""plugflow.jit (torch.jit): TorchScript's names, with PyTorch's behaviour under PYTORCH_JIT=0.

plugflow has no TorchScript compiler: code runs eagerly. As PyTorch does when scripting is
disabled (PYTORCH_JIT=0), script() and trace() return the function or module unchanged, so code
that scripts a model for speed still runs, eagerly; the first such call in a process warns that
nothing was compiled. The decorators (ignore, unused, export, _overload_method, ...) return what
they decorate, is_scripting() and is_tracing() are False. save() and load(), which need
TorchScript's serialized programs, raise NotImplementedError.
"""

import typing
import warnings

from ..nn.modules.module import Module
from . import annotations  # noqa: F401

__all__ = ["script", "trace", "trace_module", "script_if_tracing", "ignore", "unused", "export", "interface",
           "is_scripting", "is_tracing", "annotate", "Attribute", "Final", "ScriptModule", "ScriptFunction",
           "RecursiveScriptModule", "script_method", "save", "load"]

Final = typing.Final

_warned = set()  # the functions that already warned in this process


def _warn_once(name):
    if name not in _warned:
        _warned.add(name)
        warnings.warn(f"torch.jit.{name}: plugflow has no TorchScript compiler; the code is returned unchanged and "
                      "runs eagerly (as PyTorch does under PYTORCH_JIT=0)", stacklevel=3)


def script(obj, optimize=None, _frames_up=0, _rcb=None, example_inputs=None):
    """Returns obj (a function, module or class) unchanged, warning once."""
    _warn_once("script")
    return obj


def trace(func, example_inputs=None, optimize=None, check_trace=True, check_inputs=None, check_tolerance=1e-5,
          strict=True, _force_outplace=False, _module_class=None, _compilation_unit=None):
    """Returns func (a function or module) unchanged, warning once."""
    _warn_once("trace")
    return func


def trace_module(mod, inputs, optimize=None, check_trace=True, check_inputs=None, check_tolerance=1e-5,
                 strict=True, _force_outplace=False, _module_class=None, _compilation_unit=None):
    """Returns mod unchanged, warning once."""
    _warn_once("trace_module")
    return mod


def script_if_tracing(fn):
    """Returns fn: nothing is ever traced."""
    return fn


_script_if_tracing = script_if_tracing


def is_scripting():
    """False: code always runs eagerly."""
    return False


def is_tracing():
    """False: plugflow does not trace."""
    return False


def ignore(drop=False, **kwargs):
    """@torch.jit.ignore and @torch.jit.ignore(drop): return the function."""
    if callable(drop):
        return drop
    return lambda fn: fn


def _return_argument(fn):
    return fn


# Decorators that only instruct the TorchScript compiler: the decorated object is returned.
unused = export = interface = script_method = _overload = _overload_method = _return_argument


def annotate(the_type, the_value):
    """Returns the_value (the type is for TorchScript)."""
    return the_value


def Attribute(value, type):  # noqa: N802,A002  (torch.jit.Attribute's signature)
    """Returns value (the type is for TorchScript)."""
    return value


class ScriptModule(Module):
    """A plain Module, as torch.jit.ScriptModule is under PYTORCH_JIT=0: its methods run eagerly."""


class RecursiveScriptModule(ScriptModule):
    """No module is ever a RecursiveScriptModule here (script() returns modules unchanged); the class
    exists for isinstance checks."""


class ScriptFunction:
    """No function is ever a ScriptFunction here; the class exists for isinstance checks."""


def _refuse(name):
    def refused(*args, **kwargs):
        raise NotImplementedError(f"torch.jit.{name}: plugflow has no TorchScript programs to save or load; save the "
                                  "model's state_dict() with torch.save and load it into the model's class")

    refused.__name__ = refused.__qualname__ = name
    return refused


save = _refuse("save")
load = _refuse("load")
