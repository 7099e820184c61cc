"""Named tuples returned by reductions with indices and by linalg solvers (torch.return_types)."""

__all__ = ["max", "min", "sort", "topk", "linalg_lstsq", "linalg_inv_ex", "linalg_solve_ex", "linalg_cholesky_ex",
           "linalg_slogdet", "slogdet", "linalg_qr", "linalg_svd", "linalg_eigh",
           "triangular_solve", "svd", "qr", "symeig"]


def _structseq(name, fields):
    """A tuple subclass with named fields whose repr matches torch.return_types."""

    def __new__(cls, iterable):
        values = tuple(iterable)
        if len(values) != len(fields):
            raise TypeError(f"plugflow.return_types.{name} takes a {len(fields)}-sequence "
                            f"({len(values)}-sequence given)")
        return tuple.__new__(cls, values)

    def __repr__(self):
        body = ",\n".join(f"{f}={v!r}" for f, v in zip(fields, self))
        return f"plugflow.return_types.{name}(\n{body})"

    def __reduce__(self):
        return (type(self), (tuple(self),))

    namespace = {"__new__": __new__, "__repr__": __repr__, "__reduce__": __reduce__,
                 "__slots__": (), "__module__": "plugflow.return_types",
                 "n_fields": len(fields), "_fields": tuple(fields)}
    for i, field in enumerate(fields):
        namespace[field] = property(lambda self, i=i: tuple.__getitem__(self, i))
    return type(name, (tuple,), namespace)


max = _structseq("max", ("values", "indices"))
min = _structseq("min", ("values", "indices"))
sort = _structseq("sort", ("values", "indices"))
topk = _structseq("topk", ("values", "indices"))
linalg_lstsq = _structseq("linalg_lstsq", ("solution", "residuals", "rank", "singular_values"))
linalg_inv_ex = _structseq("linalg_inv_ex", ("inverse", "info"))
linalg_solve_ex = _structseq("linalg_solve_ex", ("result", "info"))
linalg_cholesky_ex = _structseq("linalg_cholesky_ex", ("L", "info"))
linalg_slogdet = _structseq("linalg_slogdet", ("sign", "logabsdet"))
slogdet = _structseq("slogdet", ("sign", "logabsdet"))
linalg_qr = _structseq("linalg_qr", ("Q", "R"))
linalg_svd = _structseq("linalg_svd", ("U", "S", "Vh"))
linalg_eigh = _structseq("linalg_eigh", ("eigenvalues", "eigenvectors"))
triangular_solve = _structseq("triangular_solve", ("solution", "cloned_coefficient"))
svd = _structseq("svd", ("U", "S", "V"))
qr = _structseq("qr", ("Q", "R"))
symeig = _structseq("symeig", ("eigenvalues", "eigenvectors"))
