"""What Binomial and Poisson need beyond plugflow's ops: log-factorials and samplers (PyTorch's
torch.binomial and torch.poisson), composed from plugflow's random draws so that
plugflow.manual_seed replays them. The samplers are PyTorch's algorithms: inversion (Binomial) or
multiplication of uniforms (Poisson) for small means, transformed rejection (BTRS, PTRS; Hormann
1993) otherwise, run on all elements at once, each round redrawing the rejected ones."""

import math

import plugflow

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def _stirling_base(k):
    """(k + 1/2) log(k + 1) - (k + 1) + log(2 pi) / 2: Stirling's log k! without its tail."""
    return (k + 0.5) * plugflow.log(k + 1) - (k + 1) + _HALF_LOG_2PI


# log k! - _stirling_base(k) for k = 0..9, where the series below converges too slowly
_SMALL_TAILS = [math.lgamma(k + 1) - ((k + 0.5) * math.log(k + 1) - (k + 1) + _HALF_LOG_2PI) for k in range(10)]


def _stirling_tail(k):
    """log k! - _stirling_base(k) for non-negative integers k (a float tensor): a table below 10,
    the asymptotic series 1/12z - 1/360z^3 + 1/1260z^5 - 1/1680z^7 + 1/1188z^9 (z = k + 1,
    error < 1e-14) from 10 on."""
    z = k + 1
    z2 = z * z
    series = (1 / 12 - (1 / 360 - (1 / 1260 - (1 / 1680 - 1 / 1188 / z2) / z2) / z2) / z2) / z
    table = plugflow.tensor(_SMALL_TAILS, dtype=k.dtype, device=k.device)[k.clamp(0, 9).long()]
    return plugflow.where(k < 10, table, series)


def log_factorial(k):
    """log k! for non-negative integers k (a float tensor)."""
    return _stirling_base(k) + _stirling_tail(k)


def lgamma(x):
    """torch.lgamma where plugflow has it. Without it, log (x - 1)! for the integers x >= 1 that
    Binomial's and Poisson's log_prob meet on their supports, and NotImplementedError otherwise
    (a value off the support with validation off, a gradient with respect to total_count)."""
    if hasattr(plugflow, "lgamma"):
        return plugflow.lgamma(x)
    if x.requires_grad or not ((x >= 1) & (x % 1 == 0)).all():
        raise NotImplementedError("lgamma of a non-integer, or its gradient, needs torch.lgamma, which plugflow "
                                  "does not have yet")
    return log_factorial(x - 1)


def _uniform(shape, like):
    return plugflow.rand(shape, dtype=like.dtype, device=like.device)


def poisson(rate):
    """torch.poisson: a Poisson draw for each element of rate (a float tensor, no gradient)."""
    shape = rate.shape
    result = plugflow.zeros_like(rate)
    finite = rate.isfinite()

    # rate < 10: count uniforms multiplied until the product falls below exp(-rate)
    active = finite & (rate < 10)
    threshold = plugflow.exp(-rate)
    product = plugflow.ones_like(rate)
    while active.any():
        product = plugflow.where(active, product * _uniform(shape, rate), product)
        active = active & (product > threshold)
        result = result + active.to(rate.dtype)

    # rate >= 10: PTRS
    pending = finite & (rate >= 10)
    if pending.any():
        lam = plugflow.where(pending, rate, plugflow.full_like(rate, 10.0))
        slam, loglam = lam.sqrt(), lam.log()
        b = 0.931 + 2.53 * slam
        a = -0.059 + 0.02483 * b
        inv_alpha = 1.1239 + 1.1328 / (b - 3.4)
        vr = 0.9277 - 3.6224 / (b - 2)
        while pending.any():
            u = _uniform(shape, rate) - 0.5
            v = _uniform(shape, rate)
            us = 0.5 - u.abs()
            k = plugflow.floor((2 * a / us + b) * u + lam + 0.43)
            quick = (us >= 0.07) & (v <= vr)
            possible = (k >= 0) & ~((us < 0.013) & (v > us))
            k_safe = k.clamp(min=0)
            log_accept = (v.log() + inv_alpha.log() - (a / (us * us) + b).log()
                          <= -lam + k_safe * loglam - log_factorial(k_safe))
            accept = pending & (quick | (possible & log_accept))
            result = plugflow.where(accept, k, result)
            pending = pending & ~accept
    return plugflow.where(finite, result, rate)  # an infinite rate gives inf, NaN gives NaN


