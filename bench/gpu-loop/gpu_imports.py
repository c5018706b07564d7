"""The third-party modules SGLang can import on a GPU, found without one.

The pack's trace (pack-sglang.sh) imports the server path on the CPU box, where SGLang's
`if is_cuda():` branches do not run; on the GPU they import more (session 17: the speculative
workers' CUDA graph capture imports the DSA backend, which imports `cutlass` and `deep_gemm`).
This walks the source instead: every import of the START modules (function bodies included:
the capture imports lazily) and, following `sglang.*`, every module-level import of what they
reach, in any branch but `TYPE_CHECKING`. Prints `module distribution first-importer` per
third-party top-level module ("-" where no distribution owns it, as nvidia-cutlass-dsl's `.pth`
path). An over-approximation: guarded imports (`try`, `if is_hip()`) are listed too.

Usage: VENV/bin/python gpu_imports.py SITE_PACKAGES START_MODULE...
"""

import ast
import importlib.metadata
import os
import sys


def source_of(site, mod):
    base = os.path.join(site, *mod.split("."))
    for path in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(path):
            return path
    return None


def absolute(site, mod, name, level):
    if level == 0:
        return name
    parts = mod.split(".")
    path = source_of(site, mod)
    keep = len(parts) - level + (1 if path and path.endswith("__init__.py") else 0)
    return ".".join(parts[:keep] + ([name] if name else []))


def walk(site, starts):
    seen, third = set(), {}

    def reach(name, importer):
        if name.split(".")[0] != "sglang":
            third.setdefault(name.split(".")[0], importer)
            return
        parts = name.split(".")
        for i in range(1, len(parts) + 1):  # each package's __init__ runs too
            visit(".".join(parts[:i]), False)

    def visit(mod, functions_too):
        if mod in seen:
            return
        seen.add(mod)
        path = source_of(site, mod)
        if path is None:
            return
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())

        def body(nodes):
            for n in nodes:
                if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test):
                    body(n.orelse)
                elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    if functions_too:
                        body(n.body)
                elif isinstance(n, ast.Import):
                    for a in n.names:
                        reach(a.name, mod)
                elif isinstance(n, ast.ImportFrom):
                    target = absolute(site, mod, n.module, n.level)
                    reach(target, mod)
                    for a in n.names:  # `from pkg import submodule`
                        if target.startswith("sglang") and source_of(site, f"{target}.{a.name}"):
                            reach(f"{target}.{a.name}", mod)
                else:
                    for field in ("body", "orelse", "handlers", "finalbody"):
                        sub = getattr(n, field, None)
                        if isinstance(sub, list):
                            body(sub)

        body(tree.body)

    for s in starts:
        visit(s, True)
    return third


def main():
    site, starts = sys.argv[1], sys.argv[2:]
    owners = importlib.metadata.packages_distributions()
    for top, importer in sorted(walk(site, starts).items()):
        print(top, ",".join(owners.get(top, [])) or "-", importer)


if __name__ == "__main__":
    main()
