"""Recurrent layers (torch.nn.modules.rnn, PyTorch 1.13): RNN, LSTM, GRU and their cells.

Written with plugflow's differentiable ops (linear, sigmoid, tanh, relu, stack, cat), so autograd
gives the gradients. Each layer and direction projects the whole input sequence with one matmul
(x @ W_ih^T + b_ih for every time step at once), then loops over time for the hidden part.

A PackedSequence input (nn.utils.rnn) runs the same loop on the shrinking batch of each time step
and returns a PackedSequence, with each sequence's states at its last valid step.
"""

import math
import numbers
import warnings

from ... import _creation
from .. import functional as F
from .. import init
from ..parameter import Parameter
from .module import Module

__all__ = ["RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell"]


def _pf():
    import plugflow
    return plugflow


def _is_packed(input):
    from ..utils.rnn import PackedSequence  # here: nn.utils imports after nn.modules
    return isinstance(input, PackedSequence)


# ---- one time step of each kind of cell: gi is the input projection x W_ih^T + b_ih -------------

def _rnn_tanh_step(gi, h, w_hh, b_hh):
    return (gi + F.linear(h, w_hh, b_hh)).tanh()


def _rnn_relu_step(gi, h, w_hh, b_hh):
    return (gi + F.linear(h, w_hh, b_hh)).relu()


def _gru_step(gi, h, w_hh, b_hh):
    gh = F.linear(h, w_hh, b_hh)
    i_r, i_z, i_n = gi.chunk(3, -1)
    h_r, h_z, h_n = gh.chunk(3, -1)
    r = (i_r + h_r).sigmoid()
    z = (i_z + h_z).sigmoid()
    n = (i_n + r * h_n).tanh()
    return (h - n) * z + n


def _lstm_step(gi, h, c, w_hh, b_hh, w_hr):
    gates = gi + F.linear(h, w_hh, b_hh)
    i, f, g, o = gates.chunk(4, -1)
    c = f.sigmoid() * c + i.sigmoid() * g.tanh()
    h = o.sigmoid() * c.tanh()
    if w_hr is not None:
        h = F.linear(h, w_hr)
    return h, c


def _run_direction(cell, gi_steps, states, reverse):
    """Runs cell(gi_t, *states) -> states over the time steps (backwards when reverse); returns each
    step's h and the final states. A packed batch shrinks over time (sequences sorted by decreasing
    length, gi_steps[t] has batch_sizes[t] rows): going forwards, the rows of the sequences that end
    are set aside as their final states; going backwards, a sequence joins with its initial state at
    its last step. A padded batch (equal sizes) never does either."""
    outs = [None] * len(gi_steps)
    finished = []  # going forwards: the final states of the sequences that ended, by decreasing row
    initial = states
    if reverse:
        states = tuple(s[:gi_steps[-1].size(0)] for s in initial) if gi_steps else states
    for t in (range(len(gi_steps) - 1, -1, -1) if reverse else range(len(gi_steps))):
        batch_size, current = gi_steps[t].size(0), states[0].size(0)
        if batch_size < current:
            finished.append(tuple(s[batch_size:] for s in states))
            states = tuple(s[:batch_size] for s in states)
        elif batch_size > current:
            states = tuple(_pf().cat([s, s0[current:batch_size]], 0) for s, s0 in zip(states, initial))
        states = cell(gi_steps[t], *states)
        outs[t] = states[0]
    if finished:
        states = tuple(_pf().cat([s] + [f[i] for f in reversed(finished)], 0) for i, s in enumerate(states))
    return outs, states


