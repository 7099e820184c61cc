"""Binomial's and Poisson's samplers (PyTorch's torch.binomial and torch.poisson), composed from
plugflow's random draws so that plugflow.manual_seed replays them. The samplers are PyTorch's
algorithms: inversion (Binomial) or multiplication of uniforms (Poisson) for small means,
transformed rejection (BTRS, PTRS; Hormann 1993) otherwise, run on all elements at once, each round
redrawing the rejected ones."""

import math

import plugflow

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)

# Stirling's tail log k! - ((k + 1/2) log(k + 1) - (k + 1) + log(2 pi) / 2) for k = 0..9, where the
# series below converges too slowly
_SMALL_TAILS = [math.lgamma(k + 1) - ((k + 0.5) * math.log(k + 1) - (k + 1) + _HALF_LOG_2PI) for k in range(10)]


def _stirling_tail(k):
    """Stirling's tail for non-negative integers k (a float tensor): a table below 10,
    the asymptotic series 1/12z - 1/360z^3 + 1/1260z^5 - 1/1680z^7 + 1/1188z^9 (z = k + 1,
    error < 1e-14) from 10 on."""
    z = k + 1
    z2 = z * z
    series = (1 / 12 - (1 / 360 - (1 / 1260 - (1 / 1680 - 1 / 1188 / z2) / z2) / z2) / z2) / z
    table = plugflow.tensor(_SMALL_TAILS, dtype=k.dtype, device=k.device)[k.clamp(0, 9).long()]
    return plugflow.where(k < 10, table, series)


def _until_done(step, *state):
    """Runs step(*state) -> (done, value, state) on the elements (1-d state tensors, one entry
    per element) not done yet, until all are; returns each element's value (1-d). Each round works
    on the remaining elements only, so a long tail of rejections costs little."""
    result = plugflow.zeros_like(state[0])
    index = plugflow.arange(state[0].numel(), device=state[0].device)
    while index.numel() > 0:
        done, value, state = step(*state)
        result[index[done]] = value[done]
        more = (~done).nonzero().reshape(-1)
        index = index[more]
        state = [s.index_select(0, more) for s in state]
    return result


def _uniform_like(x, generator):
    return plugflow.rand(x.shape, dtype=x.dtype, device=x.device, generator=generator)


def _poisson_by_products(rate, generator):
    """Poisson draws for small rates (1-d): the number of uniforms multiplied before the product
    falls below exp(-rate)."""
    def step(threshold, product, count):
        product = product * _uniform_like(product, generator)
        done = product <= threshold
        return done, count, (threshold, product, count + 1)

    return _until_done(step, plugflow.exp(-rate), plugflow.ones_like(rate), plugflow.zeros_like(rate))


def _poisson_ptrs(lam, generator):
    """Poisson draws for rates >= 10 (1-d) by transformed rejection (PTRS)."""
    slam, loglam = lam.sqrt(), lam.log()
    b = 0.931 + 2.53 * slam
    a = -0.059 + 0.02483 * b
    inv_alpha = 1.1239 + 1.1328 / (b - 3.4)
    vr = 0.9277 - 3.6224 / (b - 2)

    def step(lam, loglam, a, b, inv_alpha, vr):
        u = _uniform_like(lam, generator) - 0.5
        v = _uniform_like(lam, generator)
        us = 0.5 - u.abs()
        k = plugflow.floor((2 * a / us + b) * u + lam + 0.43)
        quick = (us >= 0.07) & (v <= vr)
        possible = (k >= 0) & ~((us < 0.013) & (v > us))
        k_safe = k.clamp(min=0)
        log_accept = (v.log() + inv_alpha.log() - (a / (us * us) + b).log()
                      <= -lam + k_safe * loglam - plugflow.lgamma(k_safe + 1))
        return quick | (possible & log_accept), k, (lam, loglam, a, b, inv_alpha, vr)

    return _until_done(step, lam, loglam, a, b, inv_alpha, vr)


