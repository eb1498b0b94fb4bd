"""Copies the scalws package into the Debian package's private tree:
the Python sources of the checkout (scalws/**/*.py) and what setup.py built
into BUILD_LIB: the extension modules and scalws/_buildinfo.py (the build's
own, not the checkout's). Nothing else: no .pyx/.pxd/.c, no caches.

    python packaging/install_tree.py BUILD_LIB DEST
"""
import os
import shutil
import sys


def main(build_lib: str, dest: str) -> int:
    copied = 0
    for base, pattern in (("scalws", ".py"), (os.path.join(build_lib, "scalws"), (".so", ".py"))):
        if not os.path.isdir(base):
            print(f"install_tree: {base} does not exist", file=sys.stderr)
            return 1
        for folder, dirs, files in os.walk(base):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            rel = os.path.relpath(folder, os.path.dirname(base))
            for name in sorted(files):
                if not name.endswith(pattern) or name == "_buildinfo.py" and base == "scalws":
                    continue
                os.makedirs(os.path.join(dest, rel), exist_ok=True)
                target = os.path.join(dest, rel, name)
                shutil.copyfile(os.path.join(folder, name), target)
                os.chmod(target, 0o644)
                copied += 1
    if not any(n.endswith(".so") for _, _, fs in os.walk(os.path.join(dest, "scalws")) for n in fs):
        print(f"install_tree: no extension modules under {build_lib}", file=sys.stderr)
        return 1
    if not os.path.isfile(os.path.join(dest, "scalws", "_buildinfo.py")):
        print(f"install_tree: no scalws/_buildinfo.py under {build_lib}", file=sys.stderr)
        return 1
    print(f"install_tree: {copied} files into {dest}/scalws")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
