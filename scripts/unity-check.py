#!/usr/bin/env python3
"""Syntax-check every batch of a unity build without building it.

A unity build (cmake/LongserveUnity.cmake) compiles a target's files together, so file-local
names that clash between two files of one target ("redefinition of ...", GCC's
-Wsubobject-linkage) only fail there. This runs each Unity/unity_N_cxx.cxx batch of a configured
tree through its own compile command with -fsyntax-only, two at a time.

  cmake -S . -B /tmp/unity -G Ninja -DCMAKE_BUILD_TYPE=Release -DLONGSERVE_UNITY=ON \
    -DCMAKE_EXPORT_COMPILE_COMMANDS=ON
  python3 scripts/unity-check.py /tmp/unity [path-filter]

Configure with nvcc on PATH so the CUDA backend's, tests' and benchmarks' C++ is checked too (CI's
machine has nvcc). A file that must compile alone goes into cmake/LongserveUnity.cmake's list.
"""
import json
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor


def check(entry):
    cmd = shlex.split(entry["command"])
    if cmd and cmd[0].endswith("ccache"):
        cmd = cmd[1:]
    out = []
    skip = False
    for arg in cmd:
        if skip:
            skip = False
            continue
        if arg in ("-o", "-MF", "-MT"):
            skip = True
            continue
        if arg in ("-c", "-MD") or arg == entry["file"]:
            continue
        out.append(arg)
    out += ["-fsyntax-only", entry["file"]]
    r = subprocess.run(out, cwd=entry["directory"], capture_output=True, text=True)
    return entry["file"], r.returncode, r.stderr


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    build = sys.argv[1]
    flt = sys.argv[2] if len(sys.argv) > 2 else ""
    with open(f"{build}/compile_commands.json") as f:
        entries = [e for e in json.load(f) if "/Unity/" in e["file"] and flt in e["file"]]
    failed = 0
    with ThreadPoolExecutor(2) as pool:
        for path, rc, err in pool.map(check, entries):
            if rc:
                failed += 1
                print(f"FAIL {path}\n{err[:4000]}")
    print(f"{len(entries)} batches, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
