"""Grad-mode context managers (also usable as decorators), as in torch.autograd.grad_mode."""

import functools
import inspect
import sys

from .. import _C


class _DecoratorContextManager:
    """Makes a context manager usable as a function decorator (generators included)."""

    def __call__(self, func):
        if inspect.isgeneratorfunction(func):
            @functools.wraps(func)
            def generator(*args, **kwargs):
                gen = func(*args, **kwargs)
                try:
                    with self.clone():  # sending None starts the generator
                        response = gen.send(None)
                    while True:
                        try:
                            request = yield response  # hand the value out, get the next request
                        except GeneratorExit:
                            with self.clone():
                                gen.close()
                            raise
                        except BaseException:  # thrown at us by the caller: forward it
                            with self.clone():
                                response = gen.throw(*sys.exc_info())
                        else:
                            with self.clone():
                                response = gen.send(request)
                except StopIteration as e:  # the generator is done: return what it returned
                    return e.value

            return generator

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with self.clone():
                return func(*args, **kwargs)

        return wrapper

    def clone(self):
        return self.__class__()


class no_grad(_DecoratorContextManager):
    """Disables gradient recording inside the block."""

    def __enter__(self):
        self.prev = _C.is_grad_enabled()
        _C._set_grad_enabled(False)

    def __exit__(self, *exc):
        _C._set_grad_enabled(self.prev)


class enable_grad(_DecoratorContextManager):
    """Enables gradient recording inside the block (e.g. within no_grad)."""

    def __enter__(self):
        self.prev = _C.is_grad_enabled()
        _C._set_grad_enabled(True)

    def __exit__(self, *exc):
        _C._set_grad_enabled(self.prev)


class set_grad_enabled(_DecoratorContextManager):
    """Sets grad mode on or off: immediately as a function call, or for a block."""

    def __init__(self, mode):
        self.prev = _C.is_grad_enabled()
        self.mode = bool(mode)
        _C._set_grad_enabled(self.mode)

    def __call__(self, func):
        # As a decorator, set_grad_enabled(mode) applies only while the function runs.
        _C._set_grad_enabled(self.prev)
        return super().__call__(func)

    def __enter__(self):
        pass

    def __exit__(self, *exc):
        _C._set_grad_enabled(self.prev)

    def clone(self):
        return self.__class__(self.mode)


class inference_mode(_DecoratorContextManager):
    """Like no_grad, for code that will never need gradients (PyTorch's inference_mode)."""

    def __init__(self, mode=True):
        self.mode = bool(mode)

    def __enter__(self):
        self.prev = (_C.is_inference_mode_enabled(), _C.is_grad_enabled())
        if self.mode:
            _C._set_inference_mode(True)

    def __exit__(self, *exc):
        _C._set_inference_mode(self.prev[0])
        _C._set_grad_enabled(self.prev[1])

    def clone(self):
        return self.__class__(self.mode)


def is_grad_enabled():
    return _C.is_grad_enabled()


def is_inference_mode_enabled():
    return _C.is_inference_mode_enabled()
