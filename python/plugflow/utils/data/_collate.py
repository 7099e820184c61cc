"""Collation (torch.utils.data._utils.collate): how a DataLoader turns a list of samples into a
batch (default_collate) or converts single samples when batching is off (default_convert)."""

import collections.abc
import re

import numpy as np

import plugflow

__all__ = ["collate", "default_collate", "default_convert", "default_collate_fn_map"]

# numpy dtype kinds that have no tensor equivalent: byte strings, unicode, objects.
_NUMPY_STR_OBJ_DTYPE = re.compile(r"[SaUO]")

_COLLATE_ERROR = "default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found {}"


def _is_numpy(value):
    kind = type(value)
    return kind.__module__ == "numpy" and kind.__name__ not in ("str_", "string_", "bytes_")


def default_convert(data):
    """Converts numpy arrays and numpy scalars to tensors, inside mappings, namedtuples and
    sequences too (tuples become lists); leaves everything else as is."""
    kind = type(data)
    if isinstance(data, plugflow.Tensor):
        return data
    if _is_numpy(data):
        if kind.__name__ == "ndarray" and _NUMPY_STR_OBJ_DTYPE.search(data.dtype.str) is not None:
            return data
        return plugflow.as_tensor(data)
    if isinstance(data, collections.abc.Mapping):
        try:
            return kind({key: default_convert(data[key]) for key in data})
        except TypeError:  # a mapping whose constructor takes no iterable
            return {key: default_convert(data[key]) for key in data}
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # namedtuple
        return kind(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]
    if isinstance(data, collections.abc.Sequence) and not isinstance(data, (str, bytes)):
        try:
            return kind([default_convert(d) for d in data])
        except TypeError:
            return [default_convert(d) for d in data]
    return data


def collate(batch, *, collate_fn_map=None):
    """Collates a list of samples by the type of the first: collate_fn_map's function for that
    type (exact match first, then the first key it is an instance of), else mappings, namedtuples
    and sequences element by element."""
    elem = batch[0]
    kind = type(elem)
    if collate_fn_map is not None:
        if kind in collate_fn_map:
            return collate_fn_map[kind](batch, collate_fn_map=collate_fn_map)
        for collate_type, fn in collate_fn_map.items():
            if isinstance(elem, collate_type):
                return fn(batch, collate_fn_map=collate_fn_map)
    if isinstance(elem, collections.abc.Mapping):
        try:
            return kind({key: collate([d[key] for d in batch], collate_fn_map=collate_fn_map) for key in elem})
        except TypeError:
            return {key: collate([d[key] for d in batch], collate_fn_map=collate_fn_map) for key in elem}
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # namedtuple
        return kind(*(collate(samples, collate_fn_map=collate_fn_map) for samples in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        size = len(elem)
        if any(len(sample) != size for sample in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        transposed = list(zip(*batch))
        if isinstance(elem, tuple):
            return [collate(samples, collate_fn_map=collate_fn_map) for samples in transposed]
        try:
            return kind([collate(samples, collate_fn_map=collate_fn_map) for samples in transposed])
        except TypeError:  # a sequence whose constructor takes no list (range, ...)
            return [collate(samples, collate_fn_map=collate_fn_map) for samples in transposed]
    raise TypeError(_COLLATE_ERROR.format(kind))


def collate_tensor_fn(batch, *, collate_fn_map=None):
    return plugflow.stack(batch, 0)


def collate_numpy_array_fn(batch, *, collate_fn_map=None):
    if _NUMPY_STR_OBJ_DTYPE.search(batch[0].dtype.str) is not None:
        raise TypeError(_COLLATE_ERROR.format(batch[0].dtype))
    return collate([plugflow.as_tensor(b) for b in batch], collate_fn_map=collate_fn_map)


def collate_numpy_scalar_fn(batch, *, collate_fn_map=None):
    return plugflow.as_tensor(batch)


def collate_float_fn(batch, *, collate_fn_map=None):
    return plugflow.tensor(batch, dtype=plugflow.float64)


def collate_int_fn(batch, *, collate_fn_map=None):
    return plugflow.tensor(batch)  # int64; bool when the samples are bools


def collate_str_fn(batch, *, collate_fn_map=None):
    return batch


default_collate_fn_map = {
    plugflow.Tensor: collate_tensor_fn,
    np.ndarray: collate_numpy_array_fn,
    (np.bool_, np.number, np.object_): collate_numpy_scalar_fn,
    float: collate_float_fn,
    int: collate_int_fn,
    (str, bytes): collate_str_fn,
}


def default_collate(batch):
    """Stacks a list of samples into a batch, as PyTorch's default_collate:
    tensors -> one tensor with a new leading batch dimension; numpy arrays and numpy scalars ->
    tensors likewise; floats -> a float64 tensor; ints -> an int64 tensor (bools -> bool);
    str/bytes -> the list unchanged; mappings -> the same mapping of collated values;
    namedtuples -> the same namedtuple of collated fields; other sequences -> a list (tuples)
    or the same sequence type of collated positions."""
    return collate(batch, collate_fn_map=default_collate_fn_map)
