#!/usr/bin/env python3
"""Runs the oracle binary once per case (robfig's Next can loop forever on some DST
transitions, so each case gets a time limit) and prints the golden lines; a case that does not
finish is recorded as "HANG" followed by the times robfig returned before it stopped returning.

usage: run_oracle.py <oracle binary> < cases.tsv > golden.tsv
"""
import subprocess
import sys

binary = sys.argv[1]
for line in sys.stdin:
    line = line.rstrip("\n")
    if not line or line.startswith("#"):
        continue
    try:
        out = subprocess.run([binary], input=line + "\n", capture_output=True, text=True,
                             timeout=10, check=True).stdout
        sys.stdout.write(out)
    except subprocess.TimeoutExpired as e:
        # Keep the times printed before the Next call that never returned.
        partial = e.stdout or ""
        if isinstance(partial, bytes):
            partial = partial.decode()
        times = partial.rstrip("\n").split("\tOK\t", 1)[1].strip() if "\tOK\t" in partial else ""
        sys.stdout.write(f"{line}\tHANG\t{times}\n")
    sys.stdout.flush()
