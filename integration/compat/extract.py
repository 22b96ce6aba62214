#!/usr/bin/env python3
"""Extract the recorded test vectors of the original service from the
compatibility document they were written down in (a Markdown file kept
outside this repository, given as the only argument).

Writes the document's fixture files to fixtures/ and its matching, load,
`replaces` and cache-key vectors to vectors/*.json. The output is committed,
so the tests never need the document; re-run this when it changes:

    python3 integration/compat/extract.py PATH/TO/SPEC.md
"""
import json
import os
import re
import sys

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))


def blocks(lines, start, end):
    """Yield (heading, text) of every ```yaml block between two line indexes."""
    heading = None
    i = start
    while i < end:
        line = lines[i]
        if line.startswith("#"):
            heading = line.strip()
        if line.strip() == "```yaml":
            j = i + 1
            while lines[j].strip() != "```":
                j += 1
            yield heading, "".join(lines[i + 1 : j])
            i = j
        i += 1


def section(lines, title):
    start = next(i for i, l in enumerate(lines) if l.startswith(title))
    end = next(
        (i for i in range(start + 1, len(lines)) if lines[i].startswith("### ")),
        len(lines),
    )
    return start, end


def main(path):
    with open(path, encoding="utf-8") as f:
        lines = f.readlines()

    s, e = section(lines, "### 9.1")
    for heading, text in blocks(lines, s, e):
        name = re.search(r"`([^`]+)`", heading).group(1)
        if name == "bad_yaml.yaml":
            text = "'''\n"  # the spec: exactly the four bytes ''' + newline
        with open(os.path.join(HERE, "fixtures", name), "w", encoding="utf-8") as f:
            f.write(text)

    for sec, out in [("### 9.2", "matching"), ("### 9.3", "load"), ("### 9.4", "replaces"), ("### 9.6", "cache_key")]:
        s, e = section(lines, sec)
        data = []
        for _, text in blocks(lines, s, e):
            data.extend(yaml.safe_load(text))
        with open(os.path.join(HERE, "vectors", out + ".json"), "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, ensure_ascii=False)
            f.write("\n")
        print(out, len(data))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: extract.py PATH/TO/SPEC.md")
    main(sys.argv[1])
