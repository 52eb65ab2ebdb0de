#!/usr/bin/env python3
"""Checks the relative links of Markdown files: every [text](path), [text](path#anchor) and
[text](#anchor) must name a file that exists and, for an anchor, a heading of that file
(GitHub's anchor rule: lower case, punctuation dropped, spaces to hyphens).
Usage: check_links.py FILE.md...; exit 1 naming each broken link."""
import os
import re
import sys

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def anchors(path):
    found, seen, fence = set(), {}, False
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"):
            fence = not fence
        if fence or not line.startswith("#"):
            continue
        text = line.lstrip("#").strip()
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def main(files):
    bad = 0
    for md in files:
        fence = False
        for no, line in enumerate(open(md, encoding="utf-8"), 1):
            if line.startswith("```"):
                fence = not fence
            if fence:
                continue
            for target in LINK.findall(line):
                if re.match(r"[a-z]+:", target):
                    continue  # https:, mailto:
                path, _, anchor = target.partition("#")
                dest = os.path.normpath(os.path.join(os.path.dirname(md), path)) if path else md
                if not os.path.exists(dest):
                    print(f"{md}:{no}: {target}: no file {dest}")
                    bad += 1
                elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
                    print(f"{md}:{no}: {target}: no heading #{anchor} in {dest}")
                    bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
