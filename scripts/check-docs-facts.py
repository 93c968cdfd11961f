#!/usr/bin/env python3
"""The facts README.md and docs/*.md name exist in the code (seconds, no build):

- every `--flag` of sluice the docs name is a flag of the binary: read from the clap attributes
  (`#[arg(long ...)]`, aliases included) of backend/src (cli.rs, cli/, and any module a
  `#[command(flatten)]` pulls in, e.g. tls/flags.rs). A flag is sluice's when it follows a
  `sluice` command in the same code span or code line (`sluice --grpc-listen ...`,
  `cargo run --bin sluice -- --rules ...`) or sits in the first column of docs/backend.md's flags
  table; there it must be sluice's. Anywhere else a flag must be sluice's or another program's
  named in OTHER_FLAGS below (envoy, cargo, docker, redis-server, curl, our own scripts...).
- every `sluice_*` metric the docs name is registered in backend/src: a string literal
  "sluice_..." outside test code, Prometheus' suffixes (_total, _bucket, _sum, _count, _created)
  allowed; `sluice_rlqs_*` needs one such metric. Any other `sluice_*` word (a crate, a cluster,
  a descriptor entry) must appear in some file of the repository outside the docs.
- every repository path the docs name in code (`backend/src/foo.rs`, `scripts/x.sh`,
  `envoy/rlqs.yaml`, globs and `<placeholders>` as wildcards) exists; paths git ignores (build
  outputs: target/, dashboard/dist) are not checked.

The other way round, every flag of the binary that clap shows (not `hide = true`) must be named
in docs/backend.md, the flags' reference.

A line that says "not built" (a design page's proposal) is not checked for flags and metrics; a
page whose first 10 lines hold `<!-- check-docs-facts: skip -->` and say why is not checked at
all (none does today).

    python3 scripts/check-docs-facts.py [ROOT]     # prints file:line: what is missing; exit 1 if any
    python3 scripts/check-docs-facts.py --self-test
"""
import glob
import os
import re
import subprocess
import sys
import tempfile

# Flags of other programs the docs show, never sluice's. Each must be named here on purpose;
# a flag both sluice and another tool have is sluice's in a sluice context and allowed elsewhere.
OTHER_FLAGS = {
    # cargo / rustup / trunk (--version and --help are sluice's too)
    'release', 'example', 'locked', 'workspace', 'features', 'target', 'bin', 'offline',
    # envoy
    'mode', 'concurrency',
    # docker / docker compose / dockerd / debootstrap; pip (--no-deps --target)
    'build', 'no-deps', 'no-build', 'mount', 'storage-driver', 'iptables', 'ip6tables', 'bridge',
    'variant',
    # redis-server
    'port', 'bind', 'tls-port', 'tls-cluster', 'tls-replication', 'tls-auth-clients',
    # curl
    'max-time', 'path-as-is',
    # nm
    'defined-only', 'undefined-only',
    # our own scripts: tests/matrix/run.py, scripts/envoy-matrix-probe.py
    'write-readme', 'table-only', 'json', 'module', 'wasm',
}

DOC_GLOBS = ['README.md', 'docs/*.md']
SKIP_MARK = '<!-- check-docs-facts: skip'
PROM_SUFFIXES = ('_total', '_bucket', '_sum', '_count', '_created')


def read(path):
    with open(path, encoding='utf-8') as f:
        return f.read()


def rust_files(root):
    out = []
    for d, _, names in os.walk(os.path.join(root, 'backend', 'src')):
        out += [os.path.join(d, n) for n in names if n.endswith('.rs')]
    return sorted(out)


def without_tests(path, text):
    """The file's text outside its test code (a tests.rs, or from `#[cfg(test)]` on)."""
    if os.path.basename(path) in ('tests.rs', 'test_support.rs'):
        return ''
    cut = text.find('#[cfg(test)]')
    return text if cut < 0 else text[:cut]


def attr_blocks(text, start):
    """The text of the attribute opened at `start` (`#[arg(`), to its closing `)]`."""
    depth, i = 0, text.index('(', start)
    in_str = False
    while i < len(text):
        c = text[i]
        if in_str:
            if c == '\\':
                i += 1
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
        elif c == '(':
            depth += 1
        elif c == ')':
            depth -= 1
            if depth == 0:
                return text[start:i + 1], i + 1
        i += 1
    return text[start:], len(text)


