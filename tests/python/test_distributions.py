"""plugflow.distributions against torch.distributions (PyTorch 1.13): log_prob, entropy, cdf, icdf,
moments and KL divergences and their float64 gradients on the same random parameters; shapes,
expand and enumerate_support; argument validation and its exceptions; constraints and transforms;
and the samplers, which draw from plugflow's generator (so they cannot be compared draw by draw
with torch): their reproducibility under manual_seed, their support, and their statistics (mean,
variance and frequencies within 6 standard errors of the exact values, for any seed)."""

import math

import numpy as np
import pytest
import torch
import torch.distributions as TD

import plugflow as pf
import plugflow.distributions as PD
from helpers import assert_matches, assert_same_outcome, backward_both, from_torch, seeded_rng, to_torch

LIBS = {pf: PD, torch: TD}


def _tensor(lib, array, grad=False):
    x = lib.from_numpy(np.array(array, dtype=np.float64, copy=True))
    return x.requires_grad_() if grad else x


def _spd(rng, n, batch=()):
    """Random symmetric positive-definite matrices (well conditioned)."""
    a = rng.normal(size=batch + (n, n))
    return a @ np.swapaxes(a, -1, -2) + n * np.eye(n)


def _tril(rng, n, batch=()):
    """Random lower Cholesky factors (positive diagonal)."""
    return np.tril(rng.normal(size=batch + (n, n)), -1) + np.eye(n) * rng.uniform(0.5, 2.0, size=batch + (1, n))


# Each case: the parameters drawn from rng (name -> numpy array; the differentiable ones) and
# how to build the distribution from them with a library's tensors (D is its distributions module).
CASES = {
    "Normal": (lambda r: {"loc": r.normal(size=(3, 4)), "scale": r.uniform(0.5, 2, size=(3, 4))},
               lambda D, p: D.Normal(p["loc"], p["scale"])),
    "Uniform": (lambda r: {"low": r.uniform(-2, 0, size=(5,)), "high": r.uniform(0.5, 2, size=(5,))},
                lambda D, p: D.Uniform(p["low"], p["high"])),
    "Bernoulli_probs": (lambda r: {"probs": r.uniform(0.05, 0.95, size=(2, 3))},
                        lambda D, p: D.Bernoulli(probs=p["probs"])),
    "Bernoulli_logits": (lambda r: {"logits": r.normal(size=(2, 3)) * 2},
                         lambda D, p: D.Bernoulli(logits=p["logits"])),
    "Categorical_probs": (lambda r: {"probs": r.uniform(0.1, 1, size=(3, 5))},
                          lambda D, p: D.Categorical(probs=p["probs"])),
    "Categorical_logits": (lambda r: {"logits": r.normal(size=(2, 3, 4))},
                           lambda D, p: D.Categorical(logits=p["logits"])),
    "OneHotCategorical": (lambda r: {"logits": r.normal(size=(3, 4))},
                          lambda D, p: D.OneHotCategorical(logits=p["logits"])),
    "Exponential": (lambda r: {"rate": r.uniform(0.5, 3, size=(4,))},
                    lambda D, p: D.Exponential(p["rate"])),
    "Laplace": (lambda r: {"loc": r.normal(size=(4,)), "scale": r.uniform(0.5, 2, size=(4,))},
                lambda D, p: D.Laplace(p["loc"], p["scale"])),
    "LogNormal": (lambda r: {"loc": r.normal(size=(4,)) * 0.5, "scale": r.uniform(0.3, 1, size=(4,))},
                  lambda D, p: D.LogNormal(p["loc"], p["scale"])),
    "Independent": (lambda r: {"loc": r.normal(size=(2, 3)), "scale": r.uniform(0.5, 2, size=(2, 3))},
                    lambda D, p: D.Independent(D.Normal(p["loc"], p["scale"]), 1)),
    "MVN_scale_tril": (lambda r: {"loc": r.normal(size=(2, 3)), "scale_tril": _tril(r, 3, (2,))},
                       lambda D, p: D.MultivariateNormal(p["loc"], scale_tril=p["scale_tril"])),
    "MVN_covariance": (lambda r: {"loc": r.normal(size=(3,)), "covariance_matrix": _spd(r, 3, (2,))},
                       lambda D, p: D.MultivariateNormal(p["loc"], covariance_matrix=p["covariance_matrix"])),
    "MVN_precision": (lambda r: {"loc": r.normal(size=(2, 4)), "precision_matrix": _spd(r, 4)},
                      lambda D, p: D.MultivariateNormal(p["loc"], precision_matrix=p["precision_matrix"])),
    "Binomial_probs": (lambda r: {"probs": r.uniform(0.05, 0.95, size=(4,))},
                       lambda D, p: D.Binomial(_like(p["probs"], [3.0, 10, 40, 200]), probs=p["probs"])),
    "Binomial_logits": (lambda r: {"logits": r.normal(size=(3,))},
                        lambda D, p: D.Binomial(7, logits=p["logits"])),
    "Poisson": (lambda r: {"rate": r.uniform(0.5, 40, size=(5,))},
                lambda D, p: D.Poisson(p["rate"])),
    "Gamma": (lambda r: {"concentration": r.uniform(0.3, 5, size=(2, 3)), "rate": r.uniform(0.5, 2, size=(2, 3))},
              lambda D, p: D.Gamma(p["concentration"], p["rate"])),
    "Chi2": (lambda r: {"df": r.uniform(0.5, 8, size=(4,))}, lambda D, p: D.Chi2(p["df"])),
    "Beta": (lambda r: {"c1": r.uniform(0.5, 4, size=(4,)), "c0": r.uniform(0.5, 4, size=(4,))},
             lambda D, p: D.Beta(p["c1"], p["c0"])),
    "Dirichlet": (lambda r: {"concentration": r.uniform(0.5, 4, size=(2, 4))},
                  lambda D, p: D.Dirichlet(p["concentration"])),
    "StudentT": (lambda r: {"df": r.uniform(0.5, 10, size=(5,)), "loc": r.normal(size=(5,)),
                            "scale": r.uniform(0.5, 2, size=(5,))},
                 lambda D, p: D.StudentT(p["df"], p["loc"], p["scale"])),
    "Cauchy": (lambda r: {"loc": r.normal(size=(2, 3)), "scale": r.uniform(0.5, 2, size=(2, 3))},
               lambda D, p: D.Cauchy(p["loc"], p["scale"])),
    "HalfNormal": (lambda r: {"scale": r.uniform(0.5, 2, size=(4,))}, lambda D, p: D.HalfNormal(p["scale"])),
    "Gumbel": (lambda r: {"loc": r.normal(size=(4,)), "scale": r.uniform(0.5, 2, size=(4,))},
               lambda D, p: D.Gumbel(p["loc"], p["scale"])),
    "Geometric_probs": (lambda r: {"probs": r.uniform(0.1, 1, size=(5,))}, lambda D, p: D.Geometric(probs=p["probs"])),
    "Geometric_logits": (lambda r: {"logits": r.normal(size=(2, 3))}, lambda D, p: D.Geometric(logits=p["logits"])),
    "Multinomial_probs": (lambda r: {"probs": r.uniform(0.1, 1, size=(2, 4))},
                          lambda D, p: D.Multinomial(9, probs=p["probs"])),
    "Multinomial_logits": (lambda r: {"logits": r.normal(size=(3,))}, lambda D, p: D.Multinomial(4, logits=p["logits"])),
    "Mixture_Normal": (lambda r: {"logits": r.normal(size=(2, 3)), "loc": r.normal(size=(2, 3)) * 2,
                                  "scale": r.uniform(0.5, 2, size=(2, 3))},
                       lambda D, p: D.MixtureSameFamily(D.Categorical(logits=p["logits"]),
                                                        D.Normal(p["loc"], p["scale"]))),
    "Mixture_Independent": (lambda r: {"probs": r.uniform(0.1, 1, size=(4,)), "loc": r.normal(size=(4, 2)),
                                       "scale": r.uniform(0.5, 2, size=(4, 2))},
                            lambda D, p: D.MixtureSameFamily(D.Categorical(p["probs"]),
                                                             D.Independent(D.Normal(p["loc"], p["scale"]), 1))),
    "RelaxedBernoulli": (lambda r: {"temperature": r.uniform(0.3, 2), "logits": r.normal(size=(2, 3))},
                         lambda D, p: D.RelaxedBernoulli(p["temperature"], logits=p["logits"])),
    "LogitRelaxedBernoulli": (lambda r: {"temperature": r.uniform(0.3, 2, size=(3,)),
                                         "probs": r.uniform(0.1, 0.9, size=(3,))},
                              lambda D, p: D.relaxed_bernoulli.LogitRelaxedBernoulli(p["temperature"], p["probs"])),
    "RelaxedOneHotCategorical": (lambda r: {"temperature": r.uniform(0.5, 2), "probs": r.uniform(0.1, 1, size=(2, 4))},
                                 lambda D, p: D.RelaxedOneHotCategorical(p["temperature"], p["probs"])),
    "ExpRelaxedCategorical": (lambda r: {"temperature": r.uniform(0.3, 2), "logits": r.normal(size=(2, 3))},
                              lambda D, p: D.relaxed_categorical.ExpRelaxedCategorical(p["temperature"],
                                                                                       logits=p["logits"])),
    "LowRankMVN": (lambda r: {"loc": r.normal(size=(2, 4)), "cov_factor": r.normal(size=(4, 2)),
                              "cov_diag": r.uniform(0.5, 2, size=(2, 4))},
                   lambda D, p: D.LowRankMultivariateNormal(p["loc"], p["cov_factor"], p["cov_diag"])),
    "Pareto": (lambda r: {"scale": r.uniform(0.5, 2, size=(4,)), "alpha": r.uniform(0.5, 4, size=(4,))},
               lambda D, p: D.Pareto(p["scale"], p["alpha"])),
    "Weibull": (lambda r: {"scale": r.uniform(0.5, 2, size=(2, 3)), "concentration": r.uniform(0.5, 3, size=(2, 3))},
                lambda D, p: D.Weibull(p["scale"], p["concentration"])),
    "NegativeBinomial_probs": (lambda r: {"total_count": r.uniform(0.5, 10, size=(4,)),
                                          "probs": r.uniform(0.05, 0.9, size=(4,))},
                               lambda D, p: D.NegativeBinomial(p["total_count"], probs=p["probs"])),
    "NegativeBinomial_logits": (lambda r: {"logits": r.normal(size=(2, 3))},
                                lambda D, p: D.NegativeBinomial(5.0, logits=p["logits"])),
    "LogisticNormal": (lambda r: {"loc": r.normal(size=(2, 3)), "scale": r.uniform(0.5, 2, size=(2, 3))},
                       lambda D, p: D.LogisticNormal(p["loc"], p["scale"])),
    "Kumaraswamy": (lambda r: {"c1": r.uniform(0.5, 4, size=(4,)), "c0": r.uniform(0.5, 4, size=(4,))},
                    lambda D, p: D.Kumaraswamy(p["c1"], p["c0"])),
    "FisherSnedecor": (lambda r: {"df1": r.uniform(0.5, 10, size=(5,)), "df2": r.uniform(0.5, 10, size=(5,))},
                       lambda D, p: D.FisherSnedecor(p["df1"], p["df2"])),
    "VonMises": (lambda r: {"loc": r.normal(size=(2, 3)) * 2, "concentration": r.uniform(0.2, 8, size=(2, 3))},
                 lambda D, p: D.VonMises(p["loc"], p["concentration"])),
    "ContinuousBernoulli_probs": (lambda r: {"probs": np.concatenate([r.uniform(0.02, 0.98, size=(4,)),
                                                                      r.uniform(0.4995, 0.5005, size=(2,))])},
                                 lambda D, p: D.ContinuousBernoulli(probs=p["probs"])),
    "ContinuousBernoulli_logits": (lambda r: {"logits": r.normal(size=(2, 3)) * 2},
                                   lambda D, p: D.ContinuousBernoulli(logits=p["logits"])),
    "Tanh_Normal": (lambda r: {"loc": r.normal(size=(2, 3)) * 0.5, "scale": r.uniform(0.2, 1, size=(2, 3))},
                    lambda D, p: D.TransformedDistribution(D.Normal(p["loc"], p["scale"]), [
                        D.transforms.TanhTransform(), D.transforms.AffineTransform(1.0, 2.0)])),
    "Sigmoid_Normal": (lambda r: {"loc": r.normal(size=(3,)), "scale": r.uniform(0.2, 1, size=(3,))},
                       lambda D, p: D.TransformedDistribution(D.Normal(p["loc"], p["scale"]),
                                                              D.transforms.SigmoidTransform())),
    "Affine_event": (lambda r: {"loc": r.normal(size=(2, 3)), "shift": r.normal(size=(3,)),
                                "factor": r.uniform(0.5, 2, size=(3,)) * r.choice([-1, 1], size=(3,))},
                     lambda D, p: D.TransformedDistribution(D.Independent(D.Normal(p["loc"], 1.0), 1),
                                                            D.transforms.AffineTransform(p["shift"], p["factor"],
                                                                                         event_dim=1))),
}


