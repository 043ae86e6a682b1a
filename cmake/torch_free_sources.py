"""Prints which of the given sources reach no torch header.

Usage: torch_free_sources.py ROOT[;ROOT...] SOURCE[;SOURCE...]
Follows #include "..." and <...> through the project's own files (the
source's directory, then each ROOT) and calls a source torch-free when no
file it reaches includes torch/, ATen/, c10/ or pybind11/. CMake skips the
precompiled torch header for those: loading it costs about 15 s a file.
A stale answer costs only time: every source keeps torch's include paths.
"""
import os
import re
import sys

TORCH = ("torch/", "ATen/", "c10/", "pybind11/")
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]')


def main():
    roots = [r for r in sys.argv[1].split(";") if r]
    sources = [s for s in sys.argv[2].split(";") if s]
    known = {}

    def resolve(name, including):
        for base in [os.path.dirname(including)] + roots:
            path = os.path.join(base, name)
            if os.path.isfile(path):
                return os.path.normpath(path)
        return None  # a system or third-party header that is not torch's

    def reaches_torch(path, visiting):
        if path in known:
            return known[path]
        if path in visiting:
            return False  # a cycle: whatever it reaches is judged on the way in
        visiting.add(path)
        found = False
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                match = INCLUDE.match(line)
                if not match:
                    continue
                name = match.group(1)
                if name.startswith(TORCH):
                    found = True
                    break
                header = resolve(name, path)
                if header and reaches_torch(header, visiting):
                    found = True
                    break
        known[path] = found
        return found

    for source in sources:
        if source.endswith((".cpp", ".cc", ".cxx")) and os.path.isfile(source):
            if not reaches_torch(os.path.normpath(source), set()):
                print(source)


if __name__ == "__main__":
    main()
