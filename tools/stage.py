#!/usr/bin/env python3
"""Stages an importable plugflow package from a build directory without installing it.

    python3 tools/stage.py BUILD_DIR OUT_DIR      # then: PYTHONPATH=OUT_DIR python -c 'import plugflow'

OUT_DIR/plugflow holds symlinks to the source tree's Python files (edits show up at once;
rerun after adding a top-level module) and a snapshot (copies) of the build's _C extension,
core library and plugins in the layout `meson install` produces, so rebuilding BUILD_DIR never
changes a staged package under a running test, and a plugflow.pc for plugins built against it
(OUT_DIR/plugflow/lib/pkgconfig). Used for parallel work in separate build
directories (build-<name>) so nobody overwrites the shared .venv.
"""
import glob
import os
import shutil
import sys

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
build, out = (os.path.abspath(p) for p in sys.argv[1:3])
pkg = os.path.join(out, "plugflow")
tmp = pkg + ".new"
shutil.rmtree(tmp, ignore_errors=True)
os.makedirs(os.path.join(tmp, "lib", "plugins"))
src = os.path.join(root, "python", "plugflow")
for name in os.listdir(src):
    if name != "__pycache__":
        os.symlink(os.path.join(src, name), os.path.join(tmp, name))
(ext,) = glob.glob(os.path.join(build, "python", "_C.*.so"))
shutil.copy(ext, tmp)
shutil.copy(os.path.join(build, "core", "libplugflow_core.so"), os.path.join(tmp, "lib"))
for so in glob.glob(os.path.join(build, "plugins", "*", "libplugflow_*.so")):
    shutil.copy(so, os.path.join(tmp, "lib", "plugins"))
# The plugin SDK of this snapshot (headers from the source tree, the staged core library), so
# that plugins a test builds with pkg-config match the staged core, not an installed one.
with open(os.path.join(root, "core", "include", "plugflow", "plugin.h")) as f:
    abi_major = next(line.split()[2] for line in f if line.startswith("#define PLUGFLOW_ABI_MAJOR "))
os.makedirs(os.path.join(tmp, "lib", "pkgconfig"))
with open(os.path.join(tmp, "lib", "pkgconfig", "plugflow.pc"), "w") as f:
    f.write(f"""includedir={os.path.join(root, "core", "include")}
corelibdir={os.path.join(pkg, "lib")}
plugindir={os.path.join(pkg, "lib", "plugins")}
abi_major={abi_major}

Name: plugflow
Description: plugflow plugin SDK (staged from {build})
Version: 0.1.0
Libs: -L${{corelibdir}} -Wl,-rpath,${{corelibdir}} -lplugflow_core
Cflags: -I${{includedir}} -std=c++20
""")
# Swap in the new snapshot in one step.
shutil.rmtree(pkg, ignore_errors=True)
os.rename(tmp, pkg)
# The build's _C has the build rpath $ORIGIN/../core: point OUT_DIR/core at the staged lib/, so
# the core loads from there and finds the staged plugins next to it.
core_link = os.path.join(out, "core")
if os.path.lexists(core_link):
    os.remove(core_link) if os.path.islink(core_link) else shutil.rmtree(core_link)
os.symlink(os.path.join("plugflow", "lib"), core_link)
print(pkg)
