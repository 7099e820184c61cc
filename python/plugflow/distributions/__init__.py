"""plugflow.distributions: PyTorch 1.13's torch.distributions, composed from plugflow's ops so that
rsample's reparameterized draws and log_prob differentiate with respect to the parameters, and
drawn from plugflow's generators (plugflow.manual_seed replays them).

Built: Bernoulli, Beta, Binomial, Categorical, Cauchy, Chi2, ContinuousBernoulli, Dirichlet,
Exponential, ExponentialFamily, FisherSnedecor, Gamma, Geometric, Gumbel, HalfNormal, Independent,
Kumaraswamy, Laplace, LogNormal, LogisticNormal, MixtureSameFamily, Multinomial, MultivariateNormal,
NegativeBinomial, Normal, OneHotCategorical (and its StraightThrough form), Pareto, Poisson,
RelaxedBernoulli (and LogitRelaxedBernoulli), RelaxedOneHotCategorical (and ExpRelaxedCategorical),
StudentT, TransformedDistribution, Uniform, VonMises, Weibull; the transforms listed in
transforms.py; constraints; kl_divergence / register_kl. The gamma-based samples (Gamma, Chi2, Beta,
Dirichlet, StudentT, FisherSnedecor) are not differentiable with respect to the concentration
(_gamma.py). Not here yet: Wishart and LKJCholesky."""

from . import constraints, transforms
from .bernoulli import Bernoulli
from .beta import Beta
from .binomial import Binomial
from .categorical import Categorical
from .cauchy import Cauchy
from .chi2 import Chi2
from .continuous_bernoulli import ContinuousBernoulli
from .dirichlet import Dirichlet
from .distribution import Distribution
from .exp_family import ExponentialFamily
from .exponential import Exponential
from .fishersnedecor import FisherSnedecor
from .gamma import Gamma
from .geometric import Geometric
from .gumbel import Gumbel
from .half_normal import HalfNormal
from .independent import Independent
from .kl import kl_divergence, register_kl
from .kumaraswamy import Kumaraswamy
from .laplace import Laplace
from .log_normal import LogNormal
from .logistic_normal import LogisticNormal
from .lowrank_multivariate_normal import LowRankMultivariateNormal
from .mixture_same_family import MixtureSameFamily
from .multinomial import Multinomial
from .multivariate_normal import MultivariateNormal
from .negative_binomial import NegativeBinomial
from .normal import Normal
from .one_hot_categorical import OneHotCategorical, OneHotCategoricalStraightThrough
from .pareto import Pareto
from .poisson import Poisson
from .relaxed_bernoulli import RelaxedBernoulli
from .relaxed_categorical import RelaxedOneHotCategorical
from .studentT import StudentT
from .transformed_distribution import TransformedDistribution
from .transforms import *  # noqa: F401,F403
from .uniform import Uniform
from .von_mises import VonMises
from .weibull import Weibull

__all__ = [
    "Bernoulli", "Beta", "Binomial", "Categorical", "Cauchy", "Chi2", "ContinuousBernoulli", "Dirichlet",
    "Distribution", "Exponential", "ExponentialFamily", "FisherSnedecor", "Gamma", "Geometric", "Gumbel",
    "HalfNormal", "Independent", "Kumaraswamy", "Laplace", "LogNormal", "LogisticNormal",
    "LowRankMultivariateNormal", "MixtureSameFamily", "Multinomial", "MultivariateNormal", "NegativeBinomial",
    "Normal", "OneHotCategorical", "OneHotCategoricalStraightThrough", "Pareto", "Poisson",
    "RelaxedBernoulli", "RelaxedOneHotCategorical", "StudentT", "TransformedDistribution", "Uniform",
    "VonMises", "Weibull", "constraints", "kl_divergence", "register_kl", "transforms",
]
__all__.extend(transforms.__all__)