def _like(t, values):
    """values as a tensor of t's library and dtype."""
    return (pf if isinstance(t, pf.Tensor) else torch).tensor(values, dtype=t.dtype)


def _build(case, params):
    """The case's distribution from both libraries, over float64 leaves that require grad."""
    _, build = CASES[case]
    p_params = {k: _tensor(pf, v, grad=True) for k, v in params.items()}
    t_params = {k: _tensor(torch, v, grad=True) for k, v in params.items()}
    return build(PD, p_params), build(TD, t_params), p_params, t_params


def _assert_grads(p_params, t_params):
    for name, t in t_params.items():
        if t.grad is None:
            assert p_params[name].grad is None, name
        else:
            assert_matches(p_params[name].grad, t.grad, rtol=1e-7, atol=1e-9)
        p_params[name].grad = None
        t.grad = None


def _draw_values(d_t, shape=(6,)):
    """Values to score: draws of torch's distribution (torch seeded from the test's rng)."""
    with torch.no_grad():
        return d_t.sample(shape)


@pytest.mark.parametrize("case", sorted(CASES))
def test_scores_and_moments_match_torch(case):
    """log_prob (and its gradient with respect to every parameter and, for continuous
    distributions, the value), entropy, cdf, icdf, mean, variance, stddev and mode (with their
    gradients), shapes and support flags, on torch's draws."""
    rng = seeded_rng()
    torch.manual_seed(int(rng.integers(2**31)))
    params = CASES[case][0](rng)
    d_p, d_t, p_params, t_params = _build(case, params)
    assert d_p.batch_shape == d_t.batch_shape and d_p.event_shape == d_t.event_shape
    assert d_p.has_rsample == d_t.has_rsample and d_p.has_enumerate_support == d_t.has_enumerate_support
    assert type(d_p.support).__name__ == type(d_t.support).__name__

    def fresh():
        """The distributions again over the same leaves (a lazily computed parameter, probs from
        logits, keeps the graph that a backward through it frees)."""
        _, build = CASES[case]
        return build(PD, p_params), build(TD, t_params)

    value_t = _draw_values(d_t)
    value_p = from_torch(value_t)
    continuous = not d_t.support.is_discrete
    if continuous:  # the score d log p / d x too (Langevin dynamics, score matching)
        value_p.requires_grad_()
        value_t.requires_grad_()
    lp_p, lp_t = d_p.log_prob(value_p), d_t.log_prob(value_t)
    assert_matches(lp_p, lp_t, rtol=1e-7, atol=1e-9)
    backward_both(rng, lp_p, lp_t)
    _assert_grads(p_params, t_params)
    if continuous:
        if value_t.grad is None:  # Uniform's density is flat
            assert value_p.grad is None
        else:
            assert_matches(value_p.grad, value_t.grad, rtol=1e-7, atol=1e-9)
        value_p, value_t = value_p.detach(), value_t.detach()

    for name in ("mean", "variance", "stddev", "mode"):
        d_p, d_t = fresh()
        try:
            expected = getattr(d_t, name)
        except NotImplementedError:
            with pytest.raises(NotImplementedError):
                getattr(d_p, name)
            continue
        assert_matches(getattr(d_p, name), expected, rtol=1e-7, atol=1e-9)

    def compare(method, *args):
        d_p, d_t = fresh()
        try:
            expected = getattr(d_t, method)(*(to_torch(a) for a in args))
        except Exception as e:  # noqa: BLE001 - the same exception class is expected
            with pytest.raises(type(e)):
                getattr(d_p, method)(*args)
            return
        actual = getattr(d_p, method)(*args)
        assert_matches(actual, expected, rtol=1e-7, atol=1e-9)
        if expected.requires_grad:
            backward_both(rng, actual, expected)
            _assert_grads(p_params, t_params)

    compare("entropy")
    compare("cdf", value_p)
    probabilities = from_torch(torch.from_numpy(rng.uniform(0.05, 0.95, size=tuple(d_t.batch_shape))))
    compare("icdf", probabilities)


def test_rsample_is_reparameterized():
    """rsample's draws are differentiable functions of the parameters: d x / d loc = 1 and
    d x / d scale = (x - loc) / scale for the location-scale families; Exponential's x = eps / rate;
    MultivariateNormal's x = loc + L eps."""
    pf.manual_seed(3)
    loc = pf.tensor([0.5, -1.0], dtype=pf.float64, requires_grad=True)
    scale = pf.tensor([2.0, 0.5], dtype=pf.float64, requires_grad=True)
    for cls in (PD.Normal, PD.Laplace):
        x = cls(loc, scale).rsample((1000,))
        x.sum().backward()
        assert_matches(loc.grad, torch.tensor([1000.0, 1000.0], dtype=torch.float64))
        eps = ((x - loc) / scale).detach()
        assert_matches(scale.grad, to_torch(eps.sum(0)))
        loc.grad = scale.grad = None

    rate = pf.tensor([0.5, 3.0], dtype=pf.float64, requires_grad=True)
    x = PD.Exponential(rate).rsample((500,))
    x.sum().backward()
    assert_matches(rate.grad, to_torch(-(x / rate).sum(0).detach()))

    L = pf.tensor([[1.0, 0.0], [0.5, 2.0]], dtype=pf.float64, requires_grad=True)
    x = PD.MultivariateNormal(loc, scale_tril=L).rsample((300,))
    x.sum().backward()
    eps = to_torch(x.detach() - loc.detach()) @ torch.linalg.inv(to_torch(L.detach())).T
    assert_matches(L.grad, eps.sum(0).expand(2, 2), atol=1e-9)  # d sum(x) / d L_ij = sum eps_j

    x = PD.TransformedDistribution(PD.Normal(loc, scale), [PD.transforms.TanhTransform()]).rsample((200,))
    assert x.requires_grad and bool(((x > -1) & (x < 1)).all())


def test_lowrank_mvn_matrices_match_torch():
    """LowRankMultivariateNormal's scale_tril, covariance_matrix and precision_matrix (composed
    Cholesky factorization and triangular solve) and their float64 gradients."""
    rng = seeded_rng()
    loc, W, D = rng.normal(size=(2, 3)), rng.normal(size=(3, 2)), rng.uniform(0.5, 2, size=(2, 3))
    for name in ("scale_tril", "covariance_matrix", "precision_matrix"):
        leaves = {lib: [_tensor(lib, a, grad=True) for a in (loc, W, D)] for lib in (pf, torch)}
        results = {lib: getattr(LIBS[lib].LowRankMultivariateNormal(*leaves[lib]), name) for lib in (pf, torch)}
        assert_matches(results[pf], results[torch], rtol=1e-7, atol=1e-9)
        backward_both(rng, results[pf], results[torch])
        for a, b in zip(leaves[pf][1:], leaves[torch][1:]):
            assert_matches(a.grad, b.grad, rtol=1e-7, atol=1e-9)


def test_samples_reproduce_under_manual_seed():
    """Every sampler draws from plugflow's default generator: the same seed, the same draws."""
    dists = [case_build(PD) for case_build in _SAMPLED.values()]
    for d in dists:
        pf.manual_seed(1234)
        first = d.sample((7,))
        pf.manual_seed(1234)
        assert bool((d.sample((7,)) == first).all()), d
        assert d.sample((7,)).shape == d._extended_shape((7,))


def _p(*values):
    return pf.tensor(list(values), dtype=pf.float64)


