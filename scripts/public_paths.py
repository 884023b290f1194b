#!/usr/bin/env python3
"""Lists public names of the workspace's library crates that are reachable by more than one path.

A crate's public paths come from its `pub mod` tree and its `pub use` items. A name is
reachable twice when:
  - a `pub use` re-exports an item from a module that is itself public (the item is then at the
    module's path and at the re-export's), or
  - a `pub use` re-exports an item of another workspace crate (the item is then at its own
    crate's path too).
Re-exports inside a module named `prelude` are allowed: the prelude is the one sanctioned second
path. `#[doc(hidden)]` and `cfg(loom)`-only re-exports are skipped (they are not public API).

Usage: scripts/public_paths.py   (exits 1 and lists the duplicates if there are any)
"""

import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
CRATES = {
    "streamtask_core": "core",
    "streamtask_runtime": "runtime",
    "streamtask_legacy": "legacy",
    "streamtask_mailbox": "mailbox",
    "streamtask_bridge": "bridge",
    "streamtask": ".",
    "streamtask_timely": "timely",
}


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(line.split("//")[0] for line in text.splitlines())


def module_file(src, path):
    base = os.path.join(src, *path) if path else os.path.join(src, "lib")
    for candidate in (base + ".rs", os.path.join(base, "mod.rs")):
        if os.path.isfile(candidate):
            return candidate
    return None


def attributes_before(text, start):
    """The attribute lines right above position `start`."""
    lines = text[:start].rstrip("\n").splitlines()
    attrs = []
    while lines and lines[-1].strip().startswith("#["):
        attrs.append(lines.pop().strip())
    return attrs


def public_modules(src):
    """Every public module path (tuple), walking `pub mod` from lib.rs."""
    found, todo = {()}, [()]
    while todo:
        path = todo.pop()
        f = module_file(src, path)
        if not f:
            continue
        text = strip_comments(open(f, encoding="utf-8").read())
        for m in re.finditer(r"^\s*pub mod (\w+)\s*;", text, flags=re.M):
            attrs = attributes_before(text, m.start())
            if any("doc(hidden)" in a or "cfg(loom)" in a or "cfg(test)" in a for a in attrs):
                continue
            child = path + (m.group(1),)
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def use_items(body):
    """Flattens a use tree `a::{b, c::{d}}` into paths."""
    body = re.sub(r"\s+as\s+", "@as@", body)
    body = re.sub(r"\s+", "", body)

    def expand(prefix, tree):
        if tree.startswith("{") and tree.endswith("}"):
            parts, depth, cur = [], 0, ""
            for ch in tree[1:-1]:
                if ch == "," and depth == 0:
                    parts.append(cur)
                    cur = ""
                    continue
                depth += {"{": 1, "}": -1}.get(ch, 0)
                cur += ch
            if cur:
                parts.append(cur)
            out = []
            for p in parts:
                out.extend(expand(prefix, p))
            return out
        i = tree.find("::{")
        if i >= 0:
            return expand(prefix + tree[:i].split("::"), tree[i + 2 :])
        return [prefix + tree.split("::")]

    return expand([], body)


def foreign_origin(src, path, name, depth=0):
    """Where `name` in module `path` comes from when it is another workspace crate's item."""
    f = module_file(src, path)
    if not f or depth > 8:
        return None
    text = strip_comments(open(f, encoding="utf-8").read())
    for m in re.finditer(r"^\s*(?:pub(?:\([^)]*\))?\s+)?use ([^;]+);", text, flags=re.M):
        for item in use_items(m.group(1)):
            original, _, alias = item[-1].partition("@as@")
            if (alias or original) != name:
                continue
            head = item[0]
            if head in CRATES:
                return "::".join(item[:-1] + [original])
            if head == "crate":
                return foreign_origin(src, tuple(item[1:-1]), original, depth + 1)
            if head == "self":
                return foreign_origin(src, path + tuple(item[1:-1]), original, depth + 1)
            if head == "super":
                return foreign_origin(src, path[:-1] + tuple(item[1:-1]), original, depth + 1)
    return None


def main():
    duplicates = []
    for crate, folder in CRATES.items():
        src = os.path.join(ROOT, folder, "src")
        if not os.path.isdir(src):
            continue
        mods = public_modules(src)
        for path in sorted(mods):
            if path and path[-1] == "prelude":
                continue
            f = module_file(src, path)
            text = strip_comments(open(f, encoding="utf-8").read())
            for m in re.finditer(r"^\s*pub use ([^;]+);", text, flags=re.M):
                attrs = attributes_before(text, m.start())
                if any("doc(hidden)" in a or "cfg(loom)" in a or "cfg(test)" in a for a in attrs):
                    continue
                for item in use_items(m.group(1)):
                    original, _, alias = item[-1].partition("@as@")
                    name = alias or original
                    item = item[:-1] + [original]
                    if name in ("*", "self"):
                        continue
                    head = item[0]
                    at = "::".join((crate,) + path + (name,))
                    if head in CRATES and head != crate:
                        duplicates.append(f"{at}: also {'::'.join(item)}")
                        continue
                    if head in ("crate", "self", "super"):
                        if head == "crate":
                            source = tuple(item[1:-1])
                        elif head == "self":
                            source = path + tuple(item[1:-1])
                        else:
                            source = path[:-1] + tuple(item[1:-1])
                        if source != path and source in mods:
                            duplicates.append(
                                f"{at}: also {'::'.join((crate,) + source + (item[-1],))}"
                            )
                        else:
                            other = foreign_origin(src, source, item[-1])
                            if other:
                                duplicates.append(f"{at}: also {other}")
    for line in duplicates:
        print(line)
    print(f"{len(duplicates)} public name(s) reachable by two paths")
    return 1 if duplicates else 0


if __name__ == "__main__":
    sys.exit(main())
