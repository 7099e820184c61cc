"""plugflow.optim.lr_scheduler against torch.optim.lr_scheduler 1.13: every scheduler's lr (and,
where it cycles momentum, the momentum / Adam beta1) sequence over 30+ steps with two param groups
of different lrs, chained, sequential and stacked schedulers, ReduceLROnPlateau on a random
synthetic metric, state_dict() save and resume mid-run, resuming with last_epoch, and PyTorch's
errors for bad arguments. The same Python float arithmetic runs on both sides, so the lrs must be
equal, not merely close."""

import re
import warnings

import numpy as np
import pytest
import torch

import plugflow as pf
from plugflow.optim import lr_scheduler
from helpers import seeded_rng

STEPS = 30


@pytest.fixture
def rng():
    return seeded_rng("SCHED_SEED")


@pytest.fixture(autouse=True)
def _quiet():
    # Both libraries warn about the deprecated step(epoch) that SequentialLR uses internally.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        yield


# ---- helpers ------------------------------------------------------------------------------------

def make_optimizer(lib, name="SGD", lrs=(0.1, 0.03)):
    """An optimizer of `lib` (torch or plugflow) with one param group per lr; SGD has momentum."""
    groups = [{"params": [lib.zeros(2, requires_grad=True)], "lr": lr} for lr in lrs]
    if name == "SGD":
        return lib.optim.SGD(groups, lr=lrs[0], momentum=0.9)
    return getattr(lib.optim, name)(groups, lr=lrs[0])


def group_values(opt):
    """What a scheduler may change in each group: lr, momentum and Adam's betas."""
    return [(g["lr"], g.get("momentum"), g.get("betas")) for g in opt.param_groups]


def last_lr(scheduler):
    # torch 1.13's ReduceLROnPlateau has no get_last_lr() yet, only the attribute behind it.
    return scheduler.get_last_lr() if hasattr(scheduler, "get_last_lr") else scheduler._last_lr


def run_pair(make, steps=STEPS, optimizer="SGD", lrs=(0.1, 0.03), metrics=None):
    """Builds the scheduler(s) with make(lr_scheduler_module, optimizer) on both sides and steps
    optimizer and scheduler `steps` times, checking the groups and get_last_lr() after each
    step. Returns the plugflow scheduler and optimizer."""
    torch_opt, pf_opt = make_optimizer(torch, optimizer, lrs), make_optimizer(pf, optimizer, lrs)
    torch_sched, pf_sched = make(torch.optim.lr_scheduler, torch_opt), make(lr_scheduler, pf_opt)
    assert group_values(pf_opt) == group_values(torch_opt)
    for i in range(steps):
        torch_opt.step()
        pf_opt.step()
        if metrics is None:
            torch_sched.step()
            pf_sched.step()
        else:
            torch_sched.step(metrics[i])
            # A one-element tensor works too (float64, so no rounding changes the comparisons).
            pf_sched.step(pf.tensor([metrics[i]], dtype=pf.float64) if i % 2 else metrics[i])
        assert group_values(pf_opt) == group_values(torch_opt), i
        assert pf_sched.get_last_lr() == last_lr(torch_sched), i
    return pf_sched, pf_opt


