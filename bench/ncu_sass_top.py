#!/usr/bin/env python3
"""ncu_sass_top.py — the instructions where a kernel's warps were sampled
most, from `ncu -i REPORT --page source --print-source sass --csv`: each
instruction's share of the warp-state samples and the columns that break
the samples down by stall reason (whatever ncu's version names them), top N.
Usage: ncu_sass_top.py FILE.csv [N]"""
import csv
import sys


def num(s):
    try:
        return float(str(s).replace(",", ""))
    except ValueError:
        return 0.0


def main(path, top):
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]
    rows = [{k: v for k, v in r.items() if k is not None} for r in csv.DictReader(lines)]  # (rows longer than the header: extra fields dropped)
    if not rows:
        print("no rows in", path)
        return
    cols = list(rows[0].keys())
    total_col = next((c for c in cols if "Sampling" in c and "All" in c), None) or next((c for c in cols if "Sampl" in c), None)
    src_col = next((c for c in cols if c.strip() in ("Source", "SASS")), cols[1] if len(cols) > 1 else cols[0])
    addr_col = next((c for c in cols if "Address" in c), cols[0])
    if total_col is None:
        print("no sampling column; columns:", ", ".join(cols))
        return
    reason_cols = [c for c in cols if c.startswith("stall_") or ("Stall" in c and c != total_col and "Sampling" not in c)]
    total = sum(num(r[total_col]) for r in rows) or 1.0
    print(f"{len(rows)} instructions, {total:.0f} samples ({total_col})")
    for r in sorted(rows, key=lambda r: -num(r[total_col]))[:top]:
        reasons = sorted(((num(r[c]), c) for c in reason_cols if num(r[c]) > 0), reverse=True)[:4]
        why = " ".join(f"{c.replace('stall_', '')}={v:.0f}" for v, c in reasons)
        print(f"{r[addr_col]:>8} {100 * num(r[total_col]) / total:5.1f}% {r[src_col][:60]:<60} {why}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 40)
