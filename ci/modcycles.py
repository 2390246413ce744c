#!/usr/bin/env python3
"""modcycles: module-level import cycles inside each crate of a Cargo workspace.

Granularity: one node per source file (a `mod.rs` / `lib.rs` / `main.rs` is the node of its
directory module).

Edges A -> B: a non-test item of file A names a path into file B:
  `use crate::..`, `use super::..`, `use self::..`, `use child::..` (nested groups expanded),
  and `crate::x::Y` / `super::Y` / `self::x::Y` / `child::Y` / `$crate::..` paths in code.
Comments, doc comments, string/char literals and `#[cfg(test)]` items (and files declared only
under `#[cfg(test)]`) are ignored. `mod child;` alone is not an edge.

Default ("semantic") mode: a path that names an item through a re-export (`pub use`) is followed
to the file that defines the item, and a `pub use` that only re-exports (the name is not used
in the re-exporting file's own code) is not an edge; `use m::*` globs are resolved to the files
defining the names the importing file actually mentions. `--raw`: edges go to the module the
path literally names, and every `use` (re-exports included) is an edge.

Inline `mod x { .. }` blocks are their own nodes (`file.rs::x`); `--inline-as-file` merges them
into their file's node.

Usage: modcycles.py [--raw] [--inline-as-file] [--edges] [--crate NAME] [--json OUT] [WORKSPACE_DIR]
"""
import json
import os
import re
import sys
from collections import defaultdict

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
INLINE_AS_FILE = False
KEYWORDS_ITEM = ("fn", "struct", "enum", "trait", "type", "const", "static", "union")


