#!/usr/bin/env python3
"""Lists import circles between the modules of each crate in the workspace.

A module is a file (`foo.rs`, `foo/mod.rs`); module A imports module B when code in A (not a
comment, not a `#[cfg(test)]` module) names a path `crate::b...`, `super::...` or `self::...`
that resolves to B or something inside B. Re-exports (`pub use`, `pub(crate) use`) are a
module's table of contents, not a use of what they name, so they are not counted; a child's
reference to its parent through `super::` counts like any other. Prints every strongly
connected group of more than one module and exits 1 if there is one.

Usage: scripts/import_cycles.py [crate_dir ...]   (default: every crate of the workspace)
"""

import os
import re
import sys

CRATES = ["core", "runtime", "legacy", "mailbox", "bridge", ".", "cli", "timely"]


def module_files(src):
    """Maps module paths (tuples) to files, starting from lib.rs."""
    mods = {}
    for root, _dirs, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            full = os.path.join(root, f)
            rel = os.path.relpath(full, src)[:-3].split(os.sep)
            if rel == ["lib"] or rel == ["main"]:
                path = ()
            elif rel[-1] == "mod":
                path = tuple(rel[:-1])
            else:
                path = tuple(rel)
            mods[path] = full
    return mods


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(line.split("//")[0] for line in text.splitlines())


def strip_cfg_test(text):
    # A `#[cfg(test)] mod tests { ... }` block imports its parent by design.
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{", text):
        if m.start() < i:
            continue
        out.append(text[i : m.start()])
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        i = j
    out.append(text[i:])
    return "".join(out)


def resolve(path, mods):
    """The longest module prefix of `path`."""
    for n in range(len(path), -1, -1):
        if tuple(path[:n]) in mods:
            return tuple(path[:n])
    return ()


def edges(mods):
    graph = {m: set() for m in mods}
    for mod, f in mods.items():
        text = strip_cfg_test(strip_comments(open(f, encoding="utf-8").read()))
        text = re.sub(r"\bpub(\([^)]*\))?\s+use\b[^;]*;", "", text)
        for m in re.finditer(r"\b(crate|super|self)((?:::\w+)+)", text):
            head, tail = m.group(1), m.group(2).split("::")[1:]
            if head == "crate":
                target = resolve(tail, mods)
            else:
                base = list(mod)
                # A file module's `self` is itself; `super` is its parent.
                while tail and tail[0] == "super":
                    tail = tail[1:]
                    base = base[:-1]
                if head == "super":
                    base = base[:-1]
                target = resolve(base + tail, mods)
            if target != mod and not (mod[: len(target)] == target and target != ()):
                graph[mod].add(target)
            elif target == () and mod != ():
                pass
    return graph


def sccs(graph):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(comp)

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return [c for c in out if len(c) > 1]


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    crates = sys.argv[1:] or CRATES
    found = False
    for crate in crates:
        src = os.path.join(root, crate, "src")
        if not os.path.isdir(src):
            continue
        graph = edges(module_files(src))
        for comp in sccs(graph):
            found = True
            names = sorted("::".join(m) or "lib" for m in comp)
            print(f"{crate}: circle of {len(comp)}: {', '.join(names)}")
    if not found:
        print("no import circles")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
