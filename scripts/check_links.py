#!/usr/bin/env python3
"""Checks every relative link of the repository's Markdown files: the file
it names exists, and a `#fragment` names a heading of that file (GitHub's
anchor rules). Also that the README, a landing page, has no line over
README_MAX characters outside code blocks. Prints each dead link or long
line and exits 1 if there is any."""
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
LINK = re.compile(r"\]\(([^)\s]+)\)")
README_MAX = 300


def anchors(path):
    """The anchors GitHub makes of a Markdown file's headings."""
    seen, out, fence = {}, set(), False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fence = not fence
        if fence or not line.startswith("#"):
            continue
        text = line.lstrip("#").strip().lower()
        slug = re.sub(r"[^\w\- ]", "", text).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def main():
    files = subprocess.run(
        ["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    dead, checked = [], 0
    for name in files:
        path = ROOT / name
        fence = False
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.startswith("```"):
                fence = not fence
            if fence:
                continue
            if name == "README.md" and len(line) > README_MAX:
                dead.append(f"{name}:{number}: a line of {len(line)} characters (at most {README_MAX})")
            for target in LINK.findall(line):
                if re.match(r"^[a-z]+:", target):
                    continue
                checked += 1
                file_part, _, fragment = target.partition("#")
                goal = (path.parent / file_part).resolve() if file_part else path
                if not goal.exists():
                    dead.append(f"{name}:{number}: {target}: no such file")
                elif fragment and goal.suffix == ".md" and fragment not in anchors(goal):
                    dead.append(f"{name}:{number}: {target}: no such heading")
    for d in dead:
        print(d)
    print(f"links: {checked - len(dead)} passed, {len(dead)} failed")
    return 1 if dead else 0


if __name__ == "__main__":
    sys.exit(main())
