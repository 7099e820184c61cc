"""Variable-length sequences for the recurrent layers (torch.nn.utils.rnn, PyTorch 1.13).

A PackedSequence holds a batch of sequences sorted by decreasing length, time-major and without
padding: `data` is step 0 of every sequence, then step 1 of those at least 2 long, ... and
`batch_sizes[t]` (a CPU int64 tensor) says how many sequences step t has. nn.RNN / LSTM / GRU
take one as input and return one. Everything here is made of differentiable ops (slicing, cat,
index_select), so gradients flow from padded to packed data and back.
"""

from collections import namedtuple
from collections.abc import Iterable

from ... import _creation

__all__ = ["PackedSequence", "invert_permutation", "pack_padded_sequence", "pad_packed_sequence", "pad_sequence",
           "unpad_sequence", "pack_sequence", "unpack_sequence"]


def _pf():
    import plugflow
    return plugflow


def _bind(optional, fn):
    return None if optional is None else fn(optional)


PackedSequence_ = namedtuple("PackedSequence_", ["data", "batch_sizes", "sorted_indices", "unsorted_indices"])


class PackedSequence(PackedSequence_):
    """The packed form of a batch of variable-length sequences (made by pack_padded_sequence or
    pack_sequence, never by hand): data, batch_sizes, sorted_indices (the batch order that sorted
    the sequences by length, or None) and unsorted_indices (its inverse)."""

    def __new__(cls, data, batch_sizes=None, sorted_indices=None, unsorted_indices=None):
        if unsorted_indices is None:
            unsorted_indices = invert_permutation(sorted_indices)
        if batch_sizes is not None:
            if batch_sizes.device.type != "cpu":
                raise ValueError(
                    "batch_sizes should always be on CPU. Instances of PackedSequence should never be created "
                    "manually. They should be instantiated by functions like pack_sequence and "
                    "pack_padded_sequences in nn.utils.rnn. "
                    "https://pytorch.org/docs/stable/nn.html#torch.nn.utils.rnn.pack_sequence")
        else:
            assert isinstance(data, (list, tuple)) and len(data) == 2
            data, batch_sizes = data
        return super().__new__(cls, data, batch_sizes, sorted_indices, unsorted_indices)

    def pin_memory(self):
        return type(self)(self.data.pin_memory(), self.batch_sizes,
                          _bind(self.sorted_indices, lambda t: t.pin_memory()),
                          _bind(self.unsorted_indices, lambda t: t.pin_memory()))

    def cuda(self, *args, **kwargs):
        converted = _creation.tensor((), dtype=self.data.dtype, device=self.data.device).to(*args, **kwargs)
        if converted.is_cuda:
            return self.to(*args, **kwargs)
        return self.to(*args, device="cuda", **kwargs)

    def cpu(self, *args, **kwargs):
        converted = _creation.tensor((), dtype=self.data.dtype, device=self.data.device).to(*args, **kwargs)
        if converted.device.type == "cpu":
            return self.to(*args, **kwargs)
        return self.to(*args, device="cpu", **kwargs)

    def double(self):
        return self.to(dtype=_pf().double)

    def float(self):
        return self.to(dtype=_pf().float)

    def half(self):
        return self.to(dtype=_pf().half)

    def long(self):
        return self.to(dtype=_pf().long)

    def int(self):
        return self.to(dtype=_pf().int)

    def short(self):
        return self.to(dtype=_pf().short)

    def char(self):
        return self.to(dtype=_pf().int8)

    def byte(self):
        return self.to(dtype=_pf().uint8)

    def to(self, *args, **kwargs):
        """Tensor.to on `data` (the index tensors follow its device; batch_sizes stays on the CPU);
        self when nothing changes."""
        data = self.data.to(*args, **kwargs)
        if data is self.data:
            return self
        kwargs = {k: v for k, v in kwargs.items() if k not in ("device", "dtype")}
        sorted_indices = _bind(self.sorted_indices, lambda t: t.to(data.device, **kwargs))
        unsorted_indices = _bind(self.unsorted_indices, lambda t: t.to(data.device, **kwargs))
        return type(self)(data, self.batch_sizes, sorted_indices, unsorted_indices)

    @property
    def is_cuda(self):
        return self.data.is_cuda

    def is_pinned(self):
        return self.data.is_pinned()


