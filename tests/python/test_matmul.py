"""matmul / mm / bmm / @ for every rank combination PyTorch allows, against PyTorch."""

import numpy as np
import pytest
import torch

import plugflow as pf
from helpers import assert_matches, assert_same_outcome, make_pair

MATMUL_SHAPES = [
    ((4,), (4,)),            # dot
    ((3, 4), (4,)),          # matrix-vector
    ((4,), (4, 5)),          # vector-matrix
    ((3, 4), (4, 5)),        # matrix-matrix
    ((2, 3, 4), (4, 5)),     # batched @ matrix
    ((4,), (2, 4, 5)),       # vector @ batched
    ((2, 3, 4), (4,)),       # batched @ vector
    ((2, 3, 4), (2, 4, 5)),  # batched @ batched
    ((2, 1, 3, 4), (5, 4, 2)),  # broadcast batch dims
    ((1, 3, 4), (6, 4, 2)),
    ((3, 0), (0, 2)),        # empty inner dim: zeros
]


@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES, ids=[f"{a}@{b}" for a, b in MATMUL_SHAPES])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
def test_matmul_shapes(sa, sb, dtype):
    rng = np.random.default_rng(0)
    a, ta = make_pair(rng, sa, dtype)
    b, tb = make_pair(rng, sb, dtype)
    expected = torch.matmul(ta, tb)
    assert_matches(pf.matmul(a, b), expected, rtol=1e-5, atol=1e-4)
    assert_matches(a @ b, expected, rtol=1e-5, atol=1e-4)
    assert_matches(a.matmul(b), expected, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_mm_and_bmm_with_non_contiguous_inputs(dtype):
    rng = np.random.default_rng(1)
    a, ta = make_pair(rng, (5, 3), dtype)
    b, tb = make_pair(rng, (6, 5), dtype)
    # a.t() is column-major, b[:, ::2] strided, b.t() transposed.
    assert_matches(pf.mm(a.t(), b.t()), torch.mm(ta.t(), tb.t()))
    assert_matches(a.t().mm(b[:5, ::2]), ta.t().mm(tb[:5, ::2]))
    x, tx = make_pair(rng, (4, 3, 2), dtype)
    y, ty = make_pair(rng, (4, 5, 3), dtype)
    assert_matches(pf.bmm(x.transpose(1, 2), y.transpose(1, 2)), torch.bmm(tx.transpose(1, 2), ty.transpose(1, 2)))
    assert_matches(x.transpose(1, 2).bmm(y.transpose(1, 2)), tx.transpose(1, 2).bmm(ty.transpose(1, 2)))
    # an expanded (stride-0) operand
    v, tv = make_pair(rng, (3, 1), dtype)
    assert_matches(v.expand(3, 4).t() @ a.t(), tv.expand(3, 4).t() @ ta.t())


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("m,k,n", [(131, 67, 97), (37, 129, 301), (300, 33, 29)])
@pytest.mark.parametrize("transpose", ["nn", "tn", "nt", "tt"])
def test_large_gemm_split_over_threads(m, k, n, transpose, dtype):
    """GEMMs above the parallel grain run threaded (blas.h): float32 on oneDNN's sgemm,
    float64 split into OpenBLAS row or column strips, where odd sizes leave a partial last
    strip and transposed operands move the strip offset."""
    rng = np.random.default_rng(m + n)
    a, ta = make_pair(rng, (k, m) if transpose[0] == "t" else (m, k), dtype)
    b, tb = make_pair(rng, (n, k) if transpose[1] == "t" else (k, n), dtype)
    if transpose[0] == "t":
        a, ta = a.t(), ta.t()
    if transpose[1] == "t":
        b, tb = b.t(), tb.t()
    threads = pf.get_num_threads()
    try:
        pf.set_num_threads(3)  # uneven: strips do not divide evenly
        assert_matches(a @ b, ta @ tb, rtol=1e-5, atol=1e-4)
        # a batch: matrices in parallel, each GEMM on one thread
        x, tx = make_pair(rng, (5, m, k), dtype)
        y, ty = make_pair(rng, (5, k, n), dtype)
        assert_matches(x @ y, tx @ ty, rtol=1e-5, atol=1e-4)
    finally:
        pf.set_num_threads(threads)


def test_matmul_promotes_mixed_dtypes_like_torch():
    a, b = pf.ones(2, 3, dtype=pf.float32), pf.ones(3, 2, dtype=pf.float32)
    assert (a @ b).dtype is pf.float32
    with pytest.raises(RuntimeError):
        pf.mm(pf.ones(2, 3), pf.ones(3, 2, dtype=pf.float64))  # torch: "expected ... same dtype"


def test_matmul_errors():
    with pytest.raises(RuntimeError):
        pf.ones(2, 3) @ pf.ones(4, 2)
    with pytest.raises(RuntimeError):
        pf.mm(pf.ones(2), pf.ones(2, 2))
    with pytest.raises(RuntimeError):
        pf.bmm(pf.ones(2, 3, 4), pf.ones(3, 4, 5))
    with pytest.raises(RuntimeError):
        pf.matmul(pf.ones(()), pf.ones(2))
    with pytest.raises(TypeError):
        pf.ones(2, 2) @ [[1, 0], [0, 1]]


@pytest.mark.parametrize("code", [
    "lib.addmv(lib.zeros(2), lib.tensor([[float('nan'), 1.], [1., 1.]]), lib.ones(2), alpha=0)",
    "lib.addmm(lib.ones(2, 2), lib.tensor([[float('inf')], [1.]]), lib.zeros(1, 2), beta=2, alpha=0)",
    "lib.addmm(lib.zeros(2, 2), lib.tensor([[float('nan'), 1.], [1., 1.]]), lib.ones(2, 2), alpha=0)",
    "lib.baddbmm(lib.zeros(1, 2, 2), lib.tensor([[[float('nan'), 1.], [1., 1.]]]), lib.ones(1, 2, 2), alpha=0)",
    "lib.addmv(lib.zeros(1, dtype=lib.uint8), lib.ones(1, 3, dtype=lib.uint8), lib.ones(3, dtype=lib.uint8), alpha=-1.5)",
    "lib.addmm(lib.zeros(1, 1, dtype=lib.int64), lib.ones(1, 3, dtype=lib.int64), lib.ones(3, 1, dtype=lib.int64), alpha=2.5)",
    "lib.baddbmm(lib.zeros(1, 1, 1, dtype=lib.int8), lib.ones(1, 1, 2, dtype=lib.int8), lib.ones(1, 2, 1, dtype=lib.int8), beta=300)",
    # Bool products (found by the fuzzer): none exist; an empty one fails on the cast of beta * self.
    "lib.addmm(lib.zeros(6, 2, dtype=lib.bool), lib.ones(6, 0, dtype=lib.bool), lib.ones(0, 2, dtype=lib.bool))",
    "lib.addmm(lib.zeros(6, 2, dtype=lib.bool), lib.ones(6, 0, dtype=lib.bool), lib.ones(0, 2, dtype=lib.bool), beta=0.5)",
    "lib.addmm(lib.zeros(6, 2, dtype=lib.bool), lib.ones(6, 0, dtype=lib.bool), lib.ones(0, 2, dtype=lib.bool), beta=True)",
    "lib.addmv(lib.zeros(6, dtype=lib.bool), lib.ones(6, 0, dtype=lib.bool), lib.ones(0, dtype=lib.bool))",
    "lib.baddbmm(lib.zeros(1, 6, 2, dtype=lib.bool), lib.ones(1, 6, 0, dtype=lib.bool), lib.ones(1, 0, 2, dtype=lib.bool))",
    "lib.addbmm(lib.zeros(6, 2, dtype=lib.bool), lib.ones(1, 6, 0, dtype=lib.bool), lib.ones(1, 0, 2, dtype=lib.bool))",
])
def test_alpha_and_beta_of_matrix_products_match_torch(code):
    # Found by the fuzzer: a zero alpha ignores the product's NaN in addmv (BLAS gemv), not in
    # addmm and baddbmm; integral products convert alpha and beta with overflow checks.
    assert_same_outcome(lambda lib: eval(code))  # noqa: S307