# Distributions whose draws are checked statistically (built from plugflow tensors).
_SAMPLED = {
    "Normal": lambda D: D.Normal(_p(0.0, 3.0), _p(1.0, 0.1)),
    "Uniform": lambda D: D.Uniform(_p(-1.0, 2.0), _p(1.0, 2.5)),
    "Exponential": lambda D: D.Exponential(_p(0.5, 4.0)),
    "Laplace": lambda D: D.Laplace(_p(1.0, -2.0), _p(0.5, 2.0)),
    "LogNormal": lambda D: D.LogNormal(_p(0.0, 1.0), _p(0.25, 0.5)),
    "Bernoulli": lambda D: D.Bernoulli(_p(0.1, 0.5, 0.97)),
    "MVN": lambda D: D.MultivariateNormal(_p(1.0, -1.0), scale_tril=pf.tensor([[1.0, 0.0], [0.8, 0.6]],
                                                                            dtype=pf.float64)),
    "Poisson": lambda D: D.Poisson(_p(0.0, 0.7, 4.5, 9.99, 10.0, 37.0, 400.0)),
    "Binomial": lambda D: D.Binomial(_p(0, 5, 30, 40, 100, 1000, 60, 20), _p(0.3, 0.3, 0.2, 0.5, 0.95, 0.01, 1.0, 0.0)),
    "Tanh": lambda D: D.TransformedDistribution(D.Normal(_p(0.0), _p(2.0)), D.transforms.TanhTransform()),
    "Gamma": lambda D: D.Gamma(_p(0.05, 0.6, 1.0, 3.0, 40.0), _p(1.0, 2.0, 0.5, 1.0, 4.0)),
    "Chi2": lambda D: D.Chi2(_p(1.0, 7.0)),
    "Beta": lambda D: D.Beta(_p(0.3, 2.0, 5.0), _p(0.7, 2.0, 1.5)),
    "Dirichlet": lambda D: D.Dirichlet(pf.tensor([[0.4, 1.0, 3.0], [5.0, 5.0, 5.0]], dtype=pf.float64)),
    "StudentT": lambda D: D.StudentT(_p(6.0, 30.0), _p(1.0, -1.0), _p(2.0, 0.5)),
    "HalfNormal": lambda D: D.HalfNormal(_p(0.5, 3.0)),
    "Gumbel": lambda D: D.Gumbel(_p(1.0, -2.0), _p(0.5, 2.0)),
    "Geometric": lambda D: D.Geometric(_p(0.05, 0.5, 1.0)),
    "RelaxedBernoulli": lambda D: D.RelaxedBernoulli(_p(0.5), _p(0.1, 0.5, 0.9)),
    "RelaxedOneHotCategorical": lambda D: D.RelaxedOneHotCategorical(_p(0.7), _p(0.2, 0.3, 0.5)),
    "LowRankMVN": lambda D: D.LowRankMultivariateNormal(_p(1.0, -1.0, 0.0), _p(1.0, 0.5, -2.0).view(3, 1),
                                                        _p(0.5, 1.0, 0.1)),
    "Pareto": lambda D: D.Pareto(_p(1.0, 0.5), _p(5.0, 9.0)),
    "Weibull": lambda D: D.Weibull(_p(1.0, 2.0), _p(0.7, 3.0)),
    "NegativeBinomial": lambda D: D.NegativeBinomial(_p(0.5, 3.0, 20.0), _p(0.3, 0.5, 0.1)),
    "Kumaraswamy": lambda D: D.Kumaraswamy(_p(0.5, 2.0, 5.0), _p(0.7, 2.0, 1.5)),
    "FisherSnedecor": lambda D: D.FisherSnedecor(_p(3.0, 10.0), _p(30.0, 50.0)),
    "LogisticNormal": lambda D: D.LogisticNormal(_p(0.0, 1.0), _p(0.5, 1.5)),
    "VonMises": lambda D: D.VonMises(_p(0.0, 1.0, -3.0), _p(0.05, 2.0, 20.0)),
    "ContinuousBernoulli": lambda D: D.ContinuousBernoulli(_p(0.05, 0.3, 0.5, 0.9)),
    "Multinomial": lambda D: D.Multinomial(10, pf.tensor([[0.1, 0.6, 0.3], [0.0, 0.5, 0.5]], dtype=pf.float64)),
    "Mixture": lambda D: D.MixtureSameFamily(D.Categorical(pf.tensor([[0.2, 0.8], [0.5, 0.5]], dtype=pf.float64)),
                                             D.Normal(pf.tensor([[-3.0, 1.0], [0.0, 5.0]], dtype=pf.float64),
                                                      _p(0.5, 1.5))),
}


def _t(*values):
    return torch.tensor(values, dtype=torch.float64)


# torch's twins of the _SAMPLED distributions without closed-form moments.
_TORCH_REFERENCE = {
    "Tanh": lambda: TD.TransformedDistribution(TD.Normal(_t(0.0), _t(2.0)), TD.transforms.TanhTransform()),
    "RelaxedBernoulli": lambda: TD.RelaxedBernoulli(_t(0.5), _t(0.1, 0.5, 0.9)),
    "RelaxedOneHotCategorical": lambda: TD.RelaxedOneHotCategorical(_t(0.7), _t(0.2, 0.3, 0.5)),
    "LogisticNormal": lambda: TD.LogisticNormal(_t(0.0, 1.0), _t(0.5, 1.5)),
    "VonMises": lambda: TD.VonMises(_t(0.0, 1.0, -3.0), _t(0.05, 2.0, 20.0)),  # its moments are circular
}


@pytest.mark.parametrize("name", sorted(_SAMPLED))
def test_sample_statistics(name):
    """The draws lie in the support, have the parameters' dtype and the distribution's shape, and
    their mean and variance lie within 6 standard errors of the exact ones (the errors estimated
    from the draws' own second and fourth moments), for any seed."""
    rng = seeded_rng(seed_plugflow=True)
    d = _SAMPLED[name](PD)
    n = 20000
    x = d.sample((n,))
    assert x.dtype == pf.float64 and tuple(x.shape) == (n,) + tuple(d.batch_shape + d.event_shape)
    assert bool(d.support.check(x).all())
    x = to_torch(x)
    if name in _TORCH_REFERENCE:
        # no closed-form moments: compare with as many of torch's draws, whose estimates carry an
        # error too (the difference has sqrt(2) standard errors)
        torch.manual_seed(int(rng.integers(2**31)))
        reference = _TORCH_REFERENCE[name]().sample((n,))
        exact_mean, exact_var, spread = reference.mean(0), reference.var(0), math.sqrt(2)
    else:
        exact_mean, exact_var, spread = to_torch(d.mean), to_torch(d.variance), 1.0
    centered = x - x.mean(0)
    mean_se = spread * (centered.var(0) / n).sqrt()
    var_se = spread * ((centered ** 4).mean(0) - centered.var(0) ** 2).clamp(min=0).sqrt() / math.sqrt(n)
    assert ((x.mean(0) - exact_mean).abs() <= 6 * mean_se + 1e-12).all(), (x.mean(0), exact_mean)
    # the variance's error beyond first order is (mean - exact mean)^2: Bernoulli(1/2)'s sample
    # variance has no first-order error (var_se is 0) but this one
    assert ((x.var(0) - exact_var).abs() <= 6 * var_se + (6 * mean_se) ** 2 + 1e-12).all(), (x.var(0), exact_var)


@pytest.mark.parametrize("name", ["Poisson", "Binomial", "Categorical"])
def test_discrete_sample_frequencies(name):
    """Each value's frequency is within 6 standard errors (plus 5 draws, for the rare values) of its
    exact probability (torch's pmf), for the regimes of each sampler (Poisson below and above rate
    10, Binomial by inversion and by BTRS, with p above and below 1/2)."""
    seeded_rng(seed_plugflow=True)
    n = 20000
    if name == "Poisson":
        params = [2.0, 9.5, 12.0, 80.0]
        d_p, d_t = PD.Poisson(_p(*params)), TD.Poisson(torch.tensor(params, dtype=torch.float64))
        support = torch.arange(0, 160, dtype=torch.float64)
    elif name == "Binomial":
        counts, probs = [12.0, 12.0, 60.0, 150.0], [0.3, 0.8, 0.45, 0.9]
        d_p = PD.Binomial(_p(*counts), _p(*probs))
        d_t = TD.Binomial(torch.tensor(counts, dtype=torch.float64), torch.tensor(probs, dtype=torch.float64),
                          validate_args=False)
        support = torch.arange(0, 151, dtype=torch.float64)
    else:
        probs = [[0.05, 0.6, 0.35, 0.0], [0.25, 0.25, 0.25, 0.25]]
        d_p, d_t = PD.Categorical(pf.tensor(probs)), TD.Categorical(torch.tensor(probs))
        support = torch.arange(4)
    x = to_torch(d_p.sample((n,)))
    assert tuple(x.shape) == (n,) + tuple(d_t.batch_shape)
    values = support.view(-1, *([1] * len(d_t.batch_shape)))
    frequencies = (x.unsqueeze(0) == values.unsqueeze(1)).double().mean(1)
    with torch.no_grad():
        exact = d_t.log_prob(values.expand(-1, *d_t.batch_shape)).exp().double()
    if name == "Binomial":
        exact = exact.where(values <= d_t.total_count, torch.zeros(1, dtype=torch.float64))
    se = (exact * (1 - exact) / n).sqrt()
    assert ((frequencies - exact).abs() <= 6 * se + 5 / n).all()
    assert frequencies.sum(0).allclose(torch.ones(1, dtype=torch.float64))


def test_shapes_expand_and_enumerate_support():
    def shapes(lib):
        D = LIBS[lib]
        logits = lib.zeros(2, 3)
        results = []
        for d in (D.Categorical(logits=logits), D.OneHotCategorical(logits=logits), D.Bernoulli(logits=logits),
                  D.Normal(lib.zeros(2, 1), 1.0), D.Normal(0.0, 1.0),
                  D.Independent(D.Normal(lib.zeros(2, 3), lib.ones(2, 3)), 2),
                  D.MultivariateNormal(lib.zeros(3), scale_tril=lib.eye(3)),
                  D.Binomial(4, lib.full((2,), 0.5)), D.LogNormal(lib.zeros(3), 1.0)):
            results += [tuple(d.batch_shape), tuple(d.event_shape), tuple(d.sample().shape),
                        tuple(d.sample((4, 1)).shape)]
            expanded = d.expand((5,) + tuple(d.batch_shape))
            results += [tuple(expanded.batch_shape), tuple(expanded.sample((2,)).shape)]
            if d.has_enumerate_support:
                results += [d.enumerate_support(), d.enumerate_support(expand=False)]
        return tuple(r if isinstance(r, lib.Tensor) else str(r) for r in results)

    assert_same_outcome(shapes)
    assert_same_outcome(lambda lib: LIBS[lib].Independent(LIBS[lib].Normal(lib.zeros(2), 1.0), 1)
                        .enumerate_support())