def invert_permutation(permutation):
    """The inverse of a permutation of 0..n-1 (None for None)."""
    if permutation is None:
        return None
    pf = _pf()
    output = pf.empty_like(permutation)
    return output.scatter_(0, permutation, pf.arange(0, permutation.numel(), device=permutation.device))


def pack_padded_sequence(input, lengths, batch_first=False, enforce_sorted=True):
    """Packs a padded batch (T x B x * or, with batch_first, B x T x *) of sequences with the
    given lengths (a list or a CPU tensor). With enforce_sorted the lengths must be decreasing;
    without, the batch is sorted here and the PackedSequence remembers the order."""
    pf = _pf()
    lengths = pf.as_tensor(lengths, dtype=pf.int64)
    if enforce_sorted:
        sorted_indices = None
    else:
        lengths, sorted_indices = pf.sort(lengths, descending=True)
        sorted_indices = sorted_indices.to(input.device)
        input = input.index_select(0 if batch_first else 1, sorted_indices)
    data, batch_sizes = _pack_padded(input, lengths, batch_first)
    return PackedSequence(data, batch_sizes, sorted_indices, None)


def _pack_padded(input, lengths, batch_first):
    """ATen's _pack_padded_sequence: the packed data and batch sizes, with its checks and messages."""
    pf = _pf()
    if lengths.device.type != "cpu" or lengths.dim() != 1:
        raise RuntimeError("'lengths' argument should be a 1D CPU int64 tensor, but got {}D {} Long tensor".format(
            lengths.dim(), lengths.device.type))
    if batch_first:
        input = input.transpose(0, 1)
    if input.numel() == 0:
        raise RuntimeError("Cannot pack empty tensors.")
    batch_size = input.size(1)
    length_list = lengths.tolist()
    if len(length_list) != batch_size:
        raise RuntimeError("Expected `len(lengths)` to be equal to batch_size, but got {} (batch_size={})".format(
            len(length_list), batch_size))
    if length_list[-1] <= 0:
        raise RuntimeError("Length of all samples has to be greater than 0, but found an element in 'lengths' "
                           "that is <= 0")
    if any(later > earlier for earlier, later in zip(length_list, length_list[1:])):
        raise RuntimeError("`lengths` array must be sorted in decreasing order when `enforce_sorted` is True. You "
                           "can pass `enforce_sorted=False` to pack_padded_sequence and/or pack_sequence to "
                           "sidestep this requirement if you do not need ONNX exportability.")
    if length_list[0] > input.size(0):
        # PyTorch packs fewer rows than its batch sizes promise here; refused rather than made inconsistent.
        raise RuntimeError("pack_padded_sequence: a length ({}) exceeds the padded sequence length ({})".format(
            length_list[0], input.size(0)))
    steps, batch_sizes = [], []
    previous_length = 0
    # Runs of time steps with the same batch size, from the shortest sequence up: one slice each.
    for i in range(batch_size - 1, -1, -1):
        length = length_list[i]
        if length > previous_length:
            step = input[previous_length:length, :i + 1]
            steps.append(step.reshape((-1,) + tuple(input.shape[2:])))
            batch_sizes += [i + 1] * (length - previous_length)
            previous_length = length
    return pf.cat(steps, 0), pf.tensor(batch_sizes, dtype=pf.int64)


