"""SparseAdam (torch.optim.SparseAdam): refused, since plugflow has no sparse tensors."""

__all__ = ["SparseAdam"]


class SparseAdam:
    """torch.optim.SparseAdam steps only sparse gradients (of nn.Embedding(sparse=True)), and
    plugflow has no sparse tensors: every gradient is dense. Constructing one raises
    NotImplementedError naming optim.Adam, the dense alternative (which updates the moments of
    every row, where SparseAdam updates those of the rows present in the gradient)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, maximize: bool = False):
        raise NotImplementedError("optim.SparseAdam needs sparse gradients, and plugflow has no sparse tensors "
                                  "(nn.Embedding(sparse=True) makes dense gradients); use optim.Adam")
