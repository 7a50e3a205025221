#!/usr/bin/env python3
"""Names with internal linkage (anonymous namespace, file-scope `static`) that two files of one unity-built target both
define. A unity build compiles a batch of files as one translation unit (cmake/unity.cmake), so two such helpers with
the same name either fail to compile (same signature) or, worse, become overloads of each other: a call in the second
file may silently pick the first file's `sigmoid(float)` over its own `sigmoid(double)`. Files of a target that share
such a name must not be batched together; cmake/unity.cmake keeps all but the first of them out of the batches (this script's `skip`, run at
configure time) and ctest's unity_collisions runs `check` on what was batched (a file edited after configuring).

  unity_collisions.py check LISTFILE   LISTFILE: "target<TAB>source" per batched file (written at configure time);
                                       exit 1 and print the names when two batched files of a target share one.
  unity_collisions.py skip FILE...     the files of one target to keep out of its batches, ';'-separated (for
                                       CMake): walking the files in order, each one that shares a name with a file
                                       already batched is kept out.
  unity_collisions.py scan FILE...     print every name each file defines with internal linkage.

Two files also conflict when one uses, unqualified, a name the other defines with internal linkage (it may mean a
function or variable of a header, and batched, lookup would see the helper too: an ambiguity, or a silent overload).

A textual scan, not a C++ parser: comments and string literals are removed, braces are tracked, and at the top level
of an anonymous namespace (or of a named namespace, for `static`) it records function, type, alias and variable
names. Good enough for this codebase's style; a miss shows up as a compile error (same name, same kind) or, for
overloads, is what the check is for.
"""
import collections
import re
import sys

KEYWORDS = {'if', 'for', 'while', 'switch', 'catch', 'return', 'sizeof', 'decltype', 'alignof', 'static_assert'}


def strip(s):
    s = re.sub(r'//[^\n]*', '', s)
    s = re.sub(r'/\*.*?\*/', '', s, flags=re.S)
    s = re.sub(r'R"(\w*)\((.*?)\)\1"', '""', s, flags=re.S)
    s = re.sub(r'"(\\.|[^"\\\n])*"', '""', s)
    s = re.sub(r"'(\\.|[^'\\\n])*'", "''", s)
    s = re.sub(r'^\s*#[^\n]*(\\\n[^\n]*)*', '', s, flags=re.M)
    return s


def name_of(head, brace):
    """The name a top-level declaration `head` (text before '{' or ';') introduces, or None."""
    head = ' '.join(head.split())
    head = re.sub(r'^template\s*<.*?>\s*', '', head)  # one level of template header is enough here
    m = re.search(r'\b(?:struct|class|union|enum(?:\s+class|\s+struct)?)\s+(\w+)\s*(?:final\s*)?(?::[^{]*)?$', head)
    if m:
        return m.group(1) if brace else None  # a forward declaration defines nothing
    # Aliases may be declared again with the same meaning: the alias and what it names are the key.
    m = re.search(r'\b(?:using|namespace)\s+(\w+)\s*=\s*(.*)$', head)
    if m:
        return m.group(1) + ' = ' + m.group(2).replace(' ', '')
    if re.match(r'^[A-Z_]+\(', head):
        return None  # a macro such as GoogleTest's TEST(suite, name): its expansion has unique names
    if re.match(r'^(using|friend|typedef)\b', head):
        return None
    m = re.match(r'^[^()=]*?\b(\w+)\s*(\[[^\]]*\])*\s*=', head)  # a variable with an initializer: `T name = ...`
    if m and re.search(r'\w[\w:<>,*&\s]*\s[*&]?' + m.group(1) + r'\b', head):
        return m.group(1)
    m = re.search(r'(\w+)\s*\(([^;{}]*)\)\s*(const\s*)?(noexcept\s*)?(->[^{;]*)?(requires[^{;]*)?$', head)
    if m and brace:
        return None if m.group(1) in KEYWORDS else m.group(1)
    if m and not brace:
        return None  # a declaration; the definition is what counts
    m = re.search(r'(\w+)\s*(\[[^\]]*\])*\s*(=.*)?$', head)
    if m and re.search(r'\w\s+[\w:<>,*&\s]*\b' + m.group(1) + r'\b', head):
        return m.group(1)
    return None


def calls(path):
    """Names the file uses unqualified (not after `.`, `->` or `::`): a call, or a variable such as `kCases` that a
    header declares in a namespace the file opened with `using namespace`."""
    s = strip(open(path, encoding='utf-8', errors='replace').read())
    return set(re.findall(r'(?<![\w.>:])([A-Za-z_]\w*)', s))


def info(path):
    return internal_names(path), calls(path)


def internal_names(path):
    s = strip(open(path, encoding='utf-8', errors='replace').read())
    names = set()
    stack = []  # 'anon', 'ns' or 'other' per open brace
    start = 0
    for i, c in enumerate(s):
        if c in '{;':
            head = s[start:i]
            top = all(k in ('ns', 'anon') for k in stack)
            if c == '{' and re.search(r'\bnamespace\s*$', head):
                stack.append('anon')
            elif c == '{' and re.search(r'\bnamespace\s+[\w:]+\s*$', head):
                stack.append('ns')
            else:
                if top and head.strip() and ('anon' in stack or re.match(r'\s*(template\s*<.*?>\s*)?static\b', head, re.S)):
                    n = name_of(head, c == '{')
                    if n:
                        names.add(n)
                if c == '{':
                    stack.append('other')
            start = i + 1
        elif c == '}':
            if stack:
                stack.pop()
            start = i + 1
    return names


def conflicts(a, b):
    """Names two files (info() of each) share in a way one translation unit cannot hold or may silently merge: a
    name both define with internal linkage (except an alias both declare with the same meaning), or one that a file
    defines and the other calls."""
    def base(n):
        return n.split(' = ')[0]
    (an, ac), (bn, bc) = a, b
    out = set()
    for x in an:
        for y in bn:
            if base(x) == base(y) and not (x == y and ' = ' in x):
                out.add(base(x))
    out |= {n for n in an if ' = ' not in n and n in bc}
    out |= {n for n in bn if ' = ' not in n and n in ac}
    return out


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == 'scan':
        for p in sys.argv[2:]:
            print(p, ' '.join(sorted(internal_names(p))))
        return 0
    if len(sys.argv) >= 2 and sys.argv[1] == 'skip':
        kept, skipped = [], []
        for p in sys.argv[2:]:
            names = info(p)
            if any(conflicts(names, k) for k in kept):
                skipped.append(p)
            else:
                kept.append(names)
        sys.stdout.write(';'.join(skipped))
        return 0
    if len(sys.argv) != 3 or sys.argv[1] != 'check':
        print(__doc__)
        return 2
    targets = collections.defaultdict(list)
    for line in open(sys.argv[2]):
        if line.strip():
            t, p = line.rstrip('\n').split('\t')
            targets[t].append(p)
    bad = 0
    for t, files in sorted(targets.items()):
        files = sorted(set(files))
        names = {p: info(p) for p in files}
        for i, p in enumerate(files):
            for q in files[i + 1:]:
                for n in sorted(conflicts(names[p], names[q])):
                    bad += 1
                    print(f'{t}: `{n}`, internal in one, defined or used in the other batched file: {p} {q}')
    if bad:
        print(f'{bad} name(s) shared by batched files: rename the helper (or reconfigure: cmake/unity.cmake '
              'keeps such files out of the batches at configure time)')
        return 1
    print(f'{sum(len(f) for f in targets.values())} batched files in {len(targets)} targets: no shared internal name')
    return 0


if __name__ == '__main__':
    sys.exit(main())