@pytest.mark.parametrize("fn", [
    lambda lib, D: D.Normal(lib.tensor([0.0]), lib.tensor([-1.0])),
    lambda lib, D: D.Normal(0.0, 0.0),
    lambda lib, D: D.Normal(0.0, float("nan")),
    lambda lib, D: D.Uniform(1.0, 1.0),
    lambda lib, D: D.Bernoulli(lib.tensor([1.5])),
    lambda lib, D: D.Bernoulli(probs=0.5, logits=0.0),
    lambda lib, D: D.Bernoulli(),
    lambda lib, D: D.Categorical(lib.tensor(0.5)),
    lambda lib, D: D.Categorical(lib.tensor([0.5, -0.1])),
    lambda lib, D: D.Categorical(logits=lib.tensor([0.0, float("nan")])),
    lambda lib, D: D.Exponential(lib.tensor([0.0])),
    lambda lib, D: D.Laplace(0.0, -2.0),
    lambda lib, D: D.Poisson(lib.tensor([-1.0])),
    lambda lib, D: D.Binomial(lib.tensor([2.5]), lib.tensor([0.5])),
    lambda lib, D: D.Binomial(lib.tensor([-1.0]), lib.tensor([0.5])),
    lambda lib, D: D.Independent(D.Normal(lib.zeros(2), 1.0), 2),
    lambda lib, D: D.MultivariateNormal(lib.zeros(2)),
    lambda lib, D: D.MultivariateNormal(lib.tensor(0.0), scale_tril=lib.eye(2)),
    lambda lib, D: D.MultivariateNormal(lib.zeros(2), scale_tril=lib.tensor([[1.0, 1.0], [0.0, 1.0]])),
    lambda lib, D: D.MultivariateNormal(lib.zeros(2), scale_tril=lib.tensor([[-1.0, 0.0], [0.0, 1.0]])),
    lambda lib, D: D.MultivariateNormal(lib.zeros(2), covariance_matrix=lib.tensor([[1.0, 2.0], [2.0, 1.0]])),
    lambda lib, D: D.MultivariateNormal(lib.zeros(2), covariance_matrix=lib.tensor([[1.0, 0.5], [0.0, 1.0]])),
    lambda lib, D: D.MultivariateNormal(lib.zeros(2), precision_matrix=lib.tensor([[-1.0, 0.0], [0.0, 1.0]])),
    lambda lib, D: D.MultivariateNormal(lib.zeros(2), covariance_matrix=lib.ones(2)),
    lambda lib, D: D.TransformedDistribution(D.Normal(0.0, 1.0), "exp"),
    lambda lib, D: D.Gamma(lib.tensor([-1.0]), 1.0),
    lambda lib, D: D.Gamma(1.0, 0.0),
    lambda lib, D: D.Chi2(lib.tensor([0.0])),
    lambda lib, D: D.Beta(0.0, 1.0),
    lambda lib, D: D.Beta(lib.tensor([1.0]), lib.tensor([-2.0])),
    lambda lib, D: D.Dirichlet(lib.tensor(1.0)),
    lambda lib, D: D.Dirichlet(lib.tensor([1.0, 0.0])),
    lambda lib, D: D.StudentT(0.0),
    lambda lib, D: D.StudentT(lib.tensor([3.0]), 0.0, -1.0),
    lambda lib, D: D.Gamma(2.0, 1.0).log_prob(lib.tensor([-1.0])),
    lambda lib, D: D.Beta(2.0, 1.0).log_prob(lib.tensor([1.5])),
    lambda lib, D: D.Dirichlet(lib.ones(3)).log_prob(lib.tensor([0.5, 0.5, 0.5])),
    lambda lib, D: D.Dirichlet(lib.tensor([[0.5, 0.2, 0.3], [2.0, 3.0, 1.0]])).mode,
    lambda lib, D: D.StudentT(lib.tensor([0.5, 1.5, 3.0])).variance,
    lambda lib, D: D.StudentT(lib.tensor([0.5, 1.5, 3.0])).mean,
    lambda lib, D: D.Beta(0.5, 0.5).mode,
    lambda lib, D: D.Normal(0.0, 1.0).log_prob(0.5),
    lambda lib, D: D.Normal(lib.zeros(3), 1.0).log_prob(lib.zeros(2)),
    lambda lib, D: D.Bernoulli(0.3).log_prob(lib.tensor([0.5])),
    lambda lib, D: D.Categorical(lib.ones(3)).log_prob(lib.tensor([3])),
    lambda lib, D: D.Categorical(lib.ones(3)).log_prob(lib.tensor([-1])),
    lambda lib, D: D.Exponential(1.0).log_prob(lib.tensor([-0.5])),
    lambda lib, D: D.Exponential(1.0).cdf(lib.tensor([-0.5])),
    lambda lib, D: D.Uniform(0.0, 1.0).log_prob(lib.tensor([1.5])),
    lambda lib, D: D.Poisson(2.0).log_prob(lib.tensor([1.5])),
    lambda lib, D: D.Binomial(3, lib.tensor(0.5)).log_prob(lib.tensor([4.0])),
    lambda lib, D: D.OneHotCategorical(lib.ones(3)).log_prob(lib.tensor([1.0, 1.0, 0.0])),
    lambda lib, D: D.MultivariateNormal(lib.zeros(2), scale_tril=lib.eye(2)).log_prob(lib.zeros(3)),
    lambda lib, D: D.MultivariateNormal(lib.zeros(3), scale_tril=lib.eye(2)).log_prob(lib.zeros(3)),
    lambda lib, D: D.MultivariateNormal(lib.zeros(3), scale_tril=lib.eye(2)).rsample(),
    lambda lib, D: D.MultivariateNormal(lib.zeros(2), scale_tril=lib.eye(2)).log_prob(lib.tensor([0.0, float("nan")])),
    lambda lib, D: D.LogNormal(0.0, 1.0).log_prob(lib.tensor([-1.0])),
    lambda lib, D: D.TransformedDistribution(D.Normal(0.0, 1.0), D.transforms.TanhTransform())
    .log_prob(lib.tensor([1.5])),
    lambda lib, D: D.Binomial(3, lib.tensor([0.5, 0.5])).expand((2, 2)).log_prob(lib.tensor([[1.0, 4.0]] * 2)),
    lambda lib, D: D.Normal(0.0, 1.0).expand((3,)).log_prob(lib.zeros(3)),
    lambda lib, D: D.Normal(0.0, 1.0).perplexity(),
    lambda lib, D: D.Uniform(0.0, 2.0).mode,
    lambda lib, D: D.Bernoulli(lib.tensor([0.5, 0.7])).mode,
    lambda lib, D: D.Categorical(lib.tensor([[0.2, 0.8], [0.5, 0.3]])).mode,
    lambda lib, D: D.Laplace(0.0, 1.0).enumerate_support(),
    lambda lib, D: D.Binomial(lib.tensor([3.0, 4.0]), lib.tensor(0.5)).enumerate_support(),
    lambda lib, D: D.Binomial(lib.tensor([3.0, 4.0]), lib.tensor(0.5)).entropy(),
    lambda lib, D: D.Independent(D.Normal(lib.zeros(2), 1.0), 1).enumerate_support(),
    lambda lib, D: D.Cauchy(0.0, -1.0),
    lambda lib, D: D.Cauchy(lib.zeros(2), 1.0).mean,
    lambda lib, D: D.HalfNormal(lib.tensor([0.0])),
    lambda lib, D: D.HalfNormal(1.0).log_prob(lib.tensor([-1.0])),
    lambda lib, D: D.HalfNormal(lib.ones(2)).expand((3, 2)).batch_shape,
    lambda lib, D: D.Gumbel(0.0, lib.tensor([-1.0])),
    lambda lib, D: D.Gumbel(lib.zeros(2), 1.0).expand((3, 2)).log_prob(lib.zeros(3, 2)),
    lambda lib, D: D.Geometric(lib.tensor([0.0, 0.5])),
    lambda lib, D: D.Geometric(lib.tensor([1.5])),
    lambda lib, D: D.Geometric(),
    lambda lib, D: D.Geometric(lib.tensor([0.5])).log_prob(lib.tensor([1.5])),
    lambda lib, D: D.Geometric(lib.tensor([1.0, 0.5])).log_prob(lib.tensor([0.0, 2.0])),
    lambda lib, D: D.Multinomial(lib.tensor(3), lib.ones(2)),
    lambda lib, D: D.Multinomial(3, lib.tensor([0.5, -0.5])),
    lambda lib, D: D.Multinomial(3, lib.ones(2)).log_prob(lib.tensor([1.0, 1.0])),
    lambda lib, D: D.Multinomial(3, lib.tensor([0.0, 1.0])).log_prob(lib.tensor([0.0, 3.0])),
    lambda lib, D: D.Multinomial(3, lib.ones(2, 3)).expand((4, 2)).log_prob(lib.tensor([1.0, 1.0, 1.0])),
    lambda lib, D: D.MixtureSameFamily(D.Normal(0.0, 1.0), D.Normal(lib.zeros(2), 1.0)),
    lambda lib, D: D.MixtureSameFamily(D.Categorical(lib.ones(3)), D.Normal(lib.zeros(2), 1.0)),
    lambda lib, D: D.MixtureSameFamily(D.Categorical(lib.ones(2, 2)), D.Normal(lib.zeros(3, 2), 1.0)),
    lambda lib, D: D.MixtureSameFamily(D.Categorical(lib.ones(2)), "normal"),
    lambda lib, D: D.MixtureSameFamily(D.Categorical(lib.ones(2)), D.Gamma(lib.ones(2), 1.0))
    .log_prob(lib.tensor([-1.0])),
    lambda lib, D: D.MixtureSameFamily(D.Categorical(lib.ones(3, 2)), D.Normal(lib.zeros(3, 2), 1.0))
    .expand((4, 3)).log_prob(lib.zeros(4, 3)),
    lambda lib, D: D.RelaxedBernoulli(lib.tensor(0.5), lib.tensor([1.5])),
    lambda lib, D: D.RelaxedBernoulli(lib.tensor(0.5)),
    lambda lib, D: D.RelaxedBernoulli(lib.tensor(0.5), lib.tensor([0.3])).log_prob(lib.tensor([1.5])),
    lambda lib, D: D.RelaxedBernoulli(lib.tensor(0.5), logits=lib.zeros(2)).expand((3, 2)).log_prob(lib.ones(3, 2) / 3),
    lambda lib, D: D.RelaxedOneHotCategorical(lib.tensor(0.5), lib.tensor([0.5, -0.5])),
    lambda lib, D: D.RelaxedOneHotCategorical(lib.tensor(0.5), lib.ones(2)).log_prob(lib.tensor([0.5, 0.6])),
    lambda lib, D: D.RelaxedOneHotCategorical(lib.tensor(0.5), lib.ones(2, 3)).expand((4, 2)).batch_shape,
    lambda lib, D: D.LowRankMultivariateNormal(lib.tensor(0.0), lib.ones(1, 1), lib.ones(1)),
    lambda lib, D: D.LowRankMultivariateNormal(lib.zeros(2), lib.ones(2), lib.ones(2)),
    lambda lib, D: D.LowRankMultivariateNormal(lib.zeros(2), lib.ones(3, 1), lib.ones(2)),
    lambda lib, D: D.LowRankMultivariateNormal(lib.zeros(2), lib.ones(2, 1), lib.ones(3)),
    lambda lib, D: D.LowRankMultivariateNormal(lib.zeros(3, 2), lib.ones(2, 2, 1), lib.ones(2)),
    lambda lib, D: D.LowRankMultivariateNormal(lib.zeros(2), lib.ones(2, 1), lib.tensor([1.0, 0.0])),
    lambda lib, D: D.LowRankMultivariateNormal(lib.zeros(2), lib.ones(2, 1), lib.ones(2)).log_prob(lib.zeros(3)),
    lambda lib, D: D.LowRankMultivariateNormal(lib.zeros(2), lib.ones(2, 1), lib.ones(2)).expand((3,))
    .log_prob(lib.zeros(3, 2)),
    lambda lib, D: D.Pareto(lib.tensor([1.0]), lib.tensor([0.0])),
    lambda lib, D: D.Pareto(lib.tensor([1.0]), lib.tensor([2.0])).log_prob(lib.tensor([0.5])),
    lambda lib, D: D.Pareto(lib.tensor([1.0]), lib.tensor([0.5, 1.5, 3.0])).mean,
    lambda lib, D: D.Pareto(lib.ones(2), 2.0).expand((3, 2)).log_prob(lib.full((3, 2), 2.0)),
    lambda lib, D: D.Weibull(lib.tensor([-1.0]), lib.tensor([1.0])),
    lambda lib, D: D.Weibull(lib.tensor([1.0]), lib.tensor([2.0])).log_prob(lib.tensor([-1.0])),
    lambda lib, D: D.Weibull(lib.ones(2), 2.0).expand((3, 2)).log_prob(lib.ones(3, 2)),
    lambda lib, D: D.NegativeBinomial(lib.tensor([-1.0]), lib.tensor([0.5])),
    lambda lib, D: D.NegativeBinomial(lib.tensor([2.0]), lib.tensor([1.0])),
    lambda lib, D: D.NegativeBinomial(lib.tensor([2.0])),
    lambda lib, D: D.NegativeBinomial(lib.tensor([2.0]), lib.tensor([0.5])).log_prob(lib.tensor([0.5])),
    lambda lib, D: D.NegativeBinomial(lib.tensor([0.0, 2.0]), lib.tensor([0.5])).log_prob(lib.tensor([0.0, 0.0])),
    lambda lib, D: D.NegativeBinomial(lib.tensor([3.0, 2.0]), logits=lib.zeros(2)).mode,
    lambda lib, D: D.LogisticNormal(0.0, -1.0),
    lambda lib, D: D.LogisticNormal(lib.zeros(2), 1.0).log_prob(lib.tensor([0.5, 0.6, 0.1])),
    lambda lib, D: D.LogisticNormal(0.0, 1.0).batch_shape,
    lambda lib, D: D.Kumaraswamy(lib.tensor([0.0]), 1.0),
    lambda lib, D: D.Kumaraswamy(lib.tensor([2.0]), 1.0).log_prob(lib.tensor([1.5])),
    lambda lib, D: D.Kumaraswamy(lib.tensor([2.0, 0.5, 3.0]), lib.tensor([3.0, 2.0, 0.7])).mode,
    lambda lib, D: D.FisherSnedecor(lib.tensor([0.0]), 1.0),
    lambda lib, D: D.FisherSnedecor(lib.tensor([2.0]), 3.0).log_prob(lib.tensor([-1.0])),
    lambda lib, D: D.FisherSnedecor(lib.tensor([1.0, 3.0]), lib.tensor([2.0, 5.0])).expand((3, 2)).variance,
    lambda lib, D: D.VonMises(0.0, lib.tensor([0.0])),
    lambda lib, D: D.VonMises(lib.zeros(2), 1.0).expand((3, 2)).log_prob(lib.ones(3, 2)),
    lambda lib, D: D.VonMises(lib.zeros(2), lib.tensor([0.5, 5.0])).variance,
    lambda lib, D: D.VonMises(lib.zeros(2), 1.0).cdf(lib.zeros(2)),
    lambda lib, D: D.ContinuousBernoulli(lib.tensor([1.5])).probs,
    lambda lib, D: D.ContinuousBernoulli(lib.tensor([1.5]), validate_args=True),
    lambda lib, D: D.ContinuousBernoulli(),
    lambda lib, D: D.ContinuousBernoulli(lib.tensor([0.3])).log_prob(lib.tensor([1.5])),
    lambda lib, D: D.ContinuousBernoulli(lib.tensor([0.3, 0.5])).cdf(lib.tensor([0.0, 1.0])),
    lambda lib, D: D.ContinuousBernoulli(logits=lib.zeros(2)).expand((3, 2)).log_prob(lib.ones(3, 2) / 3),
    lambda lib, D: D.kl_divergence(D.LowRankMultivariateNormal(lib.zeros(2), lib.ones(2, 1), lib.ones(2)),
                                   D.LowRankMultivariateNormal(lib.zeros(3), lib.ones(3, 1), lib.ones(3))),
])
def test_validation_errors_and_edge_results(fn):
    """Out-of-support parameters and values raise ValueError (validation is on by default), as do
    malformed arguments; the few edge results (modes, perplexity) match."""
    assert_same_outcome(lambda lib: fn(lib, LIBS[lib]))