def sluice_flags(root, hidden=None):
    """Every long flag (and alias) clap gives the sluice binary, from backend/src; the hidden
    ones (`hide = true`: envoyproxy/ratelimit's variables under their own names) also go into
    `hidden` when given."""
    flags = {'help', 'version'}
    field = re.compile(r'\s*(?:(?:#\[[^\n]*\]|///[^\n]*|//[^\n]*)\s*)*(?:pub(?:\([^)]*\))?\s+)?([a-z_][a-z0-9_]*)\s*:')
    for path in rust_files(root):
        text = without_tests(path, read(path))
        for m in re.finditer(r'#\[(?:arg|clap)\(', text):
            attr, end = attr_blocks(text, m.start())
            end += text[end:end + 1] == ']'
            if not re.search(r'\blong\b', attr):
                continue
            named = re.search(r'\blong\s*=\s*"([^"]+)"', attr)
            f = field.match(text, end)
            name = named.group(1) if named else f.group(1).replace('_', '-') if f else None
            if name:
                flags.add(name)
                if hidden is not None and re.search(r'\bhide\s*=\s*true', attr):
                    hidden.add(name)
            for a in re.finditer(r'\b(?:visible_)?alias\s*=\s*"([^"]+)"', attr):
                flags.add(a.group(1))
            for a in re.finditer(r'\b(?:visible_)?aliases\s*=\s*\[([^\]]*)\]', attr):
                flags.update(re.findall(r'"([^"]+)"', a.group(1)))
    return flags


def sluice_metrics(root):
    """Every "sluice_..." string literal of backend/src outside test code (the metrics' names
    among them: registered with prometheus-client, which adds _total to counters)."""
    names = set()
    for path in rust_files(root):
        names.update(re.findall(r'"(sluice_[a-z0-9_]+)"', without_tests(path, read(path))))
    return names


def repo_files(root):
    """Tracked and untracked-not-ignored files (git), else every file under root."""
    r = subprocess.run(['git', 'ls-files', '-co', '--exclude-standard'], cwd=root,
                       capture_output=True, text=True)
    if r.returncode == 0:
        return [f for f in r.stdout.splitlines() if os.path.exists(os.path.join(root, f))]
    out = []
    for d, dirs, names in os.walk(root):
        dirs[:] = [x for x in dirs if x not in ('.git', 'target', 'node_modules', '.venv')]
        out += [os.path.relpath(os.path.join(d, n), root) for n in names]
    return out


def ignored(root, paths):
    """The paths git ignores (build outputs), of those given."""
    if not paths:
        return set()
    asked = [x for p in paths for x in (p, p + '/')]  # a directory's pattern (/dist/) needs the /
    r = subprocess.run(['git', 'check-ignore', '--no-index', '--stdin'], cwd=root, input='\n'.join(asked),
                       capture_output=True, text=True)
    return {p.rstrip('/') for p in r.stdout.splitlines()} if r.returncode in (0, 1) else set()


def code_segments(lines):
    """Per line: the code on it (inline spans; the whole line in a fenced or indented block)."""
    out, fence, prev_blank, prev_code, span_open = [], False, True, False, False
    for line in lines:
        s = line.rstrip('\n')
        if s.lstrip().startswith('```'):
            fence = not fence
            out.append([])
            prev_blank, prev_code, span_open = False, False, False
            continue
        indented = s.startswith('    ') and (prev_blank or prev_code) and not s.lstrip().startswith(('-', '*', '|'))
        if fence or (indented and s.strip()):
            out.append([s])
            prev_code = True
        else:
            # Inline spans; one left open at the end of a line goes on to the next (a span
            # wrapped in a paragraph), its part on each line counted there.
            parts = s.split('`')
            out.append([x for i, x in enumerate(parts) if (i % 2 == 1) != span_open and x])
            if len(parts) % 2 == 0:
                span_open = not span_open
            prev_code = False
        prev_blank = not s.strip()
        if prev_blank:
            span_open = False
    return out


FLAG = re.compile(r'(?<![\w-])--([a-z][a-z0-9-]*)')
SLUICE_CMD = re.compile(r'(?:^|[\s/(])sluice(?=\s)')
WORD = re.compile(r'(?<![\w/.-])sluice_[a-z0-9_]+\*?(?![\w])')