# ---------------------------------------------------------------- lexing
def clean(src):
    """Blank comments, string and char literals (keep newlines and offsets)."""
    out = list(src)
    n = len(src)
    i = 0

    def blank(a, b):
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = src[i]
        if c == "/" and i + 1 < n and src[i + 1] == "/":
            j = src.find("\n", i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
        elif c == "/" and i + 1 < n and src[i + 1] == "*":
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth += 1
                    j += 2
                elif src.startswith("*/", j):
                    depth -= 1
                    j += 2
                else:
                    j += 1
            blank(i, j)
            i = j
        elif c in "rbc" and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")) and \
                re.match(r'(br|r|cr)#*"', src[i:i + 260]):
            m = re.match(r'(br|r|cr)(#*)"', src[i:i + 260])
            end = '"' + m.group(2)
            j = src.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            blank(i + 1, j)
            i = j
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            blank(i + 1, j)
            i = j + 1
        elif c == "'":
            m = re.match(r"'(\\(x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]+\}|.)|[^\\'\n])'", src[i:i + 14])
            if m:
                blank(i + 1, i + m.end() - 1)
                i += m.end()
            else:
                i += 1  # lifetime / label
        else:
            i += 1
    return "".join(out)


def match_close(text, i):
    """text[i] is an opener; return index after its matching closer (brackets only)."""
    pairs = {"{": "}", "(": ")", "[": "]"}
    stack = [pairs[text[i]]]
    j = i + 1
    while j < len(text) and stack:
        ch = text[j]
        if ch in pairs:
            stack.append(pairs[ch])
        elif ch in ")]}":
            stack.pop()
        j += 1
    return j


def item_end(text, i):
    """From i (just after attributes), the end of the item: first top-level `;` or `{..}`."""
    j = i
    while j < len(text):
        ch = text[j]
        if ch in "([":
            j = match_close(text, j)
            continue
        if ch == "{":
            return match_close(text, j)
        if ch == ";":
            return j + 1
        j += 1
    return j


TEST_CFG = re.compile(r"#\s*\[\s*cfg\s*\(\s*(test|all\s*\((?:[^()]|\([^()]*\))*\btest\b(?:[^()]|\([^()]*\))*\))\s*\)\s*\]")
ATTR = re.compile(r"\s*#\s*\[")


def strip_tests(text):
    """Blank every item carrying a test-only cfg. Returns (text, whole_file_is_test)."""
    if re.search(r"#\s*!\s*\[\s*cfg\s*\(\s*test\s*\)\s*\]", text):
        return text, True
    out = list(text)
    pos = 0
    while True:
        m = TEST_CFG.search(text, pos)
        if not m:
            break
        j = m.end()
        while True:  # further attributes
            a = ATTR.match(text, j)
            if not a:
                break
            j = match_close(text, a.end() - 1)
        e = item_end(text, j)
        for k in range(m.start(), e):
            if out[k] != "\n":
                out[k] = " "
        pos = e
    return "".join(out), False


# ---------------------------------------------------------------- modules
class Module:
    def __init__(self, path, file, parent, span=None):
        self.path = path          # tuple of names from crate root
        self.file = file          # node file (relative)
        self.parent = parent
        self.children = {}        # name -> Module
        self.span = span          # (start, end) for inline modules in file text, else None
        self.items = set()        # names defined at module level
        self.uses = []            # Use records
        self.depth = 0            # brace depth of the module body
        self.node = file          # graph node: the file, or `file::inline::path` for inline mods

    def __repr__(self):
        return "crate" + "".join("::" + p for p in self.path)


class Use:
    def __init__(self, segs, alias, glob, is_pub, line, stmt_span):
        self.segs = segs
        self.alias = alias        # bound name (None for globs)
        self.glob = glob
        self.is_pub = is_pub
        self.line = line
        self.stmt_span = stmt_span


class File:
    def __init__(self, rel, text):
        self.rel = rel
        self.text = text
        self.depth = brace_depths(text)
        self.lines = [0]
        for k, ch in enumerate(text):
            if ch == "\n":
                self.lines.append(k + 1)
        self.modules = []         # modules living in this file (file module first)

    def line_of(self, pos):
        lo, hi = 0, len(self.lines) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.lines[mid] <= pos:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1

    def module_at(self, pos):
        best = self.modules[0]
        for m in self.modules[1:]:
            if m.span[0] <= pos < m.span[1]:
                if best.span is None or m.span[0] >= best.span[0]:
                    best = m
        return best


def brace_depths(text):
    d = [0] * (len(text) + 1)
    cur = 0
    for k, ch in enumerate(text):
        d[k] = cur
        if ch == "{":
            cur += 1
        elif ch == "}":
            cur -= 1
    d[len(text)] = cur
    return d


MOD_DECL = re.compile(r"(?<![\w$])mod\s+(r#)?(" + IDENT + r")\s*([;{])")
ITEM_DEF = re.compile(r"(?<![\w$])(?:(" + "|".join(KEYWORDS_ITEM) + r")\s+(" + IDENT + r")|macro_rules\s*!\s*(" + IDENT + r"))")
PATH_ATTR = re.compile(r"#\s*\[\s*path\s*=")


class Crate:
    def __init__(self, name, root_dir, root_file):
        self.name = name
        self.root_dir = root_dir
        self.files = {}
        self.warnings = []
        self.root = self.load_file(root_file, (), None)

    def rel(self, p):
        return os.path.relpath(p, self.root_dir)

    def load_file(self, abspath, modpath, parent):
        rel = self.rel(abspath)
        with open(abspath, encoding="utf-8") as f:
            raw = f.read()
        text, all_test = strip_tests(clean(raw))
        if all_test:
            text = re.sub(r"[^\n]", " ", text)
        fobj = File(rel, text)
        self.files[rel] = fobj
        mod = Module(modpath, rel, parent)
        fobj.modules.append(mod)
        base = os.path.basename(abspath)
        if base in ("mod.rs", "lib.rs", "main.rs"):
            childdir = os.path.dirname(abspath)
        else:
            childdir = os.path.join(os.path.dirname(abspath), base[:-3])
        self.scan_body(fobj, mod, 0, len(text), 0, childdir)
        return mod

    def scan_body(self, fobj, mod, start, end, depth, childdir):
        text = fobj.text
        mod.depth = depth
        for m in MOD_DECL.finditer(text, start, end):
            if fobj.depth[m.start()] != depth or fobj.module_at(m.start()) is not mod:
                continue
            name = m.group(2)
            if PATH_ATTR.search(text[max(0, m.start() - 200):m.start()]):
                self.warnings.append(f"{fobj.rel}: #[path] on mod {name} not supported")
            if m.group(3) == ";":
                cands = [os.path.join(childdir, name + ".rs"), os.path.join(childdir, name, "mod.rs")]
                found = [c for c in cands if os.path.exists(c)]
                if not found:
                    self.warnings.append(f"{fobj.rel}:{fobj.line_of(m.start())}: file for mod {name} not found")
                    continue
                child = self.load_file(found[0], mod.path + (name,), mod)
                mod.children[name] = child
            else:
                ob = m.end() - 1
                cb = match_close(text, ob)
                child = Module(mod.path + (name,), fobj.rel, mod, (ob, cb))
                if not INLINE_AS_FILE:
                    child.node = mod.node + "::" + name
                fobj.modules.append(child)
                mod.children[name] = child
                self.scan_body(fobj, child, ob + 1, cb - 1, depth + 1, os.path.join(childdir, name))
        for m in ITEM_DEF.finditer(text, start, end):
            if fobj.depth[m.start()] != depth or fobj.module_at(m.start()) is not mod:
                continue
            mod.items.add(m.group(2) or m.group(3))
        # enum variants etc. are not module items; tuple-struct/unit names covered above.
        for u in parse_uses(fobj, start, end):
            if fobj.module_at(u.stmt_span[0]) is mod:
                mod.uses.append(u)


USE_STMT = re.compile(r"(?<![\w$])((?:pub\s*(?:\([^)]*\))?\s*)?)use\s+")
TOK = re.compile(r"\s*(::|\{|\}|,|\*|\$crate|r#" + IDENT + "|" + IDENT + r")")


def parse_uses(fobj, start, end):
    text = fobj.text
    res = []
    for m in USE_STMT.finditer(text, start, end):
        semi = text.find(";", m.end())
        if semi < 0:
            continue
        body = text[m.end():semi]
        toks = []
        p = 0
        ok = True
        while p < len(body):
            t = TOK.match(body, p)
            if not t:
                if body[p:].strip():
                    ok = False
                break
            toks.append(t.group(1))
            p = t.end()
        if not ok:
            continue
        is_pub = bool(m.group(1).strip())
        line = fobj.line_of(m.start())
        for segs, alias, glob in expand_tree(toks):
            res.append(Use(segs, alias, glob, is_pub, line, (m.start(), semi + 1)))
    return res


def expand_tree(toks):
    """Expand a use tree token list into (segments, alias, glob) triples."""
    pos = [0]

    def peek():
        return toks[pos[0]] if pos[0] < len(toks) else None

    def take():
        t = peek()
        pos[0] += 1
        return t

    def tree(prefix):
        out = []
        segs = list(prefix)
        if peek() == "::":
            take()
        while True:
            t = peek()
            if t is None or t in (",", "}"):
                if segs != list(prefix):
                    last = segs[-1]
                    if last == "self":
                        segs = segs[:-1]
                        last = segs[-1] if segs else None
                    out.append((segs, last, False))
                return out
            if t == "{":
                take()
                while peek() not in ("}", None):
                    out.extend(tree(segs))
                    if peek() == ",":
                        take()
                take()
                return out
            if t == "*":
                take()
                out.append((segs, None, True))
                return out
            if t == "as":
                take()
                alias = take()
                if segs and segs[-1] == "self":
                    segs = segs[:-1]
                out.append((segs, alias if alias != "_" else None, False))
                return out
            if t == "::":
                take()
                continue
            segs.append(take())

    res = []
    while peek() is not None:
        res.extend(tree([]))
        if peek() == ",":
            take()
    return res


# ---------------------------------------------------------------- resolution
class Resolver:
    def __init__(self, crate, raw):
        self.c = crate
        self.raw = raw

    def bindings(self, mod):
        b = {}
        for u in mod.uses:
            if not u.glob and u.alias:
                b.setdefault(u.alias, u)
        return b

    def start(self, mod, first, seen):
        """Module that a path's first segment names, or None (extern / local item)."""
        if first in ("crate", "$crate"):
            return self.c.root
        if first == "self":
            return mod
        if first == "super":
            return mod.parent
        if first in mod.children:
            return mod.children[first]
        return None

    def walk(self, mod, segs, seen=None):
        """Resolve a path from module `mod`; return target Module (or None if outside crate)."""
        # A private copy: callers may hand in a frozenset (item_home) and keep theirs.
        seen = set(seen) if seen else set()
        if not segs:
            return None
        cur = self.start(mod, segs[0], seen)
        if cur is None:
            # a name bound by a `use` or a glob in this module
            first = segs[0]
            if first.startswith("r#"):
                first = first[2:]
            u = self.bindings(mod).get(first)
            key = (id(mod), first)
            if u is not None and key not in seen:
                seen.add(key)
                tgt = self.walk(mod, u.segs, seen)
                if tgt is None:
                    return None
                if len(segs) == 1:
                    return tgt
                return self.walk_from(tgt, segs[1:], seen)
            for g in mod.uses:
                if g.glob:
                    gk = (id(mod), "*", tuple(g.segs))
                    if gk in seen:
                        continue
                    seen.add(gk)
                    gm = self.walk(mod, g.segs, seen)
                    if gm is not None and first in gm.children:
                        return self.walk_from(gm.children[first], segs[1:], seen)
            return None
        return self.walk_from(cur, segs[1:], seen)

    def walk_from(self, cur, rest, seen):
        for k, s in enumerate(rest):
            if s == "super":
                cur = cur.parent
                if cur is None:
                    return None
            elif s == "self":
                continue
            elif s in cur.children:
                cur = cur.children[s]
            else:
                if self.raw:
                    return cur
                return self.item_home(cur, s, seen)
        return cur

    def item_home(self, mod, name, seen):
        """Module defining `name` as seen from module `mod` (following pub re-exports)."""
        if name.startswith("r#"):
            name = name[2:]
        key = (id(mod), "item", name)
        if key in seen:
            return mod
        seen = seen | {key}
        if name in mod.items:
            return mod
        for u in mod.uses:
            if u.is_pub and not u.glob and u.alias == name:
                # A re-export of something outside the crate (`pub(crate) use other_crate as
                # ir;`) leads outside: no edge into the re-exporting module.
                return self.walk(mod, u.segs, seen)
        for u in mod.uses:
            if u.is_pub and u.glob:
                g = self.walk(mod, u.segs, seen)
                if g is not None and g is not mod and self.provides(g, name, seen):
                    return self.item_home(g, name, seen)
        return mod

    def provides(self, mod, name, seen):
        if name in mod.items or name in mod.children:
            return True
        for u in mod.uses:
            if u.is_pub and not u.glob and u.alias == name:
                return True
        for u in mod.uses:
            if u.is_pub and u.glob:
                key = (id(mod), "prov", tuple(u.segs))
                if key in seen:
                    continue
                g = self.walk(mod, u.segs, seen | {key})
                if g is not None and g is not mod and self.provides(g, name, seen | {key}):
                    return True
        return False

    def glob_names(self, mod, seen=frozenset()):
        """Names a glob import of `mod` brings in (items, child modules, all uses)."""
        names = set(mod.items) | set(mod.children)
        for u in mod.uses:
            if u.alias and not u.glob:
                names.add(u.alias)
        return names


CODE_PATH = re.compile(r"(?<![\w:$])(\$crate|crate|super|self|" + IDENT + r")((?:\s*::\s*(?:r#)?" + IDENT + r")+)")
WORD = re.compile(r"(?<![\w.$])" + IDENT)


def analyse(crate, raw):
    r = Resolver(crate, raw)
    edges = defaultdict(list)  # (a, b) -> [(line, kind)]

    def add(a_node, tgt, line, kind):
        if tgt is None or tgt.node == a_node:
            return
        edges[(a_node, tgt.node)].append((line, kind))

    for rel, f in crate.files.items():
        text = f.text
        use_spans = []
        for mod in f.modules:
            for u in mod.uses:
                use_spans.append(u.stmt_span)
        use_spans.sort()
        # body text without use statements
        body = list(text)
        for a, b in use_spans:
            for k in range(a, b):
                if body[k] != "\n":
                    body[k] = " "
        body = "".join(body)

        for mod in f.modules:
            lo, hi = (mod.span if mod.span else (0, len(text)))
            sub_spans = [m.span for m in f.modules if m is not mod and m.span and lo <= m.span[0] < hi
                         and m.path[:len(mod.path)] == mod.path]

            def in_mod(pos):
                return lo <= pos < hi and not any(a <= pos < b for a, b in sub_spans)

            mod_words = None

            def words():
                nonlocal mod_words
                if mod_words is None:
                    mod_words = defaultdict(list)
                    for w in WORD.finditer(body, lo, hi):
                        if in_mod(w.start()):
                            mod_words[w.group(0)].append(w.start())
                return mod_words

            for u in mod.uses:
                if u.glob:
                    g = r.walk(mod, u.segs)
                    if g is None or g.node == mod.node:
                        continue
                    if raw:
                        add(mod.node, g, u.line, "use *")
                        continue
                    if u.is_pub:
                        continue  # facade glob re-export
                    hit = False
                    local = mod.items | set(mod.children) | {x.alias for x in mod.uses if x.alias}
                    for name in sorted(r.glob_names(g)):
                        if name in local or name not in words():
                            continue
                        if name in g.children:
                            t = g.children[name]
                        else:
                            t = r.item_home(g, name, frozenset())
                        if t is not None and t.node != mod.node:
                            add(mod.node, t, u.line, f"use * ({name})")
                            hit = True
                    if not hit and g.node != mod.node:
                        # nothing recognisably used: still the module's import
                        add(mod.node, g, u.line, "use * (unresolved)")
                    continue
                t = r.walk(mod, u.segs)
                if t is None:
                    continue
                if u.is_pub and not raw and u.alias and u.alias not in words():
                    continue  # pure re-export
                add(mod.node, t, u.line, "use " + "::".join(u.segs))

            for m in CODE_PATH.finditer(body, lo, hi):
                if not in_mod(m.start()):
                    continue
                first = m.group(1)
                segs = [first] + [s.strip() for s in m.group(2).split("::")[1:]]
                if first not in ("$crate", "crate", "super", "self") and first not in mod.children:
                    continue  # names bound by `use` are counted at the use
                # path ends at the last segment; a trailing `::<` generic is fine
                t = r.walk(mod, segs)
                add(mod.node, t, f.line_of(m.start()), "path " + "::".join(segs))
    return edges


IMPL = re.compile(r"(?<![\w$])impl\s*(?:<(?:[^<>{}]|<[^<>{}]*>)*>)?\s*([^{;]*?)\s*(\{|;)")


def split_impls(crate):
    """Inherent `impl X` blocks in a module other than the one defining X: (file, line, X, home)."""
    r = Resolver(crate, False)
    out = []
    for rel, f in crate.files.items():
        for mod in f.modules:
            lo, hi = (mod.span if mod.span else (0, len(f.text)))
            for m in IMPL.finditer(f.text, lo, hi):
                if f.module_at(m.start()) is not mod or m.group(2) != "{":
                    continue
                head = m.group(1)
                if re.search(r"(?<![\w$])for(?![\w$])", head):
                    continue  # trait impl
                ty = re.sub(r"<.*", "", head.split("where")[0]).strip()
                if not re.fullmatch(r"(?:" + IDENT + r"::)*" + IDENT, ty):
                    continue
                segs = ty.split("::")
                if len(segs) == 1:
                    if segs[0] in mod.items:
                        continue
                    u = r.bindings(mod).get(segs[0])
                    if u is None:
                        continue  # extern or unknown
                    t = r.walk(mod, u.segs)
                else:
                    t = r.walk(mod, segs)
                if t is not None and t.node != mod.node:
                    out.append((mod.node, f.line_of(m.start()), ty, t.node))
    return out


def tarjan(nodes, adj):
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    sys.setrecursionlimit(100000)

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in adj.get(v, ()):
            if w not in index:
                strong(w)
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
            out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            strong(v)
    return out


def workspace_crates(ws):
    with open(os.path.join(ws, "Cargo.toml"), encoding="utf-8") as f:
        toml = f.read()
    m = re.search(r"\[workspace\][^\[]*?members\s*=\s*\[([^\]]*)\]", toml, re.S)
    members = re.findall(r'"([^"]+)"', m.group(1)) if m else ["."]
    crates = []
    for mem in members:
        d = os.path.normpath(os.path.join(ws, mem))
        with open(os.path.join(d, "Cargo.toml"), encoding="utf-8") as f:
            ct = f.read()
        pm = re.search(r'\[package\][^\[]*?name\s*=\s*"([^"]+)"', ct, re.S)
        name = pm.group(1) if pm else mem
        for root, kind in (("src/lib.rs", "lib"), ("src/main.rs", "bin")):
            p = os.path.join(d, root)
            if os.path.exists(p):
                crates.append((f"{name} ({kind})", d, p))
        bindir = os.path.join(d, "src", "bin")
        if os.path.isdir(bindir):
            for b in sorted(os.listdir(bindir)):
                if b.endswith(".rs"):
                    crates.append((f"{name} (bin {b[:-3]})", d, os.path.join(bindir, b)))
    return crates


def main(argv):
    global INLINE_AS_FILE
    INLINE_AS_FILE = "--inline-as-file" in argv
    raw = "--raw" in argv
    show_edges = "--edges" in argv
    only = None
    jout = None
    args = [a for a in argv if not a.startswith("--")]
    if "--crate" in argv:
        only = argv[argv.index("--crate") + 1]
        args.remove(only)
    if "--json" in argv:
        jout = argv[argv.index("--json") + 1]
        args.remove(jout)
    ws = args[0] if args else "."
    result = []
    total_sccs = 0
    for name, d, rootfile in workspace_crates(ws):
        if only and only not in name:
            continue
        c = Crate(name, d, rootfile)
        edges = analyse(c, raw)
        adj = defaultdict(set)
        for a, b in edges:
            adj[a].add(b)
        nodes = [m.node for f in c.files.values() for m in f.modules]
        sccs = [s for s in tarjan(nodes, adj) if len(s) > 1]
        total_sccs += len(sccs)
        rel_d = os.path.relpath(d, ws)
        print(f"== {name}  [{rel_d}]  files={len(c.files)} modules={len(set(nodes))} edges={len(edges)} cyclic_sccs={len(sccs)}")
        for w in c.warnings:
            print("   warning:", w)
        crate_res = {"crate": name, "dir": rel_d, "files": len(c.files), "edges": len(edges), "sccs": []}
        for s in sorted(sccs, key=len):
            ss = set(s)
            ce = sorted((a, b) for (a, b) in edges if a in ss and b in ss)
            print(f"  SCC ({len(s)} modules, {len(ce)} edges): {', '.join(s)}")
            recs = []
            for a, b in ce:
                sites = edges[(a, b)]
                line, kind = sites[0]
                more = f"  (+{len(sites) - 1} more)" if len(sites) > 1 else ""
                afile = a.split("::")[0]
                print(f"    {a} -> {b}   {os.path.normpath(os.path.join(rel_d, afile))}:{line}  {kind}{more}")
                recs.append({"from": a, "to": b, "site": f"{os.path.normpath(os.path.join(rel_d, afile))}:{line}", "kind": kind,
                             "sites": [f"{l} {k}" for l, k in sites]})
            crate_res["sccs"].append({"files": s, "edges": recs})
        impls = split_impls(c)
        crate_res["split_impls"] = [{"file": a, "line": l, "type": t, "home": h} for a, l, t, h in impls]
        if impls:
            print(f"  inherent impl blocks outside their type's module ({len(impls)}; method calls are no import edges):")
            for a, l, t, h in impls:
                print(f"    {os.path.join(rel_d, a.split('::')[0])}:{l}  impl {t}  (type in {h})")
        if show_edges:
            for (a, b), sites in sorted(edges.items()):
                print(f"    edge {a} -> {b}  " + "; ".join(f"{l}:{k}" for l, k in sites[:3]))
        result.append(crate_res)
    print(f"total cyclic SCCs: {total_sccs}")
    if jout:
        with open(jout, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
    return 1 if total_sccs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
