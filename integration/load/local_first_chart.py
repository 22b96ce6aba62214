#!/usr/bin/env python3
"""The local-first accuracy chart (docs/local-first-accuracy.svg) from the
output of the local-first tests:

    cargo test -p ratelimit --test integration local_first:: -- --nocapture \
        | python3 integration/load/local_first_chart.py > docs/local-first-accuracy.svg

Reads the lines "<store>: <pattern>: local-first admitted <n> (...),
synchronous <m>" and draws, per pattern, the admitted count of each store
and of the synchronous rule against the limit and the stated bound.
"""
import re
import sys

LIMIT, BOUND = 1000, 1009
line = re.compile(r"^(one Redis|the Cluster): (.+): local-first admitted (\d+) .*synchronous (\d+)")
rows = {}
stores = []
for text in sys.stdin:
    m = line.match(text.strip())
    if not m:
        continue
    store, pattern, local, sync = m.group(1), m.group(2), int(m.group(3)), int(m.group(4))
    if store not in stores:
        stores.append(store)
    rows.setdefault(pattern, {})[store] = local
    rows[pattern]["synchronous"] = sync
if not rows:
    sys.exit("no local-first accuracy lines in the input")

series = stores + ["synchronous"]
colours = {"one Redis": "#1f77b4", "the Cluster": "#ff7f0e", "synchronous": "#7f7f7f"}
width, height, left, top, bottom = 760, 360, 70, 40, 90
lo, hi = 940, 1020
plot_h = height - top - bottom
group_w = (width - left - 20) / len(rows)
bar_w = group_w / (len(series) + 1)


def y(v):
    return top + plot_h * (hi - v) / (hi - lo)


out = [
    f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
    'font-family="sans-serif" font-size="11">',
    f'<text x="{left}" y="20" font-size="13">Local-first windows, 3 instances, limit {LIMIT}, '
    f'sync_interval 50 ms: admitted a window (bound {BOUND})</text>',
]
for v in range(lo, hi + 1, 20):
    out.append(f'<line x1="{left}" x2="{width - 20}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#eee"/>')
    out.append(f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v}</text>')
for v, label, dash in [(LIMIT, "limit", "4 3"), (BOUND, "bound L + N·P", "")]:
    out.append(
        f'<line x1="{left}" x2="{width - 20}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#d62728" '
        f'stroke-dasharray="{dash}"/>'
    )
    out.append(f'<text x="{width - 22}" y="{y(v) - 3:.1f}" text-anchor="end" fill="#d62728">{label}</text>')
for g, (pattern, values) in enumerate(rows.items()):
    x0 = left + g * group_w + bar_w / 2
    for s, name in enumerate(series):
        v = values.get(name)
        if v is None:
            continue
        x = x0 + s * bar_w
        top_y = y(min(max(v, lo), hi))
        out.append(
            f'<rect x="{x:.1f}" y="{top_y:.1f}" width="{bar_w * 0.9:.1f}" '
            f'height="{top + plot_h - top_y:.1f}" fill="{colours[name]}"><title>{name}: {v}</title></rect>'
        )
    words = pattern.split(", ")
    for i, w in enumerate(words):
        out.append(
            f'<text x="{x0 + len(series) * bar_w / 2:.1f}" y="{top + plot_h + 16 + 13 * i}" '
            f'text-anchor="middle">{w}</text>'
        )
for s, name in enumerate(series):
    out.append(f'<rect x="{left + 150 * s}" y="{height - 22}" width="10" height="10" fill="{colours[name]}"/>')
    out.append(f'<text x="{left + 150 * s + 14}" y="{height - 13}">{name}</text>')
out.append("</svg>")
print("\n".join(out))