def test_validate_args_off():
    """validate_args=False (per distribution or by default) skips the checks, as in PyTorch, and the
    values computed are torch's; a covariance that is not positive-definite then fails in the
    Cholesky factorization (LinAlgError)."""
    assert_same_outcome(lambda lib: LIBS[lib].Normal(0.0, -1.0, validate_args=False).log_prob(lib.tensor([0.5])))
    assert_same_outcome(lambda lib: LIBS[lib].Uniform(0.0, 1.0, validate_args=False).log_prob(lib.tensor([1.5])))
    assert_same_outcome(lambda lib: LIBS[lib].Bernoulli(lib.tensor([0.2]), validate_args=False)
                        .log_prob(lib.tensor([0.5])))
    with pytest.raises(pf.linalg.LinAlgError, match="not positive-definite"):
        PD.MultivariateNormal(pf.zeros(2), covariance_matrix=pf.tensor([[1.0, 2.0], [2.0, 1.0]]), validate_args=False)
    with pytest.raises(ValueError):
        PD.Distribution.set_default_validate_args("yes")
    try:
        PD.Distribution.set_default_validate_args(False)
        TD.Distribution.set_default_validate_args(False)
        assert_same_outcome(lambda lib: LIBS[lib].Exponential(lib.tensor([-1.0])).log_prob(lib.tensor([-2.0])))
        assert PD.Normal(0.0, 1.0, validate_args=True)._validate_args
        with pytest.raises(ValueError):
            PD.Normal(0.0, -1.0, validate_args=True)
    finally:
        PD.Distribution.set_default_validate_args(True)
        TD.Distribution.set_default_validate_args(True)
    with pytest.raises(ValueError):
        PD.Normal(0.0, -1.0)


def test_scores_off_the_support_and_count_gradients():
    """With validation off, Binomial's and Poisson's log_prob take non-integer values (lgamma of
    non-integers), and Binomial's is differentiable in total_count, as PyTorch's."""
    def scores(lib):
        D = LIBS[lib]
        count = lib.tensor([3.0, 7.5], dtype=lib.float64, requires_grad=True)
        values = lib.tensor([1.5, 2.0], dtype=lib.float64)
        binomial = D.Binomial(count, lib.tensor([0.3, 0.6], dtype=lib.float64), validate_args=False).log_prob(values)
        binomial.sum().backward()
        poisson = D.Poisson(lib.tensor([2.0, 0.5], dtype=lib.float64), validate_args=False).log_prob(values)
        return binomial, count.grad, poisson

    assert_same_outcome(scores, rtol=1e-10, atol=1e-12)
    k = torch.arange(0.0, 400.0, dtype=torch.float64)
    assert_matches(PD.Poisson(_p(150.0)).log_prob(from_torch(k)),
                   TD.Poisson(torch.tensor(150.0, dtype=torch.float64)).log_prob(k), rtol=1e-12, atol=1e-12)


def test_gamma_family_rsample_gradients():
    """Gamma's draws are differentiable in rate (x = standard draw / rate) and StudentT's in loc
    and scale; a gradient with respect to a concentration (or df), which plugflow does not compute,
    raises NotImplementedError when backpropagated rather than coming out as zero or None."""
    pf.manual_seed(5)
    rate = pf.tensor([0.5, 2.0], dtype=pf.float64, requires_grad=True)
    x = PD.Gamma(pf.tensor([0.7, 3.0], dtype=pf.float64), rate).rsample((400,))
    x.sum().backward()
    assert_matches(rate.grad, to_torch(-(x / rate).sum(0).detach()))

    loc = pf.tensor([0.5, -1.0], dtype=pf.float64, requires_grad=True)
    scale = pf.tensor([2.0, 0.5], dtype=pf.float64, requires_grad=True)
    y = PD.StudentT(pf.tensor([4.0, 9.0], dtype=pf.float64), loc, scale).rsample((300,))
    y.sum().backward()
    assert_matches(loc.grad, torch.tensor([300.0, 300.0], dtype=torch.float64))
    assert_matches(scale.grad, to_torch(((y - loc) / scale).sum(0).detach()))

    concentration = pf.tensor([0.7, 3.0], dtype=pf.float64, requires_grad=True)
    for d in (PD.Gamma(concentration, 1.0), PD.Chi2(concentration), PD.Beta(concentration, 2.0),
              PD.Dirichlet(concentration), PD.StudentT(concentration)):
        draw = d.rsample((3,))
        assert draw.requires_grad and bool(draw.isfinite().all())
        with pytest.raises(NotImplementedError, match="concentration"):
            draw.sum().backward()
    # the score-function gradient is there
    PD.Gamma(concentration, 1.0).log_prob(pf.tensor([0.5, 2.0], dtype=pf.float64)).sum().backward()
    assert concentration.grad is not None


