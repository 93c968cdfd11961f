#!/usr/bin/env python3
"""Every relative link in the repo's Markdown points at a file that exists (and, for a link to a
Markdown heading, at a heading that exists, by GitHub's slug rule)."""
import os
import re
import subprocess
import sys

root = sys.argv[1] if len(sys.argv) > 1 else '.'
files = subprocess.run(['git', 'ls-files', '-co', '--exclude-standard', '*.md'], cwd=root,
                       capture_output=True, text=True).stdout.split()
LINK = re.compile(r'(?<!\!)\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)')
def slugs(path):
    out = set()
    in_code = False
    for line in open(path, encoding='utf-8'):
        if line.startswith('```'):
            in_code = not in_code
        if in_code: continue
        m = re.match(r'#+\s+(.*)', line)
        if m:
            t = m.group(1).strip().lower()
            t = re.sub(r'<!--.*?-->', '', t).strip()
            t = re.sub(r'[^\w\- ]', '', t)
            out.add(t.replace(' ', '-'))
    return out
bad = 0
for f in files:
    if f.startswith(('target/', 'node_modules/')) or '/node_modules/' in f: continue
    in_code = False
    for n, line in enumerate(open(os.path.join(root, f), encoding='utf-8'), 1):
        if line.lstrip().startswith('```'):
            in_code = not in_code
            continue
        if in_code: continue
        for target in LINK.findall(re.sub(r'`[^`]*`', '', line)):
            if re.match(r'[a-z]+:', target):  # an external link (https:, mailto:)
                continue
            path, _, anchor = target.partition('#')
            dest = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else f
            full = os.path.join(root, dest)
            if not os.path.exists(full):
                print(f'{f}:{n}: {target}: no such file {dest}'); bad += 1
            elif anchor and dest.endswith('.md') and anchor not in slugs(full):
                print(f'{f}:{n}: {target}: no heading #{anchor} in {dest}'); bad += 1
print(f'{len(files)} Markdown files, {bad} broken links')
sys.exit(1 if bad else 0)
