#!/usr/bin/env python3
"""Module import graph of a Rust crate's src/ (production code only: `#[cfg(test)]` items,
comments and doc comments are dropped). Prints the edges' count, the strongly connected
components wider than one file (import circles), and (with -v) every edge inside each one.
With --none, exits 1 when there is any circle: scripts/lint.sh holds the backend to none (its
state at the ground, the ways in above it, the assembly on top; docs/architecture.md).

    python3 scripts/import-circles.py backend/src [-v] [--top] [--edges] [--none]"""
import os
import re
import sys
from collections import defaultdict

root = sys.argv[1]
verbose = '-v' in sys.argv

def modpath(rel):
    p = rel[:-3].split('/')
    if p[-1] in ('mod', 'lib'):
        p = p[:-1]
    return tuple(p)

files = {}
for d, _, fs in os.walk(root):
    for f in fs:
        if f.endswith('.rs'):
            rel = os.path.relpath(os.path.join(d, f), root)
            if rel == 'main.rs':
                continue
            files[modpath(rel)] = rel

def strip(text):
    # Drop comments.
    text = re.sub(r'/\*.*?\*/', '', text, flags=re.S)
    text = re.sub(r'//[^\n]*', '', text)
    # Drop string literals (they may hold "crate::").
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', text)
    # Drop #[cfg(test)] items (a block or a `mod x;`).
    out, i = [], 0
    while True:
        j = text.find('#[cfg(test)]', i)
        if j < 0:
            out.append(text[i:]); break
        out.append(text[i:j])
        k = j + len('#[cfg(test)]')
        # find end of the item: a ';' before any '{', or the matching '}'
        semi = text.find(';', k); brace = text.find('{', k)
        if brace < 0 or (0 <= semi < brace):
            i = semi + 1; continue
        depth = 0
        for n in range(brace, len(text)):
            if text[n] == '{': depth += 1
            elif text[n] == '}':
                depth -= 1
                if depth == 0: break
        i = n + 1
    return ''.join(out)

def expand(tree):
    """`a::{b, c::{d, self}}` -> [a::b, a::c::d, a::c]"""
    tree = tree.strip()
    m = re.match(r'^(.*?)::\{(.*)\}$', tree, flags=re.S)
    if not m:
        if tree.startswith('{') and tree.endswith('}'):
            return [x for part in split_top(tree[1:-1]) for x in expand(part)]
        return [re.sub(r'\s+as\s+\w+$', '', tree)]
    prefix, inner = m.group(1), m.group(2)
    out = []
    for part in split_top(inner):
        for x in expand(part):
            out.append(prefix if x == 'self' else prefix + '::' + x)
    return out

def split_top(s):
    parts, depth, cur = [], 0, ''
    for ch in s:
        if ch == '{': depth += 1
        if ch == '}': depth -= 1
        if ch == ',' and depth == 0:
            parts.append(cur); cur = ''
        else:
            cur += ch
    if cur.strip(): parts.append(cur)
    return [p.strip() for p in parts if p.strip()]

def resolve(me, segs):
    """Absolute module path the reference lands in (the longest existing module prefix)."""
    if not segs: return None
    base = list(me)
    if segs[0] == 'crate':
        cur = []; segs = segs[1:]
    elif segs[0] in ('super', 'self'):
        cur = list(base)
        # `super` in a file module a/b.rs refers to a; in mod.rs a/mod.rs also to parent of a
        while segs and segs[0] in ('super', 'self'):
            if segs[0] == 'super': cur = cur[:-1]
            segs = segs[1:]
    else:
        # a child module of me, or a top-level module of the crate (2018 paths in use: only child)
        if tuple(base + [segs[0]]) in files:
            cur = list(base)
        else:
            return None
    best = tuple(cur) if tuple(cur) in files else None
    for s in segs:
        cur.append(s)
        if tuple(cur) in files: best = tuple(cur)
        else: break
    return best

edges = defaultdict(set)
for mod, rel in files.items():
    text = strip(open(os.path.join(root, rel)).read())
    refs = []
    for m in re.finditer(r'\buse\s+([^;]+);', text):
        refs += expand(m.group(1))
    for m in re.finditer(r'(?<![\w:])((?:crate|super|self)(?:::\w+)+)', text):
        refs.append(m.group(1))
    # child modules used by a bare path: `child::item`
    for m in re.finditer(r'(?<![\w:])(\w+)::\w+', text):
        if tuple(list(mod) + [m.group(1)]) in files:
            refs.append(m.group(0))
    for r in refs:
        segs = [s for s in re.split(r'\s*::\s*', r.strip()) if s and s != '*']
        t = resolve(mod, segs)
        if t is not None and t != mod:
            edges[mod].add(t)

if '--top' in sys.argv:
    # Collapse to the top-level modules (a directory counts as one).
    top = lambda m: m[:1] if m else m
    collapsed = defaultdict(set)
    for a, bs in edges.items():
        for b in bs:
            if top(a) != top(b):
                collapsed[top(a)].add(top(b))
    files = {top(m): ('/'.join(top(m)) or 'lib') for m in files}
    edges = collapsed

# Tarjan
index, low, stack, on, sccs, c = {}, {}, [], set(), [], [0]
sys.setrecursionlimit(10000)
def sc(v):
    index[v] = low[v] = c[0]; c[0] += 1; stack.append(v); on.add(v)
    for w in edges[v]:
        if w not in index: sc(w); low[v] = min(low[v], low[w])
        elif w in on: low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop(); on.discard(w); comp.append(w)
            if w == v: break
        sccs.append(comp)
for v in list(files):
    if v not in index: sc(v)
name = lambda m: files[m]
n_edges = sum(len(v) for v in edges.values())
big = [s for s in sccs if len(s) > 1]
print(f"files {len(files)}, import edges {n_edges}, circles wider than one file: {len(big)}")
for s in sorted(big, key=len, reverse=True):
    inside = set(s)
    internal = [(a, b) for a in s for b in edges[a] if b in inside]
    print(f"  circle of {len(s)} files, {len(internal)} arrows inside: " + ', '.join(sorted(name(m) for m in s)))
    if verbose:
        for a, b in sorted(internal):
            print(f"      {name(a)} -> {name(b)}")
if '--edges' in sys.argv:
    for a in sorted(edges, key=name):
        for b in sorted(edges[a], key=name):
            print(f"{name(a)} -> {name(b)}")
if '--none' in sys.argv and big:
    sys.exit(1)
