"""torch.autograd.profiler's spelling of plugflow.profiler (the older API scripts still use)."""
from ..profiler import EventList, FunctionEvent, FunctionEventAvg, ProfilerActivity, record_function
from ..profiler import profile as _profile

__all__ = ["profile", "record_function", "EventList", "FunctionEvent", "FunctionEventAvg"]


class profile(_profile):
    """torch.autograd.profiler.profile(enabled=True, use_cuda=False, record_shapes=False,
    profile_memory=False): `enabled=False` records nothing; `use_cuda` adds the CUDA activity."""

    def __init__(self, enabled=True, *, use_cuda=False, record_shapes=False, profile_memory=False, with_stack=False,
                 with_flops=False, with_modules=False, use_kineto=False, use_cpu=True):
        activities = ([ProfilerActivity.CPU] if use_cpu else []) + ([ProfilerActivity.CUDA] if use_cuda else [])
        super().__init__(activities=activities or None, record_shapes=record_shapes, profile_memory=profile_memory,
                         with_stack=with_stack, with_flops=with_flops, with_modules=with_modules)
        self.enabled = bool(enabled)

    def __enter__(self):
        return super().__enter__() if self.enabled else self

    def function_events(self):
        return self.events()
