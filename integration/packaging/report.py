"""How the packaging checks report: one `ok:` line per passed check, a
`FAILED:` line and exit 1 on the first failure, and the count of passed
checks written for check.sh to add up."""

import os
import sys

passed = 0


def ok(what):
    global passed
    passed += 1
    print(f"ok: {what}")


def fail(what):
    print(f"FAILED: {what}", file=sys.stderr)
    sys.exit(1)


def write_count(work, name):
    with open(os.path.join(work, name), "w") as f:
        f.write(str(passed))
