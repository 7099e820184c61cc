"""plugflow.hub (torch.hub): pretrained weights from the hub cache, and hub models from a local
directory.

plugflow never downloads: the machines it runs on need not have network access, and a
training runtime that fetches files as a side effect of building a model is hard to reproduce.
load_state_dict_from_url() loads the file when it is already in the cache
(`<get_dir()>/checkpoints/<file name from the URL>`, the path PyTorch downloads to, so a cache
filled by PyTorch or by hand works) and otherwise raises RuntimeError naming the URL and the path
to put the file at. torch.hub.load() runs a local hubconf.py (source="local"); a GitHub
repository needs a download and raises the same way.
"""

import importlib.util
import os
import sys
from urllib.parse import urlparse

__all__ = ["download_url_to_file", "get_dir", "help", "list", "load", "load_state_dict_from_url", "set_dir"]

_hub_dir = None  # set_dir()'s override


def _get_torch_home():
    """$TORCH_HOME, else $XDG_CACHE_HOME/torch, else ~/.cache/torch (PyTorch's cache root)."""
    return os.path.expanduser(os.getenv("TORCH_HOME", os.path.join(os.getenv("XDG_CACHE_HOME", "~/.cache"), "torch")))


def get_dir():
    """The hub cache directory: set_dir()'s path, else $TORCH_HOME/hub."""
    if _hub_dir is not None:
        return _hub_dir
    return os.path.join(_get_torch_home(), "hub")


def set_dir(d):
    """Makes d the hub cache directory."""
    global _hub_dir
    _hub_dir = os.path.expanduser(d)


def _no_download(url, path):
    return RuntimeError(f"plugflow does not download files: {url!r} is not in the hub cache. Fetch it on a machine "
                        f"with network access and put it at {path!r} (the path PyTorch downloads it to).")


def download_url_to_file(url, dst, hash_prefix=None, progress=True):
    """Always raises: plugflow does not download (see the module docstring)."""
    raise _no_download(url, dst)


def load_state_dict_from_url(url, model_dir=None, map_location=None, progress=True, check_hash=False, file_name=None):
    """Loads the checkpoint for url from the hub cache (`<get_dir()>/checkpoints/<file name>`, or
    model_dir/file_name) with plugflow.load; raises RuntimeError naming the path when it is not
    there. check_hash and progress concern downloading, which plugflow does not do."""
    if model_dir is None:
        model_dir = os.path.join(get_dir(), "checkpoints")
    cached_file = os.path.join(model_dir, file_name or os.path.basename(urlparse(url).path))
    if not os.path.exists(cached_file):
        raise _no_download(url, cached_file)
    from .serialization import load as load_checkpoint

    return load_checkpoint(cached_file, map_location=map_location)


def _local_hubconf(repo_or_dir, source):
    if source == "github":
        raise RuntimeError(f"plugflow does not download: torch.hub cannot fetch the GitHub repository {repo_or_dir!r}. "
                           "Clone it on a machine with network access and call torch.hub.load(path, model, "
                           "source='local').")
    if source != "local":
        raise ValueError(f'Unknown source: "{source}". Allowed values: "github" | "local".')
    path = os.path.join(repo_or_dir, "hubconf.py")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no hubconf.py in {repo_or_dir!r}")
    spec = importlib.util.spec_from_file_location("hubconf", path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, repo_or_dir)  # hubconf imports its repository's modules, as in PyTorch
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(repo_or_dir)
    return module


def _entrypoint(hubconf, model):
    fn = getattr(hubconf, model, None)
    if not callable(fn) or model.startswith("_"):
        raise RuntimeError(f"Cannot find callable {model} in hubconf")
    return fn


def list(github, force_reload=False, skip_validation=False, trust_repo=None):  # noqa: A001
    """The entrypoints of a repository: only a local one (see load)."""
    hubconf = _local_hubconf(github, "local" if os.path.isdir(github) else "github")
    return [name for name in dir(hubconf) if callable(getattr(hubconf, name)) and not name.startswith("_")]


def help(github, model, force_reload=False, skip_validation=False, trust_repo=None):  # noqa: A001
    """The docstring of an entrypoint of a local repository."""
    hubconf = _local_hubconf(github, "local" if os.path.isdir(github) else "github")
    return _entrypoint(hubconf, model).__doc__


def load(repo_or_dir, model, *args, source="github", trust_repo=None, force_reload=False, verbose=True,
         skip_validation=False, **kwargs):
    """Calls the entrypoint `model` of the hubconf.py in the local directory repo_or_dir
    (source="local") with *args and **kwargs. source="github" needs a download and raises."""
    return _entrypoint(_local_hubconf(repo_or_dir, source), model)(*args, **kwargs)


def __getattr__(name):
    # tqdm: torch.hub's progress bar, which torchvision's download helpers import from here. It is
    # only used around downloads, so plugflow borrows the tqdm package lazily rather than needing it.
    if name == "tqdm":
        from tqdm.auto import tqdm

        return tqdm
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