class RNNBase(Module):
    """Base class of RNN, LSTM and GRU: parameters weight_ih_l{k}[_reverse], weight_hh_l{k}[_reverse],
    bias_ih_l{k}[_reverse], bias_hh_l{k}[_reverse] (and weight_hr_l{k}[_reverse] for LSTM with
    proj_size > 0), all U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)) at first."""

    __constants__ = ["mode", "input_size", "hidden_size", "num_layers", "bias", "batch_first", "dropout",
                     "bidirectional", "proj_size"]

    def __init__(self, mode, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.,
                 bidirectional=False, proj_size=0, device=None, dtype=None):
        factory_kwargs = {"device": device, "dtype": dtype}
        super().__init__()
        self.mode = mode
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bias = bias
        self.batch_first = batch_first
        self.dropout = float(dropout)
        self.bidirectional = bidirectional
        self.proj_size = proj_size
        num_directions = 2 if bidirectional else 1

        if not isinstance(dropout, numbers.Number) or not 0 <= dropout <= 1 or isinstance(dropout, bool):
            raise ValueError("dropout should be a number in range [0, 1] representing the probability of an "
                             "element being zeroed")
        if dropout > 0 and num_layers == 1:
            warnings.warn("dropout option adds dropout after all but last recurrent layer, so non-zero dropout "
                          "expects num_layers greater than 1, but got dropout={} and num_layers={}".format(
                              dropout, num_layers))
        if proj_size < 0:
            raise ValueError("proj_size should be a positive integer or zero to disable projections")
        if proj_size >= hidden_size:
            raise ValueError("proj_size has to be smaller than hidden_size")

        if mode == "LSTM":
            gate_size = 4 * hidden_size
        elif mode == "GRU":
            gate_size = 3 * hidden_size
        elif mode in ("RNN_TANH", "RNN_RELU"):
            gate_size = hidden_size
        else:
            raise ValueError("Unrecognized RNN mode: " + mode)

        self._flat_weights_names = []
        self._all_weights = []
        for layer in range(num_layers):
            for direction in range(num_directions):
                real_hidden_size = proj_size if proj_size > 0 else hidden_size
                layer_input_size = input_size if layer == 0 else real_hidden_size * num_directions
                w_ih = Parameter(_creation.empty((gate_size, layer_input_size), **factory_kwargs))
                w_hh = Parameter(_creation.empty((gate_size, real_hidden_size), **factory_kwargs))
                layer_params = [w_ih, w_hh]
                param_names = ["weight_ih_l{}{}", "weight_hh_l{}{}"]
                if bias:
                    layer_params += [Parameter(_creation.empty(gate_size, **factory_kwargs)),
                                     Parameter(_creation.empty(gate_size, **factory_kwargs))]
                    param_names += ["bias_ih_l{}{}", "bias_hh_l{}{}"]
                if proj_size > 0:
                    layer_params.append(Parameter(_creation.empty((proj_size, hidden_size), **factory_kwargs)))
                    param_names.append("weight_hr_l{}{}")
                suffix = "_reverse" if direction == 1 else ""
                param_names = [x.format(layer, suffix) for x in param_names]
                for name, param in zip(param_names, layer_params):
                    setattr(self, name, param)
                self._flat_weights_names.extend(param_names)
                self._all_weights.append(param_names)
        self.reset_parameters()

    @property
    def _flat_weights(self):
        return [getattr(self, wn) if hasattr(self, wn) else None for wn in self._flat_weights_names]

    def flatten_parameters(self):
        """A no-op (cuDNN's flat weight buffer does not exist here)."""

    def reset_parameters(self):
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for weight in self.parameters():
            init.uniform_(weight, -stdv, stdv)

    def check_input(self, input, batch_sizes):
        expected_input_dim = 2 if batch_sizes is not None else 3
        if input.dim() != expected_input_dim:
            raise RuntimeError("input must have {} dimensions, got {}".format(expected_input_dim, input.dim()))
        if self.input_size != input.size(-1):
            raise RuntimeError("input.size(-1) must be equal to input_size. Expected {}, got {}".format(
                self.input_size, input.size(-1)))

    def get_expected_hidden_size(self, input, batch_sizes):
        mini_batch = input.size(0) if self.batch_first else input.size(1)
        num_directions = 2 if self.bidirectional else 1
        real_hidden_size = self.proj_size if self.proj_size > 0 else self.hidden_size
        return (self.num_layers * num_directions, mini_batch, real_hidden_size)

    def check_hidden_size(self, hx, expected_hidden_size, msg="Expected hidden size {}, got {}"):
        if tuple(hx.size()) != tuple(expected_hidden_size):
            raise RuntimeError(msg.format(expected_hidden_size, list(hx.size())))

    def check_forward_args(self, input, hidden, batch_sizes):
        self.check_input(input, batch_sizes)
        self.check_hidden_size(hidden, self.get_expected_hidden_size(input, batch_sizes))

    def permute_hidden(self, hx, permutation):
        if permutation is None:
            return hx
        return hx.index_select(1, permutation)

    @property
    def all_weights(self):
        return [[getattr(self, weight) for weight in weights] for weights in self._all_weights]

    def extra_repr(self):
        s = "{input_size}, {hidden_size}"
        if self.proj_size != 0:
            s += ", proj_size={proj_size}"
        if self.num_layers != 1:
            s += ", num_layers={num_layers}"
        if self.bias is not True:
            s += ", bias={bias}"
        if self.batch_first is not False:
            s += ", batch_first={batch_first}"
        if self.dropout != 0:
            s += ", dropout={dropout}"
        if self.bidirectional is not False:
            s += ", bidirectional={bidirectional}"
        return s.format(**self.__dict__)

    # ---- the computation ----------------------------------------------------------------------------

    def _layer_weights(self, layer, direction):
        suffix = "_reverse" if direction == 1 else ""
        get = lambda fmt: getattr(self, fmt.format(layer, suffix), None)  # noqa: E731
        w_ih, w_hh = get("weight_ih_l{}{}"), get("weight_hh_l{}{}")
        b_ih, b_hh = (get("bias_ih_l{}{}"), get("bias_hh_l{}{}")) if self.bias else (None, None)
        w_hr = get("weight_hr_l{}{}") if self.proj_size > 0 else None
        return w_ih, w_hh, b_ih, b_hh, w_hr

    def _run(self, input, h0, c0=None, batch_sizes=None):
        """input (T, B, I) time-major, or a PackedSequence's data (N, I) with its batch_sizes (a list);
        h0 (L*D, B, H_out) (c0 (L*D, B, H) for LSTM). Returns the output ((T, B, D*H_out), or packed
        data (N, D*H_out)) and the final states stacked like h0 (and c0)."""
        pf = _pf()
        num_directions = 2 if self.bidirectional else 1
        step = {"RNN_TANH": _rnn_tanh_step, "RNN_RELU": _rnn_relu_step, "GRU": _gru_step}.get(self.mode)
        h_n, c_n = [], []
        layer_input = input
        for layer in range(self.num_layers):
            dir_outputs = []
            for direction in range(num_directions):
                w_ih, w_hh, b_ih, b_hh, w_hr = self._layer_weights(layer, direction)
                idx = layer * num_directions + direction
                gi_all = F.linear(layer_input, w_ih, b_ih)  # one matmul for all time steps
                gi_steps = gi_all.unbind(0) if batch_sizes is None else gi_all.split(batch_sizes, 0)
                states = (h0[idx],) if c0 is None else (h0[idx], c0[idx])
                cell = (lambda gi, h, c: _lstm_step(gi, h, c, w_hh, b_hh, w_hr)) if c0 is not None else \
                    (lambda gi, h: (step(gi, h, w_hh, b_hh),))
                outs, final = _run_direction(cell, gi_steps, states, reverse=direction == 1)
                h_n.append(final[0])
                if c0 is not None:
                    c_n.append(final[1])
                if not outs:
                    dir_outputs.append(_creation.zeros((0,) + tuple(final[0].shape), dtype=final[0].dtype,
                                                       device=final[0].device))
                else:
                    dir_outputs.append(pf.stack(outs, 0) if batch_sizes is None else pf.cat(outs, 0))
            output = dir_outputs[0] if num_directions == 1 else pf.cat(dir_outputs, -1)
            if self.dropout != 0 and self.training and layer < self.num_layers - 1:
                output = F.dropout(output, self.dropout, True)
            layer_input = output
        h_n = pf.stack(h_n, 0)
        if c0 is not None:
            return layer_input, h_n, pf.stack(c_n, 0)
        return layer_input, h_n

    def _packed_forward(self, input, hx):
        """forward on a PackedSequence: the states (h0, c0 for LSTM; in the caller's batch order, zeros
        when None) are permuted to the packed (sorted) order and the final ones back."""
        from ..utils.rnn import PackedSequence
        data, batch_sizes, sorted_indices, unsorted_indices = input
        max_batch_size = int(batch_sizes[0])
        num_directions = 2 if self.bidirectional else 1
        real_hidden_size = self.proj_size if self.proj_size > 0 else self.hidden_size
        is_lstm = self.mode == "LSTM"
        if hx is None:
            zeros = lambda size: _creation.zeros((self.num_layers * num_directions, max_batch_size, size),  # noqa: E731
                                                 dtype=data.dtype, device=data.device)
            hx = (zeros(real_hidden_size), zeros(self.hidden_size)) if is_lstm else zeros(real_hidden_size)
        else:
            hx = self.permute_hidden(hx, sorted_indices)
        self.check_input(data, batch_sizes)
        expected = (self.num_layers * num_directions, max_batch_size, real_hidden_size)
        if is_lstm:
            self.check_hidden_size(hx[0], expected, "Expected hidden[0] size {}, got {}")
            self.check_hidden_size(hx[1], expected[:2] + (self.hidden_size,), "Expected hidden[1] size {}, got {}")
            output, h_n, c_n = self._run(data, hx[0], hx[1], batch_sizes=batch_sizes.tolist())
            hidden = (h_n, c_n)
        else:
            self.check_hidden_size(hx, expected)
            output, hidden = self._run(data, hx, batch_sizes=batch_sizes.tolist())
        output = PackedSequence(output, batch_sizes, sorted_indices, unsorted_indices)
        return output, self.permute_hidden(hidden, unsorted_indices)

    def _forward_single_state(self, input, hx):
        """RNN and GRU's forward (one state tensor)."""
        if _is_packed(input):
            return self._packed_forward(input, hx)
        is_batched = input.dim() == 3
        batch_dim = 0 if self.batch_first else 1
        if not is_batched:
            input = input.unsqueeze(batch_dim)
            if hx is not None:
                if hx.dim() != 2:
                    raise RuntimeError(
                        f"For unbatched 2-D input, hx should also be 2-D but got {hx.dim()}-D tensor")
                hx = hx.unsqueeze(1)
        else:
            if hx is not None and hx.dim() != 3:
                raise RuntimeError(f"For batched 3-D input, hx should also be 3-D but got {hx.dim()}-D tensor")
        max_batch_size = input.size(0) if self.batch_first else input.size(1)
        if hx is None:
            num_directions = 2 if self.bidirectional else 1
            hx = _creation.zeros((self.num_layers * num_directions, max_batch_size, self.hidden_size),
                                 dtype=input.dtype, device=input.device)
        self.check_forward_args(input, hx, None)
        x = input.transpose(0, 1) if self.batch_first else input
        output, hidden = self._run(x, hx)
        if self.batch_first:
            output = output.transpose(0, 1)
        if not is_batched:
            output = output.squeeze(batch_dim)
            hidden = hidden.squeeze(1)
        return output, hidden


