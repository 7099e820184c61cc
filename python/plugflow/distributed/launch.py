"""python -m plugflow.distributed.launch: torch.distributed.launch (PyTorch 1.13) for plugflow.

The same launcher as plugflow.distributed.run, with launch's legacy default: each worker's
arguments start with ``--local_rank=N`` unless ``--use-env`` (``--use_env``) is given; LOCAL_RANK
is set either way. New scripts should use ``python -m plugflow.distributed.run``.
"""

import sys

from .run import _parser, parse_args, run

__all__ = ["main"]


def main(args=None):
    parser = _parser("plugflow.distributed.launch")
    parser.add_argument("--use-env", "--use_env", dest="use_env", action="store_true",
                        help="pass the local rank only as LOCAL_RANK, not as --local_rank")
    ns = parse_args(args, parser)
    if ns.no_python and not ns.use_env:
        parser.error("When using the '--no_python' flag, you must also set the '--use_env' flag.")
    sys.exit(run(ns))


if __name__ == "__main__":
    main()
