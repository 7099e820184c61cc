"""`python -m plugflow`: the same report as `python -m plugflow.info`."""

from .info import main

if __name__ == "__main__":
    raise SystemExit(main())
