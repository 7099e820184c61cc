"""plugflow._six (torch._six): the Python 2/3 names older PyTorch code still imports."""

import math

string_classes = (str, bytes)
int_classes = int
inf = math.inf
nan = math.nan
