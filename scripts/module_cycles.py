#!/usr/bin/env python3
"""Prints which modules of one folder (default gateway/src/request) use which, and exits 1 when
a module uses one that uses it back, directly or through others.

A node is a child module of the folder (a file, or a sub-folder with its files); `mod` is the
folder's own mod.rs. Edges come from paths in code (tests excluded): `super::x` in a child,
`super::super::x` in a grandchild, `crate::<folder>::x` anywhere, and `x::` or `self::x` in
mod.rs. A `super::Name` that is not a module is an item of mod.rs: an edge to `mod`.
"""
import os
import re
import sys

folder = sys.argv[1] if len(sys.argv) > 1 else "gateway/src/request"
name = os.path.basename(folder.rstrip("/"))
children = set()
for entry in os.listdir(folder):
    if entry.endswith(".rs") and entry != "mod.rs":
        children.add(entry[:-3])
    elif os.path.isdir(os.path.join(folder, entry)):
        children.add(entry)


def code(path):
    with open(path, encoding="utf-8") as f:
        text = f.read().split("#[cfg(test)]")[0]
    # Comments say things; only code uses things.
    return "\n".join(line.split("//")[0] for line in text.splitlines())


def targets(prefix_re, text):
    """The names used through `prefix`, including `prefix{a, b::c}` groups."""
    found = set()
    for m in re.finditer(prefix_re + r"(\{[^}]*\}|[A-Za-z_][A-Za-z0-9_]*)", text):
        part = m.group(1)
        if part.startswith("{"):
            for item in part[1:-1].split(","):
                item = item.strip().split("::")[0].strip()
                if item:
                    found.add(item)
        else:
            found.add(part)
    return found


def node_of(used):
    if used in children:
        return used
    if used in ("self", "super"):
        return None
    return "mod"


graph = {c: set() for c in children}
graph["mod"] = set()
for dirpath, _, files in os.walk(folder):
    for f in files:
        if not f.endswith(".rs"):
            continue
        path = os.path.join(dirpath, f)
        rel = os.path.relpath(path, folder).split(os.sep)
        text = code(path)
        if rel == ["mod.rs"]:
            node, used = "mod", set()
            for child in children:
                if re.search(r"(?<![A-Za-z0-9_:])(self::)?" + child + r"::", text):
                    used.add(child)
        else:
            node = rel[0].removesuffix(".rs")
            depth = len(rel) - (1 if rel[-1] == "mod.rs" else 0)
            up = "super::" * depth
            used = {node_of(u) for u in targets(r"(?<![A-Za-z0-9_:])" + re.escape(up), text)}
        used |= {node_of(u) for u in targets(r"crate::" + name + "::", text)}
        graph[node] |= {u for u in used if u and u != node}

for n in sorted(graph):
    print(f"{n} -> {', '.join(sorted(graph[n])) or '-'}")
state, cycle = {}, []


def dfs(n, stack):
    state[n] = 1
    stack.append(n)
    for d in sorted(graph[n]):
        if state.get(d) == 1:
            cycle.append(stack[stack.index(d):] + [d])
            return True
        if state.get(d) is None and dfs(d, stack):
            return True
    state[n] = 2
    stack.pop()
    return False


for n in sorted(graph):
    if state.get(n) is None and dfs(n, []):
        break
print("cycle: " + " -> ".join(cycle[0]) if cycle else f"no cycle between the modules of {name}/")
sys.exit(1 if cycle else 0)