def poisson(rate, generator=None):
    """torch.poisson: a Poisson draw for each element of rate (a float tensor, no gradient); an
    infinite rate gives inf and NaN gives NaN."""
    flat = rate.reshape(-1)
    result = flat.clone()  # the non-finite rates stay as they are
    small = flat.isfinite() & (flat < 10)
    large = flat.isfinite() & (flat >= 10)
    if small.any():
        result[small] = _poisson_by_products(flat[small], generator)
    if large.any():
        result[large] = _poisson_ptrs(flat[large], generator)
    return result.reshape(rate.shape)


def _binomial_inversion(n, q, generator):
    """Binomial draws for n q < 10 (1-d, 0 < q <= 1/2): walks the cumulative probabilities from 0."""
    s = q / (1 - q)

    def step(n, s, u, r, k):
        done = (u <= r) | (k >= n)
        u = u - r
        k_next = k + 1
        r = r * ((n + 1) * s / k_next - s)  # P(k + 1) / P(k) = (n - k) q / ((k + 1) (1 - q))
        return done, k, (n, s, u, r, k_next)

    return _until_done(step, n, s, _uniform_like(q, generator), plugflow.exp(n * plugflow.log1p(-q)), plugflow.zeros_like(q))


def _binomial_btrs(n, p, generator):
    """Binomial draws for n p >= 10 (1-d, p <= 1/2) by transformed rejection (BTRS)."""
    stddev = (n * p * (1 - p)).sqrt()
    b = 1.15 + 2.53 * stddev
    a = -0.0873 + 0.0248 * b + 0.01 * p
    c = n * p + 0.5
    v_r = 0.92 - 4.2 / b
    r = p / (1 - p)
    alpha = (2.83 + 5.1 / b) * stddev
    m = plugflow.floor((n + 1) * p)
    m_tails = _stirling_tail(m) + _stirling_tail(n - m)

    def step(n, a, b, c, v_r, r, alpha, m, m_tails):
        u = _uniform_like(n, generator) - 0.5
        v = _uniform_like(n, generator)
        us = 0.5 - u.abs()
        k = plugflow.floor((2 * a / us + b) * u + c)
        in_range = (k >= 0) & (k <= n)
        quick = (us >= 0.07) & (v <= v_r)
        k_safe = plugflow.where(in_range, k, m)
        log_v = (v * alpha / (a / (us * us) + b)).log()
        upper = ((m + 0.5) * ((m + 1) / (r * (n - m + 1))).log()
                 + (n + 1) * ((n - m + 1) / (n - k_safe + 1)).log()
                 + (k_safe + 0.5) * (r * (n - k_safe + 1) / (k_safe + 1)).log()
                 + m_tails - _stirling_tail(k_safe) - _stirling_tail(n - k_safe))
        return in_range & (quick | (log_v <= upper)), k, (n, a, b, c, v_r, r, alpha, m, m_tails)

    return _until_done(step, n, a, b, c, v_r, r, alpha, m, m_tails)


def binomial(count, prob, generator=None):
    """torch.binomial: a Binomial(count, prob) draw for each element (float tensors of one shape,
    no gradient); NaN where count is not a finite non-negative number or prob not in [0, 1].
    Draws with q = min(prob, 1 - prob) and reflects (count - k) where prob > 1/2."""
    n, prob = count.reshape(-1), prob.reshape(-1)
    valid = n.isfinite() & (n >= 0) & (prob >= 0) & (prob <= 1)
    flip = prob > 0.5
    q = plugflow.where(flip, 1 - prob, prob)
    result = plugflow.zeros_like(n)  # n = 0 or q = 0: no successes
    trials = valid & (n > 0) & (q > 0)
    by_inversion = trials & (n * q < 10)
    by_rejection = trials & (n * q >= 10)
    if by_inversion.any():
        result[by_inversion] = _binomial_inversion(n[by_inversion], q[by_inversion], generator)
    if by_rejection.any():
        result[by_rejection] = _binomial_btrs(n[by_rejection], q[by_rejection], generator)
    result = plugflow.where(flip, n - result, result)
    return plugflow.where(valid, result, plugflow.full_like(result, plugflow.nan)).reshape(count.shape)