def check(root):
    faults = []
    hidden = set()
    flags = sluice_flags(root, hidden)
    metrics = sluice_metrics(root)
    files = repo_files(root)
    file_set = set(files)
    dir_set = {os.path.dirname(f) for f in files}
    for f in list(dir_set):
        while f:
            f = os.path.dirname(f)
            dir_set.add(f)
    top = {f.split('/')[0] for f in files if '/' in f}
    top_files = {f for f in files if '/' not in f}
    docs = sorted({p for g in DOC_GLOBS for p in glob.glob(os.path.join(root, g))})
    doc_rel = {os.path.relpath(p, root) for p in docs}
    words = set()
    for f in files:
        if f in doc_rel or not os.path.isfile(os.path.join(root, f)):
            continue
        try:
            words.update(re.findall(r'sluice_[a-z0-9_]+', read(os.path.join(root, f))))
        except (UnicodeDecodeError, OSError):
            pass
    missing_paths = []  # (doc, line, path) to check against git's ignores at the end
    for p in docs:
        rel = os.path.relpath(p, root)
        lines = read(p).splitlines()
        if any(SKIP_MARK in l for l in lines[:10]):
            continue
        segments = code_segments(lines)
        for n, (line, segs) in enumerate(zip(lines, segments), 1):
            unbuilt = 'not built' in line
            # Flags.
            strict = set()
            for seg in segs:
                m = SLUICE_CMD.search(seg)
                if m:
                    strict.update(x.group(1) for x in FLAG.finditer(seg, m.end()))
            if rel == 'docs/backend.md' and re.match(r'\|\s*`--', line):
                cell = line.split('|')[1]
                strict.update(x.group(1) for x in FLAG.finditer(cell))
            for m in FLAG.finditer(line):
                name = m.group(1)
                if unbuilt:
                    continue
                if name.endswith('-'):
                    ok = any(x.startswith(name) for x in flags) or name[:-1] in OTHER_FLAGS
                elif name in strict:
                    ok = name in flags
                else:
                    ok = name in flags or name in OTHER_FLAGS
                if not ok:
                    where = 'backend/src/cli.rs (nor in OTHER_FLAGS of scripts/check-docs-facts.py)'
                    if name in strict:
                        where = 'backend/src/cli.rs (a sluice command or flags table names it)'
                    faults.append(f'{rel}:{n}: --{name} is not a flag of sluice in {where}')
                    strict.discard(name)
            # sluice_* names.
            if not unbuilt:
                for m in WORD.finditer(line):
                    w = m.group(0)
                    after = line[m.end():m.end() + 2]
                    if after == '::' or (after[:1] == '.' and after[1:2].isalpha()):
                        continue  # a Rust path (sluice_core::...) or a file name (x.wasm)
                    if w.endswith('*'):
                        if not any(x.startswith(w[:-1]) for x in metrics):
                            faults.append(f'{rel}:{n}: no metric {w} in backend/src')
                        continue
                    base = w
                    for s in PROM_SUFFIXES:
                        if w.endswith(s) and w[:-len(s)] in metrics:
                            base = w[:-len(s)]
                    if base in metrics:
                        continue
                    if w.endswith(PROM_SUFFIXES) or w.endswith(('_seconds', '_bytes', '_units')) or after[:1] == '{':
                        faults.append(f'{rel}:{n}: metric {w} is not registered in backend/src')
                    elif w not in words:
                        faults.append(f'{rel}:{n}: {w} is named nowhere in the repository outside the docs')
            # Paths.
            for seg in segs:
                for tok in re.split(r'[\s,;()\[\]"\'=]+', seg):
                    tok = tok.rstrip('.:').removeprefix('./')
                    tok = re.sub(r'(:\d+(-\d+)?)+$', '', tok).split('#')[0].split('::')[0]
                    tok = tok.rstrip('.:`')
                    if '/' not in tok and tok not in top_files:
                        continue
                    if tok.split('/')[0] not in top or '..' in tok:
                        if tok not in top_files:
                            continue
                    # <minor>, and a capital placeholder (X.rs, NAME) stand for any name.
                    pat = re.sub(r'<[^>]*>', '*', tok).rstrip('/')
                    pat = re.sub(r'(?<![^/])[A-Z][A-Z_]*(?=$|/|\.)', '*', pat)
                    if any(c in pat for c in '$…{}@|~<>'):
                        continue
                    if '*' in pat or '?' in pat:
                        if not glob.glob(os.path.join(root, pat), recursive=True):
                            missing_paths.append((rel, n, tok, pat))
                    elif pat not in file_set and pat not in dir_set:
                        missing_paths.append((rel, n, tok, pat))
    # The other way round: every flag the binary shows (not hidden) is named in docs/backend.md,
    # the reference of its flags (its table; a subcommand's flag anywhere on the page).
    backend_md = os.path.join(root, 'docs', 'backend.md')
    if os.path.exists(backend_md):
        named = {m.group(1) for m in FLAG.finditer(read(backend_md))}
        for name in sorted(flags - hidden - named - {'help', 'version'}):
            faults.append(f'docs/backend.md:1: --{name}, a flag of sluice (backend/src), is named nowhere on the page (its flags table)')
    ign = ignored(root, sorted({m[3] for m in missing_paths}))
    for rel, n, tok, pat in missing_paths:
        if pat in ign:
            continue
        faults.append(f'{rel}:{n}: no file or directory {tok} in the repository')
    return faults


