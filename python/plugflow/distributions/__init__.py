"""plugflow.distributions: PyTorch 1.13's torch.distributions, composed from plugflow's ops so that
rsample's reparameterized draws and log_prob differentiate with respect to the parameters, and
drawn from plugflow's generators (plugflow.manual_seed replays them).

Built: Bernoulli, Binomial, Categorical, Exponential, ExponentialFamily, Independent, Laplace,
LogNormal, MultivariateNormal, Normal, OneHotCategorical (and its StraightThrough form), Poisson,
TransformedDistribution, Uniform; the transforms listed in transforms.py; constraints;
kl_divergence / register_kl. Distributions that need lgamma / digamma (Gamma, Beta, Dirichlet,
StudentT, Chi2, ...) and the others of torch.distributions are not here yet."""

from . import constraints, transforms
from .bernoulli import Bernoulli
from .binomial import Binomial
from .categorical import Categorical
from .distribution import Distribution
from .exp_family import ExponentialFamily
from .exponential import Exponential
from .independent import Independent
from .kl import kl_divergence, register_kl
from .laplace import Laplace
from .log_normal import LogNormal
from .multivariate_normal import MultivariateNormal
from .normal import Normal
from .one_hot_categorical import OneHotCategorical, OneHotCategoricalStraightThrough
from .poisson import Poisson
from .transformed_distribution import TransformedDistribution
from .transforms import *  # noqa: F401,F403
from .uniform import Uniform

__all__ = [
    "Bernoulli", "Binomial", "Categorical", "Distribution", "Exponential", "ExponentialFamily", "Independent",
    "Laplace", "LogNormal", "MultivariateNormal", "Normal", "OneHotCategorical", "OneHotCategoricalStraightThrough",
    "Poisson", "TransformedDistribution", "Uniform", "constraints", "kl_divergence", "register_kl", "transforms",
]
__all__.extend(transforms.__all__)
