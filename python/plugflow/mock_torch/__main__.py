"""python -m plugflow.mock_torch SCRIPT [ARGS...]: runs a script written for PyTorch on plugflow.

The script runs as `python SCRIPT ARGS...` would run it (as __main__, with sys.argv and the
script's folder first on sys.path), after plugflow.mock_torch.enable(). DataLoader workers and
other forked processes inherit the redirection; processes started with the "spawn" method start
fresh and run real PyTorch unless the script enables mock_torch itself.
"""

import os
import runpy
import sys

from plugflow import mock_torch


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    script = argv[0]
    if not os.path.isfile(script):
        print(f"python -m plugflow.mock_torch: can't open file {script!r}", file=sys.stderr)
        return 2
    sys.argv = list(argv)
    sys.path[0] = os.path.dirname(os.path.abspath(script))  # what `python SCRIPT` puts there
    mock_torch.enable()
    runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
