#!/usr/bin/env python3
"""Make a peer's non-void functions that run off their end return a value.

Some peers' sources (MM-CSF) declare functions `int` and never return: undefined
behaviour that g++ -O3 turns into a crash (the call falls into whatever code follows).
Their results are unaffected by a `return {};` at the closing brace, so the peers script
feeds this the compiler's -Wreturn-type warnings and rebuilds. Nothing is committed: it
edits the fetched copy in place.

    compiler warnings on stdin → python3 peer_fix_returns.py SRC_DIR
"""
import re
import sys
from pathlib import Path

WARNING = re.compile(
    r"^(?P<file>[^:\s]+):(?P<line>\d+):(?P<col>\d+): warning: "
    r"(no return statement in function returning non-void|control reaches end of non-void function)"
)


def main() -> int:
    root = Path(sys.argv[1])
    spots: dict[Path, set[int]] = {}
    for text in sys.stdin:
        m = WARNING.match(text.strip())
        if m:
            spots.setdefault(root / Path(m["file"]).name, set()).add(int(m["line"]))
    patched = 0
    for path, lines in spots.items():
        src = path.read_text(errors="surrogateescape").split("\n")
        for n in sorted(lines):
            at = src[n - 1]
            brace = at.rfind("}")
            if brace < 0:
                print(f"peer_fix_returns: {path}:{n}: no closing brace here", file=sys.stderr)
                return 1
            src[n - 1] = at[:brace] + "return {}; " + at[brace:]
            patched += 1
        path.write_text("\n".join(src), errors="surrogateescape")
    print(f"peer_fix_returns: {patched} functions in {len(spots)} files now return")
    return 0


if __name__ == "__main__":
    sys.exit(main())