class RNN(RNNBase):
    r"""Elman RNN: h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh) (or relu with
    nonlinearity='relu'), stacked num_layers deep, optionally bidirectional."""

    def __init__(self, *args, **kwargs):
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        self.nonlinearity = kwargs.pop("nonlinearity", "tanh")
        if self.nonlinearity == "tanh":
            mode = "RNN_TANH"
        elif self.nonlinearity == "relu":
            mode = "RNN_RELU"
        else:
            raise ValueError("Unknown nonlinearity '{}'".format(self.nonlinearity))
        super().__init__(mode, *args, **kwargs)

    def forward(self, input, hx=None):
        return self._forward_single_state(input, hx)


class LSTM(RNNBase):
    r"""Long short-term memory (gates i, f, g, o in that order in the weights), with an optional
    projection h_t = W_hr (o_t * tanh(c_t)) when proj_size > 0. Returns (output, (h_n, c_n))."""

    def __init__(self, *args, **kwargs):
        super().__init__("LSTM", *args, **kwargs)

    def get_expected_cell_size(self, input, batch_sizes):
        mini_batch = input.size(0) if self.batch_first else input.size(1)
        num_directions = 2 if self.bidirectional else 1
        return (self.num_layers * num_directions, mini_batch, self.hidden_size)

    def check_forward_args(self, input, hidden, batch_sizes):
        self.check_input(input, batch_sizes)
        self.check_hidden_size(hidden[0], self.get_expected_hidden_size(input, batch_sizes),
                               "Expected hidden[0] size {}, got {}")
        self.check_hidden_size(hidden[1], self.get_expected_cell_size(input, batch_sizes),
                               "Expected hidden[1] size {}, got {}")

    def permute_hidden(self, hx, permutation):
        if permutation is None:
            return hx
        return hx[0].index_select(1, permutation), hx[1].index_select(1, permutation)

    def forward(self, input, hx=None):
        if _is_packed(input):
            return self._packed_forward(input, hx)
        is_batched = input.dim() == 3
        batch_dim = 0 if self.batch_first else 1
        if not is_batched:
            input = input.unsqueeze(batch_dim)
        max_batch_size = input.size(0) if self.batch_first else input.size(1)
        if hx is None:
            num_directions = 2 if self.bidirectional else 1
            real_hidden_size = self.proj_size if self.proj_size > 0 else self.hidden_size
            h_zeros = _creation.zeros((self.num_layers * num_directions, max_batch_size, real_hidden_size),
                                      dtype=input.dtype, device=input.device)
            c_zeros = _creation.zeros((self.num_layers * num_directions, max_batch_size, self.hidden_size),
                                      dtype=input.dtype, device=input.device)
            hx = (h_zeros, c_zeros)
        else:
            if is_batched:
                if hx[0].dim() != 3 or hx[1].dim() != 3:
                    raise RuntimeError("For batched 3-D input, hx and cx should also be 3-D but got "
                                       f"({hx[0].dim()}-D, {hx[1].dim()}-D) tensors")
            else:
                if hx[0].dim() != 2 or hx[1].dim() != 2:
                    raise RuntimeError("For unbatched 2-D input, hx and cx should also be 2-D but got "
                                       f"({hx[0].dim()}-D, {hx[1].dim()}-D) tensors")
                hx = (hx[0].unsqueeze(1), hx[1].unsqueeze(1))
        self.check_forward_args(input, hx, None)
        x = input.transpose(0, 1) if self.batch_first else input
        output, h_n, c_n = self._run(x, hx[0], hx[1])
        if self.batch_first:
            output = output.transpose(0, 1)
        if not is_batched:
            output = output.squeeze(batch_dim)
            h_n, c_n = h_n.squeeze(1), c_n.squeeze(1)
        return output, (h_n, c_n)