KL_PAIRS = {
    "Normal": lambda D, t: (D.Normal(t(0.3, -1.0), t(1.0, 2.0)), D.Normal(t(0.0, 1.0), t(0.5, 1.5))),
    "Bernoulli": lambda D, t: (D.Bernoulli(t(0.2, 0.7, 0.0, 1.0)), D.Bernoulli(t(0.5, 0.1, 0.3, 0.3))),
    "Bernoulli_inf": lambda D, t: (D.Bernoulli(t(0.2, 0.7)), D.Bernoulli(t(0.0, 1.0))),
    "Categorical": lambda D, t: (D.Categorical(logits=t(0.1, 0.5, -1.0)), D.Categorical(probs=t(0.2, 0.3, 0.5))),
    "Categorical_zero": lambda D, t: (D.Categorical(probs=t(0.0, 0.5, 0.5)), D.Categorical(probs=t(0.5, 0.0, 0.5))),
    "OneHotCategorical": lambda D, t: (D.OneHotCategorical(logits=t(0.1, 0.5)), D.OneHotCategorical(t(0.2, 0.8))),
    "Uniform": lambda D, t: (D.Uniform(t(0.0, -1.0), t(1.0, 1.0)), D.Uniform(t(-1.0, 0.0), t(2.0, 3.0))),
    "Exponential": lambda D, t: (D.Exponential(t(0.5, 2.0)), D.Exponential(t(1.5, 0.2))),
    "Laplace": lambda D, t: (D.Laplace(t(0.3, 1.0), t(1.0, 2.0)), D.Laplace(t(-0.2, 0.0), t(0.7, 1.0))),
    "Poisson": lambda D, t: (D.Poisson(t(0.5, 20.0)), D.Poisson(t(1.5, 25.0))),
    "Binomial": lambda D, t: (D.Binomial(5, t(0.3, 0.6)), D.Binomial(5, t(0.5, 0.1))),
    "Binomial_inf": lambda D, t: (D.Binomial(8, t(0.3)), D.Binomial(5, t(0.5))),
    "Independent": lambda D, t: (D.Independent(D.Normal(t(0.3, -1.0), t(1.0, 2.0)), 1),
                                 D.Independent(D.Normal(t(0.0, 1.0), t(0.5, 1.5)), 1)),
    "LogNormal": lambda D, t: (D.LogNormal(t(0.3, -1.0), t(1.0, 2.0)), D.LogNormal(t(0.0, 1.0), t(0.5, 1.5))),
    "MVN": lambda D, t: (D.MultivariateNormal(t(0.3, -1.0), scale_tril=t(1.0, 0.0, 0.4, 2.0).view(2, 2)),
                         D.MultivariateNormal(t(0.0, 1.0), covariance_matrix=t(2.0, 0.3, 0.3, 1.0).view(2, 2))),
    "Exponential_Normal": lambda D, t: (D.Exponential(t(0.5, 2.0)), D.Normal(t(0.0, 1.0), t(0.5, 1.5))),
    "Laplace_Normal": lambda D, t: (D.Laplace(t(0.3, 1.0), t(1.0, 2.0)), D.Normal(t(0.0, 1.0), t(0.5, 1.5))),
    "Normal_Laplace": lambda D, t: (D.Normal(t(0.3, 1.0), t(1.0, 2.0)), D.Laplace(t(0.0, 1.0), t(0.5, 1.5))),
    "Uniform_Normal": lambda D, t: (D.Uniform(t(0.0, -1.0), t(1.0, 1.0)), D.Normal(t(0.0, 1.0), t(0.5, 1.5))),
    "Uniform_Exponential": lambda D, t: (D.Uniform(t(0.0, -1.0), t(1.0, 1.0)), D.Exponential(t(1.5, 0.2))),
    "Bernoulli_Poisson": lambda D, t: (D.Bernoulli(t(0.2, 0.7)), D.Poisson(t(0.5, 2.0))),
    "Normal_Uniform": lambda D, t: (D.Normal(t(0.3, 1.0), t(1.0, 2.0)), D.Uniform(t(0.0, -1.0), t(1.0, 1.0))),
    "Exponential_Uniform": lambda D, t: (D.Exponential(t(0.5, 2.0)), D.Uniform(t(0.0, -1.0), t(1.0, 1.0))),
    "Laplace_Exponential": lambda D, t: (D.Laplace(t(0.3, 1.0), t(1.0, 2.0)), D.Exponential(t(1.5, 0.2))),
    "Poisson_Binomial": lambda D, t: (D.Poisson(t(0.5, 20.0)), D.Binomial(5, t(0.5, 0.1))),
    "Gamma": lambda D, t: (D.Gamma(t(0.5, 3.0), t(1.0, 2.0)), D.Gamma(t(2.0, 1.0), t(0.5, 1.5))),
    "Beta": lambda D, t: (D.Beta(t(0.5, 3.0), t(1.0, 2.0)), D.Beta(t(2.0, 1.0), t(0.5, 1.5))),
    "Dirichlet": lambda D, t: (D.Dirichlet(t(0.5, 3.0, 1.0)), D.Dirichlet(t(2.0, 1.0, 0.7))),
    "Beta_Exponential": lambda D, t: (D.Beta(t(0.5, 3.0), t(1.0, 2.0)), D.Exponential(t(1.5, 0.2))),
    "Beta_Gamma": lambda D, t: (D.Beta(t(0.5, 3.0), t(1.0, 2.0)), D.Gamma(t(2.0, 1.0), t(0.5, 1.5))),
    "Beta_Normal": lambda D, t: (D.Beta(t(0.5, 3.0), t(1.0, 2.0)), D.Normal(t(0.0, 1.0), t(0.5, 1.5))),
    "Beta_Uniform": lambda D, t: (D.Beta(t(0.5, 3.0), t(1.0, 2.0)), D.Uniform(t(-1.0, 0.5), t(1.0, 2.0))),
    "Exponential_Gamma": lambda D, t: (D.Exponential(t(0.5, 2.0)), D.Gamma(t(2.0, 1.0), t(0.5, 1.5))),
    "Gamma_Exponential": lambda D, t: (D.Gamma(t(0.5, 3.0), t(1.0, 2.0)), D.Exponential(t(1.5, 0.2))),
    "Gamma_Normal": lambda D, t: (D.Gamma(t(0.5, 3.0), t(1.0, 2.0)), D.Normal(t(0.0, 1.0), t(0.5, 1.5))),
    "Gamma_Uniform": lambda D, t: (D.Gamma(t(0.5, 3.0), t(1.0, 2.0)), D.Uniform(t(0.0, -1.0), t(1.0, 1.0))),
    "Normal_Gamma": lambda D, t: (D.Normal(t(0.3, 1.0), t(1.0, 2.0)), D.Gamma(t(2.0, 1.0), t(0.5, 1.5))),
    "Uniform_Beta": lambda D, t: (D.Uniform(t(0.1, 0.0), t(0.9, 1.5)), D.Beta(t(2.0, 1.0), t(0.5, 1.5))),
    "Uniform_Gamma": lambda D, t: (D.Uniform(t(0.5, -1.0), t(1.0, 1.0)), D.Gamma(t(2.0, 1.0), t(0.5, 1.5))),
    "Chi2": lambda D, t: (D.Chi2(t(3.0, 0.5)), D.Chi2(t(1.0, 4.0))),
    "Cauchy": lambda D, t: (D.Cauchy(t(0.3, 1.0), t(1.0, 2.0)), D.Cauchy(t(0.0, 1.0), t(0.5, 1.5))),
    "Gumbel": lambda D, t: (D.Gumbel(t(0.3, 1.0), t(1.0, 2.0)), D.Gumbel(t(0.0, 1.0), t(0.5, 1.5))),
    "Geometric": lambda D, t: (D.Geometric(t(0.3, 0.9)), D.Geometric(logits=t(0.2, -1.0))),
    "HalfNormal": lambda D, t: (D.HalfNormal(t(0.3, 1.0)), D.HalfNormal(t(0.5, 1.5))),
    "Exponential_Gumbel": lambda D, t: (D.Exponential(t(0.5, 2.0)), D.Gumbel(t(0.0, 1.0), t(0.5, 1.5))),
    "Gamma_Gumbel": lambda D, t: (D.Gamma(t(0.5, 3.0), t(1.0, 2.0)), D.Gumbel(t(0.0, 1.0), t(0.5, 1.5))),
    "Gumbel_Normal": lambda D, t: (D.Gumbel(t(0.3, 1.0), t(1.0, 2.0)), D.Normal(t(0.0, 1.0), t(0.5, 1.5))),
    "Normal_Gumbel": lambda D, t: (D.Normal(t(0.3, 1.0), t(1.0, 2.0)), D.Gumbel(t(0.0, 1.0), t(0.5, 1.5))),
    "Uniform_Gumbel": lambda D, t: (D.Uniform(t(0.0, -1.0), t(1.0, 1.0)), D.Gumbel(t(0.0, 1.0), t(0.5, 1.5))),
    "Gumbel_Gamma": lambda D, t: (D.Gumbel(t(0.3, 1.0), t(1.0, 2.0)), D.Gamma(t(2.0, 1.0), t(0.5, 1.5))),
    "LowRankMVN": lambda D, t: (D.LowRankMultivariateNormal(t(0.3, -1.0, 0.5), t(1.0, 0.2, -0.5, 0.4, 2.0, 0.1)
                                                            .view(3, 2), t(1.0, 0.5, 2.0)),
                                D.LowRankMultivariateNormal(t(0.0, 1.0, 0.2), t(0.3, -1.0, 0.8).view(3, 1),
                                                            t(0.7, 1.5, 1.0))),
    "MVN_LowRankMVN": lambda D, t: (D.MultivariateNormal(t(0.3, -1.0), scale_tril=t(1.0, 0.0, 0.4, 2.0).view(2, 2)),
                                    D.LowRankMultivariateNormal(t(0.0, 1.0), t(0.3, -1.0).view(2, 1), t(0.7, 1.5))),
    "LowRankMVN_MVN": lambda D, t: (D.LowRankMultivariateNormal(t(0.0, 1.0), t(0.3, -1.0).view(2, 1), t(0.7, 1.5)),
                                    D.MultivariateNormal(t(0.3, -1.0), scale_tril=t(1.0, 0.0, 0.4, 2.0).view(2, 2))),
    "Pareto": lambda D, t: (D.Pareto(t(1.0, 0.5), t(2.0, 3.0)), D.Pareto(t(0.7, 1.0), t(1.5, 0.5))),
    "Pareto_Exponential": lambda D, t: (D.Pareto(t(1.0, 0.5), t(0.5, 3.0)), D.Exponential(t(1.5, 0.2))),
    "Pareto_Gamma": lambda D, t: (D.Pareto(t(1.0, 0.5), t(0.5, 3.0)), D.Gamma(t(2.0, 1.0), t(0.5, 1.5))),
    "Pareto_Normal": lambda D, t: (D.Pareto(t(1.0, 0.5), t(1.5, 3.0)), D.Normal(t(0.0, 1.0), t(0.5, 1.5))),
    "Pareto_Uniform": lambda D, t: (D.Pareto(t(1.0, 0.5), t(1.5, 3.0)), D.Uniform(t(0.0, -1.0), t(1.0, 1.0))),
    "Uniform_Pareto": lambda D, t: (D.Uniform(t(1.5, 0.2), t(2.0, 1.0)), D.Pareto(t(1.0, 0.5), t(2.0, 3.0))),
    "Normal_Pareto": lambda D, t: (D.Normal(t(0.3, 1.0), t(1.0, 2.0)), D.Pareto(t(1.0, 0.5), t(2.0, 3.0))),
    "ContinuousBernoulli": lambda D, t: (D.ContinuousBernoulli(t(0.3, 0.8, 0.5)), D.ContinuousBernoulli(t(0.6, 0.1, 0.2))),
    "Beta_ContinuousBernoulli": lambda D, t: (D.Beta(t(0.5, 3.0), t(1.0, 2.0)), D.ContinuousBernoulli(t(0.6, 0.1))),
    "ContinuousBernoulli_Exponential": lambda D, t: (D.ContinuousBernoulli(t(0.3, 0.8)), D.Exponential(t(1.5, 0.2))),
    "ContinuousBernoulli_Normal": lambda D, t: (D.ContinuousBernoulli(t(0.3, 0.8)), D.Normal(t(0.0, 1.0), t(0.5, 1.5))),
    "ContinuousBernoulli_Uniform": lambda D, t: (D.ContinuousBernoulli(t(0.3, 0.8)), D.Uniform(t(-0.5, 0.2), t(1.5, 1.0))),
    "Uniform_ContinuousBernoulli": lambda D, t: (D.Uniform(t(0.1, 0.0), t(0.9, 0.5)), D.ContinuousBernoulli(t(0.3, 0.8))),
    "Normal_ContinuousBernoulli": lambda D, t: (D.Normal(t(0.3, 1.0), t(1.0, 2.0)), D.ContinuousBernoulli(t(0.3, 0.8))),
    "Tanh_Normal": lambda D, t: (D.TransformedDistribution(D.Normal(t(0.3), t(1.0)), D.transforms.TanhTransform()),
                                 D.TransformedDistribution(D.Normal(t(0.0), t(2.0)), D.transforms.TanhTransform())),
}


