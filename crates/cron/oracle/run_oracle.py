#!/usr/bin/env python3
"""Runs the oracle binary once per case (robfig's Next can loop forever on some DST
transitions, so each case gets a time limit) and prints the golden lines; a case that does not
finish is recorded as "HANG".

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
    except subprocess.TimeoutExpired:
        sys.stdout.write(line + "\tHANG\t\n")
    sys.stdout.flush()