class GRU(RNNBase):
    r"""Gated recurrent unit (gates r, z, n in that order in the weights):
    r = sigmoid(W_ir x + b_ir + W_hr h + b_hr), z = sigmoid(W_iz x + b_iz + W_hz h + b_hz),
    n = tanh(W_in x + b_in + r * (W_hn h + b_hn)), h' = (1 - z) * n + z * h."""

    def __init__(self, *args, **kwargs):
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        super().__init__("GRU", *args, **kwargs)

    def forward(self, input, hx=None):
        return self._forward_single_state(input, hx)


# ---- cells ----------------------------------------------------------------------------------------

class RNNCellBase(Module):
    """Base class of the cells: weight_ih (num_chunks * hidden_size, input_size), weight_hh
    (num_chunks * hidden_size, hidden_size), bias_ih and bias_hh (num_chunks * hidden_size), all
    U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)) at first."""

    __constants__ = ["input_size", "hidden_size", "bias"]

    def __init__(self, input_size, hidden_size, bias, num_chunks, device=None, dtype=None):
        factory_kwargs = {"device": device, "dtype": dtype}
        super().__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.bias = bias
        self.weight_ih = Parameter(_creation.empty((num_chunks * hidden_size, input_size), **factory_kwargs))
        self.weight_hh = Parameter(_creation.empty((num_chunks * hidden_size, hidden_size), **factory_kwargs))
        if bias:
            self.bias_ih = Parameter(_creation.empty(num_chunks * hidden_size, **factory_kwargs))
            self.bias_hh = Parameter(_creation.empty(num_chunks * hidden_size, **factory_kwargs))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def extra_repr(self):
        s = "{input_size}, {hidden_size}"
        if "bias" in self.__dict__ and self.bias is not True:
            s += ", bias={bias}"
        if "nonlinearity" in self.__dict__ and self.nonlinearity != "tanh":
            s += ", nonlinearity={nonlinearity}"
        return s.format(**self.__dict__)

    def reset_parameters(self):
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for weight in self.parameters():
            init.uniform_(weight, -stdv, stdv)

    def _prepare(self, name, input, hx, n_states):
        """Checks like PyTorch 1.13 (the dim assertion, then ATen's size checks); returns the batched
        input and states (a tuple of n_states tensors) and whether the input was batched."""
        if input.dim() not in (1, 2):
            raise AssertionError(f"{name}: Expected input to be 1-D or 2-D but received {input.dim()}-D tensor")
        is_batched = input.dim() == 2
        if not is_batched:
            input = input.unsqueeze(0)
        if hx is None:
            zeros = _creation.zeros((input.size(0), self.hidden_size), dtype=input.dtype, device=input.device)
            states = (zeros,) * n_states
        else:
            states = tuple(hx) if n_states == 2 else (hx,)
            if not is_batched:
                states = tuple(s.unsqueeze(0) for s in states)
        if input.size(1) != self.input_size:
            raise RuntimeError("input has inconsistent input_size: got {} expected {}".format(
                input.size(1), self.input_size))
        for s in states:
            label = "0"  # ATen 1.13 names both of LSTMCell's states hidden0
            if s.dim() < 2 or input.size(0) != s.size(0):
                raise RuntimeError("Input batch size {} doesn't match hidden{} batch size {}".format(
                    input.size(0), label, s.size(0) if s.dim() > 0 else 0))
            if s.size(1) != self.hidden_size:
                raise RuntimeError("hidden{} has inconsistent hidden_size: got {}, expected {}".format(
                    label, s.size(1), self.hidden_size))
        return input, states, is_batched


