#!/usr/bin/env python3
"""The plugin round trip of BENCHMARKS.md: N `localfile:index:File`
resources served by keel's test plugin (tests/python/plugins/localfile) or
by the simulated cloud, `keel up` on a new stack then a no-op `up`.

    PULUMI_PYTHON_CMD=<python with pulumi> \\
        benches/plugin_roundtrip.py target/release/keel 500 1000
"""

import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLUGIN = os.path.join(ROOT, "tests/python/plugins/localfile")


def program(n, data, mode):
    lines = ["name: files", "config:", f"  keel:providers: {mode}", "resources:"]
    for i in range(n):
        lines.append(
            f'  f{i}: {{ type: "localfile:index:File", properties: {{ path: "{data}/f{i}.txt", content: "c{i}" }} }}'
        )
    return "\n".join(lines) + "\n"


def timed(keel, cwd):
    start = time.monotonic()
    subprocess.run([keel, "up", "--yes", "--program", "prog.yaml"], cwd=cwd, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.monotonic() - start


def main():
    keel = os.path.abspath(sys.argv[1])
    for n in map(int, sys.argv[2:]):
        for mode in ("sim", "plugins"):
            with tempfile.TemporaryDirectory() as d:
                os.mkdir(os.path.join(d, "data"))
                with open(os.path.join(d, "Pulumi.yaml"), "w") as f:
                    f.write(f"name: files\nruntime: yaml\nplugins:\n  providers:\n"
                            f"    - name: localfile\n      path: {PLUGIN}\n")
                with open(os.path.join(d, "prog.yaml"), "w") as f:
                    f.write(program(n, os.path.join(d, "data"), mode))
                up, noop = timed(keel, d), timed(keel, d)
                print(f"N={n} {mode}: up {up:.3f} s, no-op {noop:.3f} s")


if __name__ == "__main__":
    main()