def pad_packed_sequence(sequence, batch_first=False, padding_value=0.0, total_length=None):
    """The inverse of pack_padded_sequence: (padded T x B x * or B x T x *, lengths as a CPU int64
    tensor), in the batch's original order; total_length pads to that many steps."""
    pf = _pf()
    batch_size_list = sequence.batch_sizes.tolist()
    max_seq_length = len(batch_size_list)
    if total_length is not None:
        if total_length < max_seq_length:
            raise ValueError("Expected total_length to be at least the length of the longest sequence in input, "
                             "but got total_length={} and max sequence length being {}".format(
                                 total_length, max_seq_length))
        max_seq_length = total_length
    data = sequence.data
    max_batch_size = batch_size_list[0]
    trailing = tuple(data.shape[1:])
    rows, offset = [], 0
    for batch_size in batch_size_list:
        step = data[offset:offset + batch_size]
        if batch_size < max_batch_size:
            step = pf.cat([step, pf.full((max_batch_size - batch_size,) + trailing, padding_value,
                                         dtype=data.dtype, device=data.device)], 0)
        rows.append(step)
        offset += batch_size
    padding_row = pf.full((max_batch_size,) + trailing, padding_value, dtype=data.dtype, device=data.device)
    rows += [padding_row] * (max_seq_length - len(rows))
    padded = pf.stack(rows, 0)
    # Sequence b is as long as the number of steps that have more than b sequences.
    lengths = [sum(1 for batch_size in batch_size_list if batch_size > b) for b in range(max_batch_size)]
    lengths = pf.tensor(lengths, dtype=pf.int64)
    if batch_first:
        padded = padded.transpose(0, 1)
    if sequence.unsorted_indices is not None:
        return (padded.index_select(0 if batch_first else 1, sequence.unsorted_indices),
                lengths[sequence.unsorted_indices.cpu()])
    return padded, lengths


def pad_sequence(sequences, batch_first=False, padding_value=0.0):
    """Stacks L_i x * tensors into T x B x * (B x T x * with batch_first), T the longest L_i,
    filling with padding_value; the result has the first sequence's dtype."""
    pf = _pf()
    if not isinstance(sequences, Iterable):
        raise RuntimeError("pad_sequence: Expected iterable for input sequences, but got arg of type: "
                           f"{type(sequences)}")
    sequences = tuple(sequences)
    if len(sequences) == 0:
        raise RuntimeError("received an empty list of sequences")
    for seq in sequences:
        if seq.dim() == 0:
            raise IndexError("Dimension specified as 0 but tensor has no dimensions")
    first = sequences[0]
    trailing = tuple(first.shape[1:])
    max_len = max(seq.size(0) for seq in sequences)
    padded = []
    for seq in sequences:
        seq = seq.to(first.dtype)
        if tuple(seq.shape[1:]) != trailing:
            seq = seq.expand((seq.size(0),) + trailing)  # ATen copies with broadcasting (or raises)
        if seq.size(0) < max_len:
            seq = pf.cat([seq, pf.full((max_len - seq.size(0),) + trailing, padding_value, dtype=first.dtype,
                                       device=first.device)], 0)
        padded.append(seq)
    return pf.stack(padded, 0 if batch_first else 1)


def unpad_sequence(padded_sequences, lengths, batch_first=False):
    """The list of sequences that pad_sequence padded, cut to their lengths."""
    if not batch_first:
        # PyTorch transposes its argument in place here; plugflow does the same so callers see the same tensor.
        padded_sequences.transpose_(0, 1)
    return [seq[:int(length)] for seq, length in zip(padded_sequences, lengths)]


def pack_sequence(sequences, enforce_sorted=True):
    """pack_padded_sequence(pad_sequence(sequences), their lengths)."""
    pf = _pf()
    lengths = pf.as_tensor([v.size(0) for v in sequences])
    return pack_padded_sequence(pad_sequence(sequences), lengths, enforce_sorted=enforce_sorted)


def unpack_sequence(packed_sequences):
    """The list of sequences a PackedSequence holds, in their original order."""
    padded_sequences, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded_sequences, lengths, batch_first=True)