def self_test():
    with tempfile.TemporaryDirectory() as d:
        def put(path, text):
            os.makedirs(os.path.dirname(os.path.join(d, path)) or d, exist_ok=True)
            with open(os.path.join(d, path), 'w', encoding='utf-8') as f:
                f.write(text)
        put('backend/src/cli.rs', '#[derive(Parser)]\npub struct Cli {\n    /// Where.\n'
            '    #[arg(long, env = "X", value_name = "ADDR")]\n    pub grpc_listen: String,\n'
            '    #[arg(\n        long = "old-name",\n        alias = "older")]\n    pub x: u8,\n'
            '    #[command(flatten)]\n    pub t: Tls,\n}\n')
        put('backend/src/tls/flags.rs', 'pub struct Tls {\n    #[arg(long, env = "Y")]\n'
            '    pub admin_tls_cert: Option<String>,\n'
            '    #[arg(long = "peer-x", env = "GRPC_X", hide = true)]\n    pub peer: bool,\n}\n')
        put('docs/backend.md', '| flag |\n|---|\n| `--grpc-listen ADDR` |\n| `--old-name N` (old: `--older`) |\n')
        put('backend/src/metrics.rs', 'r.register(\n    "sluice_decisions",\n    "help", c);\n'
            '#[cfg(test)]\nmod tests { const X: &str = "sluice_only_in_tests"; }\n')
        put('envoy/a.yaml', 'cluster: sluice_rls\n')
        put('scripts/x.sh', '')
        put('README.md', '\n'.join([
            'Run `sluice --grpc-listen 127.0.0.1:1 --old-name 1 --older 2`.',   # 1 ok
            'Run `sluice --gone` and `envoy --mode validate`.',                  # 2 --gone
            'Envoy `--concurrency 2`; `sluice --concurrency 2` is wrong.',       # 3 strict --concurrency
            '`sluice_decisions_total` and `sluice_decisions_total{action}`.',    # 4 ok
            '`sluice_gone_total`, `sluice_only_in_tests_total`.',                # 5 two faults
            'cluster `sluice_rls`, crate `sluice_core::x`, `sluice_nowhere`.',   # 6 sluice_nowhere
            'files `scripts/x.sh`, `scripts/y.sh:12`, `envoy/*.yaml`, `envoy/<n>.yml`.',  # 7 y.sh, <n>.yml
            'TLS: `--admin-tls-*`, `--admin-tls-`, `--grpc-tls-`.',              # 8 --grpc-tls-
            'proposed `--rlqs-apply-delay` and `sluice_x_total` (not built).',   # 9 ok
            '',
            '    sluice --admin-tls-cert c --nope',                              # 11 --nope
            '',
            'The gRPC listener (`sluice',                                        # 13
            '--grpc-listen ADDR --gone2`, `scripts/z.sh`).',                     # 14 --gone2, z.sh
            '',
        ]))
        subprocess.run(['git', 'init', '-q'], cwd=d, check=True)
        got = check(d)
        want = [
            'README.md:2: --gone',
            'README.md:3: --concurrency',
            'README.md:5: metric sluice_gone_total',
            'README.md:5: metric sluice_only_in_tests_total',
            'README.md:6: sluice_nowhere',
            'README.md:7: no file or directory scripts/y.sh',
            'README.md:7: no file or directory envoy/<n>.yml',
            'README.md:8: --grpc-tls-',
            'README.md:11: --nope',
            'README.md:14: --gone2',
            'README.md:14: no file or directory scripts/z.sh',
            'docs/backend.md:1: --admin-tls-cert',
        ]
        bad = [w for w in want if not any(g.startswith(w) for g in got)]
        extra = [g for g in got if not any(g.startswith(w) for w in want)]
        if bad or extra or len(got) != len(want):
            print('self-test FAILED\n  missing: %s\n  unexpected: %s\n  got: %s' % (bad, extra, got))
            return 1
        print(f'self-test passed ({len(want)} faults found as expected)')
        return 0


def main():
    if sys.argv[1:] == ['--self-test']:
        sys.exit(self_test())
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
    faults = check(os.path.abspath(root))
    for f in faults:
        print(f)
    if faults:
        print(f'check-docs-facts: {len(faults)} fact(s) the docs name do not exist in the code', file=sys.stderr)
        sys.exit(1)


if __name__ == '__main__':
    main()