@pytest.mark.parametrize("pair", sorted(KL_PAIRS))
def test_kl_divergence_matches_torch(pair):
    """kl_divergence's values and float64 gradients with respect to both distributions' parameters."""
    rng = seeded_rng()
    leaves = {pf: [], torch: []}

    def make(lib):
        def t(*values):
            leaf = lib.tensor(values, dtype=lib.float64, requires_grad=True)
            leaves[lib].append(leaf)
            return leaf
        return LIBS[lib].kl_divergence(*KL_PAIRS[pair](LIBS[lib], t))

    kl_p, kl_t = make(pf), make(torch)
    assert_matches(kl_p, kl_t, rtol=1e-7, atol=1e-9)
    if kl_t.requires_grad:
        backward_both(rng, kl_p.masked_fill(kl_p.isinf(), 0), kl_t.masked_fill(kl_t.isinf(), 0))
        for a, b in zip(leaves[pf], leaves[torch]):
            if b.grad is None:
                assert a.grad is None or bool((a.grad == 0).all())
            else:
                assert_matches(a.grad, b.grad, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("fn", [
    lambda lib, D: D.kl_divergence(D.Normal(0.0, 1.0), D.Categorical(lib.ones(2))),
    lambda lib, D: D.kl_divergence(D.Exponential(1.0), D.Laplace(0.0, 1.0)),
    lambda lib, D: D.kl_divergence(D.Poisson(lib.tensor(1.0)), D.Bernoulli(lib.tensor(0.5))),
    lambda lib, D: D.kl_divergence(D.Binomial(3, lib.tensor(0.5)), D.Binomial(5, lib.tensor(0.5))),
    lambda lib, D: D.kl_divergence(D.Independent(D.Normal(lib.zeros(2, 2), 1.0), 1),
                                   D.Independent(D.Normal(lib.zeros(2, 2), 1.0), 2)),
    lambda lib, D: D.kl_divergence(D.MultivariateNormal(lib.zeros(2), lib.eye(2)),
                                   D.MultivariateNormal(lib.zeros(3), lib.eye(3))),
    lambda lib, D: D.kl_divergence(D.TransformedDistribution(D.Normal(0.0, 1.0), D.transforms.ExpTransform()),
                                   D.TransformedDistribution(D.Normal(0.0, 1.0), D.transforms.TanhTransform())),
])
def test_kl_divergence_errors(fn):
    assert_same_outcome(lambda lib: fn(lib, LIBS[lib]))


def test_register_kl_dispatch():
    """A KL registered for a new pair is found for it and its subclasses."""
    class MyNormal(PD.Normal):
        pass

    @PD.register_kl(MyNormal, PD.Normal)
    def kl_mine(p, q):
        return pf.zeros(p.batch_shape)

    p, q = MyNormal(pf.zeros(2), 1.0), PD.Normal(pf.ones(2), 1.0)
    assert bool((PD.kl_divergence(p, q) == 0).all())
    assert bool((PD.kl_divergence(q, p) > 0).all())  # Normal-Normal still applies the other way
    with pytest.raises(TypeError):
        PD.register_kl(1, PD.Normal)(kl_mine)


def test_exponential_family_entropy_and_kl():
    """ExponentialFamily's generic entropy and KL (autograd on the log normalizer) give the closed
    forms."""
    for d, q in ((PD.Normal(_p(0.3, 1.0), _p(0.5, 2.0)), PD.Normal(_p(0.0, -1.0), _p(1.0, 1.5))),
                 (PD.Exponential(_p(0.3, 2.0)), PD.Exponential(_p(1.0, 0.5))),
                 (PD.Bernoulli(_p(0.3, 0.9)), PD.Bernoulli(_p(0.5, 0.1)))):
        assert_matches(PD.ExponentialFamily.entropy(d), to_torch(d.entropy()), rtol=1e-10, atol=1e-12)
        generic = PD.kl._kl_expfamily_expfamily(d, q)
        assert_matches(generic, to_torch(PD.kl_divergence(d, q)), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", ["real", "positive", "nonnegative", "unit_interval", "boolean", "simplex",
                                  "nonnegative_integer", "positive_integer", "real_vector", "lower_triangular",
                                  "lower_cholesky", "corr_cholesky", "square", "symmetric", "positive_definite", "positive_semidefinite",
                                  "one_hot", "greater_than", "greater_than_eq", "less_than", "interval",
                                  "half_open_interval", "integer_interval", "multinomial", "cat", "stack"])
def test_constraints_match_torch(name):
    """check() on random values (some valid, some not) and repr, as torch's constraints."""
    rng = seeded_rng()
    base = rng.choice([-1.0, 0.0, 0.5, 1.0, 2.0, float("nan")], size=(4, 3, 3)) * rng.integers(1, 3, size=(4, 1, 1))
    matrices = np.concatenate([base, _spd(rng, 3, (2,)), np.linalg.cholesky(_spd(rng, 3, (2,)))])
    rows = np.concatenate([rng.dirichlet(np.ones(3), size=2), base[:, 0], np.eye(3)])

    def check(lib):
        C = LIBS[lib].constraints
        built = {"greater_than": lambda: C.greater_than(0.5), "greater_than_eq": lambda: C.greater_than_eq(0.5),
                 "less_than": lambda: C.less_than(1.0), "interval": lambda: C.interval(0.0, 1.0),
                 "half_open_interval": lambda: C.half_open_interval(0.0, 1.0),
                 "integer_interval": lambda: C.integer_interval(0, 2), "multinomial": lambda: C.multinomial(2),
                 "cat": lambda: C.cat([C.positive, C.real], dim=-1, lengths=[1, 2]),
                 "stack": lambda: C.stack([C.positive, C.real, C.unit_interval], dim=-1)}
        constraint = built[name]() if name in built else getattr(C, name)
        data = matrices if constraint.event_dim == 2 else rows
        return repr(constraint), constraint.event_dim, constraint.is_discrete, constraint.check(_tensor(lib, data))

    assert_same_outcome(check)


def test_dependent_constraints():
    C = PD.constraints
    assert C.is_dependent(C.dependent) and C.is_dependent(PD.Uniform.support)
    assert repr(PD.Uniform(0.0, 2.0).support) == "Interval(lower_bound=0.0, upper_bound=2.0)"
    with pytest.raises(ValueError, match="dependent"):
        C.dependent.check(pf.zeros(1))
    with pytest.raises(NotImplementedError):
        C.dependent.event_dim
    assert C.dependent(is_discrete=True, event_dim=1).event_dim == 1
    assert PD.Categorical.support.is_discrete and PD.Categorical.support.event_dim == 0