SCHEDULERS = {
    "StepLR": lambda m, o: m.StepLR(o, step_size=3, gamma=0.5),
    "MultiStepLR": lambda m, o: m.MultiStepLR(o, milestones=[3, 7, 7, 20], gamma=0.3),
    "ExponentialLR": lambda m, o: m.ExponentialLR(o, gamma=0.9),
    "CosineAnnealingLR": lambda m, o: m.CosineAnnealingLR(o, T_max=7, eta_min=0.001),
    "CosineAnnealingLR-eta0": lambda m, o: m.CosineAnnealingLR(o, T_max=10),
    "LambdaLR": lambda m, o: m.LambdaLR(o, lr_lambda=lambda epoch: 0.95 ** epoch),
    "LambdaLR-per-group": lambda m, o: m.LambdaLR(o, lr_lambda=[lambda e: 1 / (e + 1), lambda e: 0.5 + e % 3]),
    "MultiplicativeLR": lambda m, o: m.MultiplicativeLR(o, lr_lambda=lambda epoch: 0.9 if epoch % 2 else 1.05),
    "LinearLR": lambda m, o: m.LinearLR(o, start_factor=0.25, total_iters=8),
    "LinearLR-decay": lambda m, o: m.LinearLR(o, start_factor=1.0, end_factor=0.1, total_iters=12),
    "ConstantLR": lambda m, o: m.ConstantLR(o, factor=0.5, total_iters=4),
    "PolynomialLR": lambda m, o: m.PolynomialLR(o, total_iters=20, power=2.0),
    "OneCycleLR-cos": lambda m, o: m.OneCycleLR(o, max_lr=1.0, total_steps=STEPS),
    "OneCycleLR-linear": lambda m, o: m.OneCycleLR(o, max_lr=[1.0, 0.4], epochs=3, steps_per_epoch=10,
                                                   anneal_strategy="linear", pct_start=0.4),
    "OneCycleLR-three-phase": lambda m, o: m.OneCycleLR(o, max_lr=0.5, total_steps=STEPS + 3, three_phase=True,
                                                        div_factor=10.0, final_div_factor=100.0),
    "OneCycleLR-no-momentum": lambda m, o: m.OneCycleLR(o, max_lr=0.5, total_steps=STEPS, cycle_momentum=False),
    "CyclicLR-triangular": lambda m, o: m.CyclicLR(o, base_lr=0.01, max_lr=0.1, step_size_up=4),
    "CyclicLR-triangular2": lambda m, o: m.CyclicLR(o, base_lr=[0.01, 0.02], max_lr=0.1, step_size_up=3,
                                                    step_size_down=5, mode="triangular2"),
    "CyclicLR-exp_range": lambda m, o: m.CyclicLR(o, base_lr=0.01, max_lr=0.1, step_size_up=4, mode="exp_range",
                                                  gamma=0.9),
    "CyclicLR-scale_fn": lambda m, o: m.CyclicLR(o, base_lr=0.01, max_lr=0.1, step_size_up=4,
                                                 scale_fn=lambda x: 0.97 ** x, scale_mode="iterations"),
    "CosineAnnealingWarmRestarts": lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=5, T_mult=2, eta_min=0.001),
    "SequentialLR": lambda m, o: m.SequentialLR(o, [m.LinearLR(o, start_factor=0.1, total_iters=5),
                                                    m.ExponentialLR(o, gamma=0.9)], milestones=[5]),
    "SequentialLR-three": lambda m, o: m.SequentialLR(o, [m.ConstantLR(o, factor=0.2, total_iters=3),
                                                          m.CosineAnnealingLR(o, T_max=8),
                                                          m.StepLR(o, step_size=4, gamma=0.5)], milestones=[4, 12]),
    "ChainedScheduler": lambda m, o: m.ChainedScheduler([m.ConstantLR(o, factor=0.1, total_iters=2),
                                                         m.ExponentialLR(o, gamma=0.9)]),
}


# ---- lr sequences -------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_lr_sequence_matches_torch(name):
    run_pair(SCHEDULERS[name])


@pytest.mark.parametrize("name", ["OneCycleLR-cos", "OneCycleLR-three-phase", "OneCycleLR-linear", "StepLR",
                                  "CosineAnnealingLR"])
def test_with_adam(name):
    """OneCycleLR cycles Adam's beta1 instead of momentum."""
    run_pair(SCHEDULERS[name], optimizer="Adam")


class _Stacked:
    """Two schedulers on one optimizer stepped one after the other (their factors compose)."""

    def __init__(self, *schedulers):
        self.schedulers = schedulers

    def step(self):
        for s in self.schedulers:
            s.step()

    def get_last_lr(self):
        return self.schedulers[-1].get_last_lr()


def test_stacked_schedulers():
    run_pair(lambda m, o: _Stacked(m.CosineAnnealingLR(o, T_max=9, eta_min=0.01), m.MultiStepLR(o, [4, 11], 0.5),
                                   m.LinearLR(o, start_factor=0.5, total_iters=6)))


def test_one_cycle_lr_past_total_steps_raises():
    pf_sched, _ = run_pair(lambda m, o: m.OneCycleLR(o, max_lr=0.5, total_steps=10), steps=10)
    with pytest.raises(ValueError, match="Tried to step 12 times. The specified number of total steps is 10"):
        pf_sched.step()