def binomial(count, prob):
    """torch.binomial: a Binomial(count, prob) draw for each element (float tensors of one shape,
    no gradient). Draws with q = min(prob, 1 - prob) and reflects (count - k) where prob > 1/2."""
    shape = count.shape
    valid = count.isfinite() & (count >= 0) & (prob >= 0) & (prob <= 1)
    n = plugflow.where(valid, count, plugflow.zeros_like(count))
    flip = prob > 0.5
    q = plugflow.where(valid, plugflow.where(flip, 1 - prob, prob), plugflow.zeros_like(prob))
    result = plugflow.zeros_like(count)

    # n q < 10: inversion, walking the cumulative probabilities from 0
    active = valid & (n * q < 10) & (n > 0) & (q > 0)
    if active.any():
        q_safe = plugflow.where(active, q, plugflow.full_like(q, 0.5))
        s = q_safe / (1 - q_safe)
        a = (n + 1) * s
        r = plugflow.exp(n * plugflow.log1p(-q_safe))  # P(k = 0)
        u = _uniform(shape, count)
        k = plugflow.zeros_like(count)
        while active.any():
            step = active & (u > r) & (k < n)
            u = plugflow.where(step, u - r, u)
            k = k + step.to(count.dtype)
            r = plugflow.where(step, r * (a / k.clamp(min=1) - s), r)
            active = step
        result = plugflow.where(valid & (n * q < 10), k, result)

    # n q >= 10: BTRS
    pending = valid & (n * q >= 10)
    if pending.any():
        n_ = plugflow.where(pending, n, plugflow.full_like(n, 40.0))
        p_ = plugflow.where(pending, q, plugflow.full_like(q, 0.5))
        stddev = (n_ * p_ * (1 - p_)).sqrt()
        b = 1.15 + 2.53 * stddev
        a = -0.0873 + 0.0248 * b + 0.01 * p_
        c = n_ * p_ + 0.5
        v_r = 0.92 - 4.2 / b
        r = p_ / (1 - p_)
        alpha = (2.83 + 5.1 / b) * stddev
        m = plugflow.floor((n_ + 1) * p_)
        while pending.any():
            u = _uniform(shape, count) - 0.5
            v = _uniform(shape, count)
            us = 0.5 - u.abs()
            k = plugflow.floor((2 * a / us + b) * u + c)
            in_range = (k >= 0) & (k <= n_)
            quick = (us >= 0.07) & (v <= v_r)
            k_safe = k.clamp(min=0)
            k_safe = plugflow.where(k_safe > n_, n_, k_safe)
            log_v = (v * alpha / (a / (us * us) + b)).log()
            upper = ((m + 0.5) * ((m + 1) / (r * (n_ - m + 1))).log()
                     + (n_ + 1) * ((n_ - m + 1) / (n_ - k_safe + 1)).log()
                     + (k_safe + 0.5) * (r * (n_ - k_safe + 1) / (k_safe + 1)).log()
                     + _stirling_tail(m) + _stirling_tail(n_ - m) - _stirling_tail(k_safe) - _stirling_tail(n_ - k_safe))
            accept = pending & in_range & (quick | (log_v <= upper))
            result = plugflow.where(accept, k, result)
            pending = pending & ~accept

    result = plugflow.where(flip, n - result, result)
    return plugflow.where(valid, result, plugflow.full_like(result, plugflow.nan))