TRANSFORMS = {
    "Exp": lambda T, t: T.ExpTransform(),
    "Sigmoid": lambda T, t: T.SigmoidTransform(),
    "Tanh": lambda T, t: T.TanhTransform(),
    "Softplus": lambda T, t: T.SoftplusTransform(),
    "Power": lambda T, t: T.PowerTransform(t(2.5)),
    "Affine": lambda T, t: T.AffineTransform(t(0.5, -1.0, 2.0), t(2.0, -0.5, 3.0)),
    "Affine_scalar": lambda T, t: T.AffineTransform(1.0, -3.0),
    "Affine_event": lambda T, t: T.AffineTransform(t(0.5, -1.0, 2.0), t(2.0, -0.5, 3.0), event_dim=1),
    "Compose": lambda T, t: T.ComposeTransform([T.AffineTransform(0.0, 0.5), T.TanhTransform(),
                                                T.AffineTransform(1.0, 2.0)]),
    "Independent": lambda T, t: T.IndependentTransform(T.SigmoidTransform(), 1),
    "Inverse": lambda T, t: T.ExpTransform().inv,
    "StickBreaking": lambda T, t: T.StickBreakingTransform(),
    "Softmax": lambda T, t: T.SoftmaxTransform(),
    "LowerCholesky": lambda T, t: T.LowerCholeskyTransform(),
    "Abs": lambda T, t: T.AbsTransform(),
}


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_transforms_match_torch(name):
    """Forward, inverse, log |det J| (and their gradients), domains, signs, shapes."""
    rng = seeded_rng()
    shape = (2, 3, 3) if name == "LowerCholesky" else (4, 3)
    data = rng.uniform(0.1, 2.0, size=shape) * (1 if name in ("Power", "Inverse") else rng.choice([-1, 1], size=shape))

    def run(lib):
        T = LIBS[lib].transforms
        t = TRANSFORMS[name](T, lambda *v: lib.tensor(v if len(v) > 1 else v[0], dtype=lib.float64))
        x = _tensor(lib, data, grad=True)
        y = t(x)
        results = [y, t.inv(y), repr(t.domain), repr(t.codomain), t.bijective,
                   tuple(t.forward_shape(lib.Size(shape))), tuple(t.inverse_shape(lib.Size(shape)))]
        if name not in ("Softmax", "Abs", "LowerCholesky"):
            ladj = t.log_abs_det_jacobian(x, y)
            ladj.sum().backward()
            results += [ladj, x.grad]
        if name not in ("StickBreaking", "Softmax", "LowerCholesky", "Affine_event", "Abs", "Independent"):
            results.append(t.sign if isinstance(t.sign, int) else t.sign.to(lib.float64))
        return tuple(results)

    assert_same_outcome(run, rtol=1e-7, atol=1e-9)


# Transforms over parts of x: each with the shape of x it takes.
SHAPED_TRANSFORMS = {
    "Reshape": (lambda T, t: T.ReshapeTransform((2, 3), (3, 2)), (4, 2, 3)),
    "Reshape_flatten": (lambda T, t: T.ReshapeTransform((3,), (1, 3, 1)), (4, 3)),
    "Cat": (lambda T, t: T.CatTransform([T.ExpTransform(), T.AffineTransform(t(1.0), t(-2.0)), T.SigmoidTransform()],
                                        dim=1, lengths=[1, 2, 1]), (3, 4)),
    "Cat_event": (lambda T, t: T.CatTransform([T.StickBreakingTransform(), T.IndependentTransform(T.ExpTransform(), 1)],
                                              dim=-1, lengths=[2, 3]), (3, 5)),
    "Cat_batch": (lambda T, t: T.CatTransform([T.StickBreakingTransform(), T.StickBreakingTransform()],
                                              dim=0, lengths=[1, 2]), (3, 4)),
    "Stack": (lambda T, t: T.StackTransform([T.ExpTransform(), T.TanhTransform(), T.AffineTransform(0.5, 2.0)],
                                            dim=-1), (4, 3)),
    "CorrCholesky": (lambda T, t: T.CorrCholeskyTransform(), (4, 6)),
    "CumulativeDistribution": (None, (4, 3)),  # built in the test (it takes a distribution)
}


@pytest.mark.parametrize("name", sorted(SHAPED_TRANSFORMS))
def test_shaped_transforms_match_torch(name):
    """Forward, inverse, log |det J| and its gradient, domains and shapes of the transforms that
    reshape, split or take a distribution; their malformed inputs raise as PyTorch's."""
    rng = seeded_rng()
    build, shape = SHAPED_TRANSFORMS[name]
    data = rng.uniform(0.1, 2.0, size=shape) * rng.choice([-1, 1], size=shape)

    def run(lib):
        D = LIBS[lib]
        if build is None:
            t = D.transforms.CumulativeDistributionTransform(D.Normal(lib.tensor(0.5, dtype=lib.float64), 2.0))
        else:
            t = build(D.transforms, lambda *v: lib.tensor(v if len(v) > 1 else v[0], dtype=lib.float64))
        x = _tensor(lib, data, grad=True)
        y = t(x)
        ladj = t.log_abs_det_jacobian(x, y)
        ladj.sum().backward()
        results = [y, t.inv(y), ladj, x.grad, repr(t.domain), repr(t.codomain), t.bijective, t.domain.event_dim,
                   t.codomain.event_dim, tuple(t.forward_shape(lib.Size(shape)))]
        for bad in (x[:1, :1], x.sum(-1)):
            try:
                results.append(t(bad).shape)
            except Exception as e:  # noqa: BLE001 - the same exception class is expected
                results.append(type(e).__name__)
        return tuple(results)

    assert_same_outcome(run, rtol=1e-7, atol=1e-9)


def test_transform_cache_and_inverse_identity():
    t = PD.transforms.TanhTransform(cache_size=1)
    x = pf.tensor([30.0, -0.5], dtype=pf.float64)
    y = t(x)
    assert t.inv(y) is x  # cached: atanh(1.0) would be inf
    assert t.inv.inv is t and t.with_cache(1) is t and t == PD.transforms.TanhTransform()
    with pytest.raises(ValueError):
        PD.transforms.ExpTransform(cache_size=2)
    assert_same_outcome(lambda lib: LIBS[lib].transforms.AffineTransform(0.0, 1.0).event_dim)
    assert_same_outcome(lambda lib: LIBS[lib].transforms.StickBreakingTransform().forward_shape(()))


def test_sac_policy_log_prob():
    """A SAC policy's squashed Gaussian: rsample, tanh with the cached inverse, log_prob of the
    action, and the gradient of (log_prob - Q) through the draw reach the network's outputs."""
    pf.manual_seed(0)
    mu = pf.zeros(8, 2, dtype=pf.float64, requires_grad=True)
    log_std = pf.full((8, 2), -0.5, dtype=pf.float64, requires_grad=True)
    dist = PD.TransformedDistribution(PD.Normal(mu, log_std.exp()), [PD.transforms.TanhTransform(cache_size=1)])
    action = dist.rsample()
    log_prob = dist.log_prob(action).sum(-1)
    base = PD.Normal(mu, log_std.exp())
    pre_tanh = pf.atanh(action.detach().clamp(-1 + 1e-12, 1 - 1e-12))
    expected = (base.log_prob(pre_tanh) - 2 * (math.log(2) - pre_tanh - pf.nn.functional.softplus(-2 * pre_tanh)))
    assert bool(((log_prob - expected.sum(-1)).abs() < 1e-8).all())
    (log_prob - action.sum(-1)).mean().backward()
    assert mu.grad is not None and log_std.grad is not None and bool(mu.grad.isfinite().all())


def test_reinforce_learns_the_best_arm():
    """Policy gradient through Categorical.log_prob: the policy moves to the best of 4 arms."""
    pf.manual_seed(0)
    logits = pf.zeros(4, requires_grad=True)
    rewards = pf.tensor([0.1, 0.2, 1.0, 0.3])
    opt = pf.optim.Adam([logits], lr=0.1)
    for _ in range(150):
        dist = PD.Categorical(logits=logits)
        arms = dist.sample((32,))
        loss = -(dist.log_prob(arms) * rewards[arms]).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert PD.Categorical(logits=logits).probs[2].item() > 0.9


def test_float32_parameters_keep_their_dtype():
    """Draws, scores and KLs stay in the parameters' dtype."""
    loc, scale = pf.zeros(3), pf.ones(3)
    for d in (PD.Normal(loc, scale), PD.Laplace(loc, scale), PD.Exponential(scale), PD.Uniform(loc, scale + 1),
              PD.LogNormal(loc, scale), PD.Poisson(scale), PD.Binomial(4, scale / 2), PD.Bernoulli(scale / 2),
              PD.MultivariateNormal(loc, scale_tril=pf.eye(3)), PD.Gamma(scale, scale), PD.Chi2(scale),
              PD.Beta(scale, scale), PD.Dirichlet(scale + 1), PD.StudentT(scale + 2), PD.Cauchy(loc, scale),
              PD.HalfNormal(scale), PD.Gumbel(loc, scale), PD.Geometric(scale / 2), PD.Pareto(scale, scale + 2),
              PD.Weibull(scale, scale), PD.Kumaraswamy(scale, scale), PD.VonMises(loc, scale),
              PD.ContinuousBernoulli(scale / 3), PD.FisherSnedecor(scale, scale), PD.NegativeBinomial(scale, scale / 2),
              PD.LowRankMultivariateNormal(loc, pf.ones(3, 1), scale), PD.LogisticNormal(loc, scale),
              PD.RelaxedBernoulli(scale[0], scale / 2), PD.RelaxedOneHotCategorical(scale[0], scale),
              PD.Multinomial(5, scale), PD.MixtureSameFamily(PD.Categorical(scale), PD.Normal(loc, scale))):
        x = d.sample((2,))
        assert x.dtype == pf.float32 and d.log_prob(x).dtype == pf.float32, d
    assert PD.Categorical(logits=loc).sample().dtype == pf.int64
    assert PD.kl_divergence(PD.Normal(loc, scale), PD.Normal(scale, scale)).dtype == pf.float32


def test_package_layout():
    """torch.distributions' module names and top-level names that plugflow has."""
    import importlib
    for module in ("distribution", "constraints", "kl", "utils", "transforms", "normal", "uniform", "bernoulli",
                   "categorical", "one_hot_categorical", "exponential", "laplace", "log_normal", "independent",
                   "multivariate_normal", "binomial", "poisson", "transformed_distribution", "exp_family", "gamma",
                   "chi2", "beta", "dirichlet", "studentT", "cauchy", "half_normal", "gumbel", "geometric",
                   "multinomial", "mixture_same_family", "relaxed_bernoulli", "relaxed_categorical",
                   "lowrank_multivariate_normal", "pareto", "weibull", "negative_binomial",
                   "logistic_normal", "kumaraswamy", "fishersnedecor", "von_mises",
                   "continuous_bernoulli"):
        importlib.import_module("plugflow.distributions." + module)
        importlib.import_module("torch.distributions." + module)
    for name in PD.__all__:
        assert hasattr(TD, name), name
    assert pf.distributions is PD
    assert_same_outcome(lambda lib: LIBS[lib].utils.probs_to_logits(lib.tensor([0.0, 0.3, 1.0]), is_binary=True))
    assert_same_outcome(lambda lib: LIBS[lib].utils.vec_to_tril_matrix(lib.arange(6.0)))
    assert_same_outcome(lambda lib: LIBS[lib].utils.tril_matrix_to_vec(lib.arange(9.0).view(3, 3), -1))
    assert_same_outcome(lambda lib: LIBS[lib].utils.vec_to_tril_matrix(lib.arange(5.0)))
