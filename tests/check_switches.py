"""Every TGRAPH_* environment variable the code reads is in docs/switches.md, and every one the
table lists is still read (issue 23: the switches in one documented place). Run by ctest."""
import pathlib
import re
import sys

root = pathlib.Path(__file__).resolve().parent.parent
read = set()
reads = re.compile(r'(?:env_flag|env_value|getenv|environ\.get|environ\[)\(?\s*"(TGRAPH_[A-Z0-9_]+)"')
for base in ("src", "tools", "python"):
    for f in (root / base).rglob("*"):
        if f.suffix in (".cpp", ".h", ".cu", ".cuh", ".py"):
            read.update(reads.findall(f.read_text(errors="replace")))
table = set(re.findall(r"^\| `(TGRAPH_[A-Z0-9_]+)`", (root / "docs" / "switches.md").read_text(), re.M))
missing, stale = sorted(read - table), sorted(table - read)
if missing:
    print("read by the code but not in docs/switches.md:", ", ".join(missing))
if stale:
    print("in docs/switches.md but read nowhere:", ", ".join(stale))
per_exe = set(re.findall(r'"(TGRAPH_[A-Z0-9_]+)"', (root / "src" / "core" / "switches.cpp").read_text()))
if per_exe - table:
    print("settable per executable (src/core/switches.cpp) but not in docs/switches.md:", ", ".join(sorted(per_exe - table)))
    missing.append("switches.cpp")
if not read:
    print("found no switch reads at all: the pattern is broken")
sys.exit(1 if missing or stale or not read else 0)