# ---- ReduceLROnPlateau --------------------------------------------------------------------------

def plateau_metrics(rng, n=40, mode="min"):
    """A noisy metric that improves, stalls, jumps and repeats values (ties never count as better)."""
    trend = np.concatenate([np.linspace(1.0, 0.5, n // 4), np.full(n // 4, 0.5), np.linspace(0.5, 0.45, n // 4),
                            np.full(n - 3 * (n // 4), 0.45)])
    noise = np.where(rng.random(n) < 0.5, 0.0, rng.normal(scale=0.01, size=n))
    values = trend + noise
    return [float(v) for v in (values if mode == "min" else -values)]


@pytest.mark.parametrize("mode", ["min", "max"])
@pytest.mark.parametrize("threshold_mode,threshold", [("rel", 1e-4), ("rel", 0.02), ("abs", 1e-3), ("abs", 0.0)])
@pytest.mark.parametrize("patience,cooldown", [(0, 0), (2, 0), (3, 2)])
def test_reduce_lr_on_plateau(rng, mode, threshold_mode, threshold, patience, cooldown):
    metrics = plateau_metrics(rng, mode=mode)
    run_pair(lambda m, o: m.ReduceLROnPlateau(o, mode=mode, factor=0.5, patience=patience, threshold=threshold,
                                              threshold_mode=threshold_mode, cooldown=cooldown,
                                              min_lr=[0.004, 0.001]),
             steps=len(metrics), metrics=metrics)


def test_reduce_lr_on_plateau_eps_and_min_lr(rng):
    """min_lr stops the decay, and eps skips updates smaller than itself."""
    metrics = [1.0] * 40
    sched, opt = run_pair(lambda m, o: m.ReduceLROnPlateau(o, factor=0.5, patience=1, min_lr=0.01, eps=1e-3),
                          steps=len(metrics), metrics=metrics, lrs=(0.1, 0.0015))
    assert [g["lr"] for g in opt.param_groups] == [0.01, 0.0015]


# ---- state dicts and resuming -------------------------------------------------------------------

@pytest.mark.parametrize("name", ["StepLR", "MultiStepLR", "CosineAnnealingLR", "LambdaLR", "OneCycleLR-cos",
                                  "OneCycleLR-three-phase", "CyclicLR-triangular2", "CosineAnnealingWarmRestarts",
                                  "SequentialLR", "ChainedScheduler", "LinearLR"])
def test_state_dict_resume(name):
    """Saving the optimizer and scheduler mid-run and loading both into fresh ones continues the
    same sequence as an uninterrupted torch run."""
    make = SCHEDULERS[name]
    torch_opt, pf_opt = make_optimizer(torch), make_optimizer(pf)
    torch_sched, pf_sched = make(torch.optim.lr_scheduler, torch_opt), make(lr_scheduler, pf_opt)
    for i in range(STEPS):
        if i == 12:
            opt_state, sched_state = pf_opt.state_dict(), pf_sched.state_dict()
            pf_opt = make_optimizer(pf, lrs=(0.7, 0.9))
            pf_sched = make(lr_scheduler, pf_opt)
            pf_opt.load_state_dict(opt_state)
            pf_sched.load_state_dict(sched_state)
            assert group_values(pf_opt) == group_values(torch_opt)
        torch_opt.step()
        pf_opt.step()
        torch_sched.step()
        pf_sched.step()
        assert group_values(pf_opt) == group_values(torch_opt), i
        assert pf_sched.get_last_lr() == torch_sched.get_last_lr(), i


def test_reduce_lr_on_plateau_state_dict(rng):
    metrics = plateau_metrics(rng)
    torch_opt, pf_opt = make_optimizer(torch), make_optimizer(pf)
    torch_sched = torch.optim.lr_scheduler.ReduceLROnPlateau(torch_opt, patience=2, cooldown=1)
    pf_sched = lr_scheduler.ReduceLROnPlateau(pf_opt, patience=2, cooldown=1)
    for i, metric in enumerate(metrics):
        if i == len(metrics) // 2:
            saved = pf_sched.state_dict()
            assert "optimizer" not in saved
            pf_sched = lr_scheduler.ReduceLROnPlateau(pf_opt, mode="max", patience=9)
            pf_sched.load_state_dict(saved)
        torch_sched.step(metric)
        pf_sched.step(metric)
        assert pf_sched.get_last_lr() == last_lr(torch_sched), i
    assert pf_sched.state_dict() == torch_sched.state_dict()


def test_lambda_state_dict_keeps_callable_objects_state():
    class Decay:
        def __init__(self, rate):
            self.rate = rate

        def __call__(self, epoch):
            return self.rate ** epoch

    opt = make_optimizer(pf)
    sched = lr_scheduler.LambdaLR(opt, [Decay(0.5), lambda e: 1.0])
    saved = sched.state_dict()
    assert saved["lr_lambdas"] == [{"rate": 0.5}, None] and "optimizer" not in saved
    other = lr_scheduler.LambdaLR(make_optimizer(pf), [Decay(0.9), lambda e: 1.0])
    other.load_state_dict(saved)
    assert other.lr_lambdas[0].rate == 0.5 and "lr_lambdas" in saved


@pytest.mark.parametrize("name,make", [
    ("CosineAnnealingLR", lambda m, o, e: m.CosineAnnealingLR(o, T_max=6, eta_min=0.01, last_epoch=e)),
    ("StepLR", lambda m, o, e: m.StepLR(o, step_size=4, last_epoch=e)),
    ("ExponentialLR", lambda m, o, e: m.ExponentialLR(o, gamma=0.8, last_epoch=e)),
    ("OneCycleLR", lambda m, o, e: m.OneCycleLR(o, max_lr=0.3, total_steps=40, last_epoch=e)),
])
def test_resume_with_last_epoch(name, make):
    """A scheduler built with last_epoch=k on an optimizer that already ran k epochs continues as
    torch's does (CosineAnnealingLR's first step then uses the closed form)."""
    torch_opt, pf_opt = make_optimizer(torch), make_optimizer(pf)
    make(torch.optim.lr_scheduler, torch_opt, -1)
    make(lr_scheduler, pf_opt, -1)
    torch_sched, pf_sched = make(torch.optim.lr_scheduler, torch_opt, 9), make(lr_scheduler, pf_opt, 9)
    assert group_values(pf_opt) == group_values(torch_opt)
    for i in range(20):
        torch_sched.step()
        pf_sched.step()
        assert group_values(pf_opt) == group_values(torch_opt), i


def test_step_with_epoch_uses_closed_form():
    torch_opt, pf_opt = make_optimizer(torch), make_optimizer(pf)
    torch_sched = torch.optim.lr_scheduler.MultiStepLR(torch_opt, [2, 5], gamma=0.1)
    pf_sched = lr_scheduler.MultiStepLR(pf_opt, [2, 5], gamma=0.1)
    for epoch in [3, 1, 7, 0, 5]:
        torch_sched.step(epoch)
        pf_sched.step(epoch)
        assert pf_sched.get_last_lr() == torch_sched.get_last_lr(), epoch


def test_get_lr_outside_step_warns():
    sched = lr_scheduler.StepLR(make_optimizer(pf), step_size=2)
    with pytest.warns(UserWarning, match="please use `get_last_lr\\(\\)`"):
        sched.get_lr()
    assert sched.get_last_lr() == [0.1, 0.03]
    assert lr_scheduler._LRScheduler is lr_scheduler.LRScheduler


def test_verbose_prints(capsys):
    opt = make_optimizer(pf)
    sched = lr_scheduler.ExponentialLR(opt, gamma=0.5, verbose=True)
    sched.step()
    out = capsys.readouterr().out
    assert "Adjusting learning rate of group 0 to 1.0000e-01." in out
    assert "Adjusting learning rate of group 1 to 1.5000e-02." in out


# ---- bad arguments ------------------------------------------------------------------------------

BAD = {
    "ConstantLR-factor": lambda m, o: m.ConstantLR(o, factor=1.5),
    "LinearLR-start": lambda m, o: m.LinearLR(o, start_factor=-0.1),
    "LinearLR-end": lambda m, o: m.LinearLR(o, end_factor=2.0),
    "LambdaLR-count": lambda m, o: m.LambdaLR(o, [lambda e: 1.0]),
    "MultiplicativeLR-count": lambda m, o: m.MultiplicativeLR(o, [lambda e: 1.0] * 3),
    "OneCycleLR-no-length": lambda m, o: m.OneCycleLR(o, max_lr=0.1),
    "OneCycleLR-total": lambda m, o: m.OneCycleLR(o, max_lr=0.1, total_steps=0),
    "OneCycleLR-epochs": lambda m, o: m.OneCycleLR(o, max_lr=0.1, epochs=-1, steps_per_epoch=3),
    "OneCycleLR-steps-per-epoch": lambda m, o: m.OneCycleLR(o, max_lr=0.1, epochs=2, steps_per_epoch=2.5),
    "OneCycleLR-pct": lambda m, o: m.OneCycleLR(o, max_lr=0.1, total_steps=10, pct_start=1.5),
    "OneCycleLR-anneal": lambda m, o: m.OneCycleLR(o, max_lr=0.1, total_steps=10, anneal_strategy="exp"),
    "OneCycleLR-max-lr-count": lambda m, o: m.OneCycleLR(o, max_lr=[0.1, 0.2, 0.3], total_steps=10),
    "CyclicLR-mode": lambda m, o: m.CyclicLR(o, base_lr=0.01, max_lr=0.1, mode="sine"),
    "CosineAnnealingWarmRestarts-T0": lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=0),
    "CosineAnnealingWarmRestarts-Tmult": lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=3, T_mult=0),
    "SequentialLR-milestones": lambda m, o: m.SequentialLR(o, [m.StepLR(o, 2), m.StepLR(o, 3)], milestones=[]),
    "SequentialLR-optimizer": lambda m, o: m.SequentialLR(
        o, [m.StepLR(o, 2), m.StepLR(make_optimizer(pf if m is lr_scheduler else torch), 3)], milestones=[2]),
    "ReduceLROnPlateau-factor": lambda m, o: m.ReduceLROnPlateau(o, factor=1.0),
    "ReduceLROnPlateau-mode": lambda m, o: m.ReduceLROnPlateau(o, mode="lowest"),
    "ReduceLROnPlateau-threshold-mode": lambda m, o: m.ReduceLROnPlateau(o, threshold_mode="relative"),
    "ReduceLROnPlateau-min-lr": lambda m, o: m.ReduceLROnPlateau(o, min_lr=[0.1]),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_arguments_raise_torchs_error(name):
    with pytest.raises(ValueError) as expected:
        BAD[name](torch.optim.lr_scheduler, make_optimizer(torch))
    with pytest.raises(ValueError, match=re.escape(str(expected.value))):
        BAD[name](lr_scheduler, make_optimizer(pf))


def test_cycle_momentum_needs_momentum():
    for lib, module in ((torch, torch.optim.lr_scheduler), (pf, lr_scheduler)):
        with pytest.raises(ValueError, match="optimizer must support momentum with `cycle_momentum` option enabled"):
            module.OneCycleLR(make_optimizer(lib, "Adagrad"), max_lr=0.1, total_steps=10)
        with pytest.raises(ValueError, match="optimizer must support momentum with `cycle_momentum` option enabled"):
            module.CyclicLR(make_optimizer(lib, "Adam"), base_lr=0.01, max_lr=0.1)


def test_not_an_optimizer():
    for make in (lambda o: lr_scheduler.StepLR(o, 2), lambda o: lr_scheduler.ReduceLROnPlateau(o),
                 lambda o: lr_scheduler.OneCycleLR(o, max_lr=0.1, total_steps=3)):
        with pytest.raises(TypeError, match="list is not an Optimizer"):
            make([])


def test_resume_without_initial_lr_raises():
    with pytest.raises(KeyError, match=re.escape("param 'initial_lr' is not specified in param_groups[0]")):
        lr_scheduler.StepLR(make_optimizer(pf), step_size=2, last_epoch=3)


def test_cosine_annealing_handles_float_T_max():
    run_pair(lambda m, o: m.CosineAnnealingLR(o, T_max=4.5))
