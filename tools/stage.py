#!/usr/bin/env python3
"""Stages an importable plugflow package from a build directory without installing it.

    python3 tools/stage.py BUILD_DIR OUT_DIR      # then: PYTHONPATH=OUT_DIR python -c 'import plugflow'

OUT_DIR/plugflow holds symlinks to the source tree's Python files (edits show up at once;
rerun after a rebuild or after adding a top-level module), a copy of the build's _C extension, and lib/ with the build's
core library and plugins, the same layout `meson install` produces. Used for parallel work in
separate build directories (build-<name>) so nobody overwrites the shared .venv.
"""
import glob
import os
import shutil
import sys

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
build, out = (os.path.abspath(p) for p in sys.argv[1:3])
pkg = os.path.join(out, "plugflow")
shutil.rmtree(pkg, ignore_errors=True)
os.makedirs(os.path.join(pkg, "lib", "plugins"))
src = os.path.join(root, "python", "plugflow")
for name in os.listdir(src):
    if name != "__pycache__":
        os.symlink(os.path.join(src, name), os.path.join(pkg, name))
(ext,) = glob.glob(os.path.join(build, "python", "_C.*.so"))
# Copied, not linked; its build rpath ($ORIGIN/../core) then finds OUT_DIR/core.
shutil.copy(ext, pkg)
if os.path.lexists(os.path.join(out, "core")):
    os.remove(os.path.join(out, "core"))
os.symlink(os.path.join(build, "core"), os.path.join(out, "core"))
os.symlink(os.path.join(build, "core", "libplugflow_core.so"), os.path.join(pkg, "lib", "libplugflow_core.so"))
for so in glob.glob(os.path.join(build, "plugins", "*", "libplugflow_*.so")):
    os.symlink(so, os.path.join(pkg, "lib", "plugins", os.path.basename(so)))
print(pkg)