class RNNCell(RNNCellBase):
    r"""h' = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh) (or relu with nonlinearity='relu')."""

    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh", device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, num_chunks=1, device=device, dtype=dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input, hx=None):
        input, (h,), is_batched = self._prepare("RNNCell", input, hx, 1)
        gi = F.linear(input, self.weight_ih, self.bias_ih)
        if self.nonlinearity == "tanh":
            ret = _rnn_tanh_step(gi, h, self.weight_hh, self.bias_hh)
        elif self.nonlinearity == "relu":
            ret = _rnn_relu_step(gi, h, self.weight_hh, self.bias_hh)
        else:
            raise RuntimeError("Unknown nonlinearity: {}".format(self.nonlinearity))
        if not is_batched:
            ret = ret.squeeze(0)
        return ret


class LSTMCell(RNNCellBase):
    r"""One LSTM step (gates i, f, g, o); returns (h', c')."""

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, num_chunks=4, device=device, dtype=dtype)

    def forward(self, input, hx=None):
        input, (h, c), is_batched = self._prepare("LSTMCell", input, hx, 2)
        gi = F.linear(input, self.weight_ih, self.bias_ih)
        h, c = _lstm_step(gi, h, c, self.weight_hh, self.bias_hh, None)
        if not is_batched:
            return h.squeeze(0), c.squeeze(0)
        return h, c


class GRUCell(RNNCellBase):
    r"""One GRU step (gates r, z, n)."""

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, num_chunks=3, device=device, dtype=dtype)

    def forward(self, input, hx=None):
        input, (h,), is_batched = self._prepare("GRUCell", input, hx, 1)
        gi = F.linear(input, self.weight_ih, self.bias_ih)
        ret = _gru_step(gi, h, self.weight_hh, self.bias_hh)
        if not is_batched:
            ret = ret.squeeze(0)
        return ret
