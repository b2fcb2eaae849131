#!/usr/bin/env python3
"""ncu_summary.py — per-kernel totals from `ncu --csv --metrics
gpu__time_duration.sum,dram__bytes_read.sum`: time, share, DRAM bytes read
and the bandwidth each kernel reached. Usage: ncu_summary.py FILE.csv"""
import csv
import sys
from collections import defaultdict


def main(path):
    rows = []
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]
    for r in csv.DictReader(lines):
        rows.append(r)
    t = defaultdict(float)
    b = defaultdict(float)
    cnt = defaultdict(int)
    seen = set()
    for r in rows:
        name = r.get("Kernel Name", "?").split("(")[0].split("<")[0]
        key = (r.get("ID"), name)
        unit = r.get("Metric Unit", "")
        try:
            v = float(r.get("Metric Value", "0").replace(",", ""))
        except ValueError:
            continue
        m = r.get("Metric Name", "")
        if m == "gpu__time_duration.sum":
            scale = {"nsecond": 1e-9, "usecond": 1e-6, "msecond": 1e-3, "second": 1}.get(unit, 1e-9)
            t[name] += v * scale
            if key not in seen:
                cnt[name] += 1
                seen.add(key)
        elif m == "dram__bytes_read.sum":
            scale = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9}.get(unit, 1)
            b[name] += v * scale
    total = sum(t.values())
    if not total:
        print("no kernel timings in", path)
        return
    print(f"{'kernel':28s} {'launches':>8s} {'time us':>10s} {'share':>6s} {'MB read':>9s} {'GB/s':>7s}")
    for name in sorted(t, key=lambda k: -t[k]):
        bw = b[name] / t[name] / 1e9 if t[name] else 0
        print(f"{name[:28]:28s} {cnt[name]:8d} {t[name]*1e6:10.1f} {100*t[name]/total:5.1f}% {b[name]/1e6:9.1f} {bw:7.0f}")
    print(f"{'total':28s} {sum(cnt.values()):8d} {total*1e6:10.1f}        {sum(b.values())/1e6:9.1f} {sum(b.values())/total/1e9:7.0f}")


if __name__ == "__main__":
    main(sys.argv[1])
