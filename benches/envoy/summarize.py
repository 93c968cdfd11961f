"""Prints the benchmark table from measure.py's rows (one line per path per round): for each path,
in the order given, the median over the rounds of requests/s, p50, p99 and CPU per request, with
the spread of requests/s, then the ratio of each sluice allowed path to no filter (medians).

    summarize.py ROWS_FILE PATH..."""

import statistics
import sys


def main():
    rows_file, *paths = sys.argv[1:]
    rows = [line.split() for line in open(rows_file) if line.strip()]
    print(f"{'':24} {'':>10} {'':>13} {'':>7} {'':>7} | {'CPU µs per request':<31} {'CPU':>6}")
    print(f"{'path':24} {'requests/s':>10} {'(min–max)':>13} {'p50 ms':>7} {'p99 ms':>7} | "
          f"{'envoy':>7} {'backend':>7} {'redis':>7} {'wrk':>7} {'use %':>6}")
    rps = {}
    for path in paths:
        mine = [r for r in rows if r[0] == path]
        if not mine:
            continue
        med = lambda i: statistics.median(float(r[i]) for r in mine)
        rps[path] = med(1)
        spread = f"{min(float(r[1]) for r in mine):.0f}–{max(float(r[1]) for r in mine):.0f}"
        cpu = " ".join(f"{med(i):7.0f}" for i in range(4, 8))
        print(f"{path:24} {med(1):10.0f} {spread:>13} {med(2):7.2f} {med(3):7.2f} | {cpu} {med(8):6.0f}")
        bad = max(int(r[9]) for r in mine)
        if bad and "denied" not in path and "denial" not in path:
            print(f"  ({path}: up to {bad} answers per round were not 2xx)")
    for path in ("sluice_allowed_memory", "sluice_allowed_redis"):
        if path in rps and rps.get("no_filter"):
            print(f"ratio {path} / no_filter: {rps[path] / rps['no_filter']:.2f}x")


if __name__ == "__main__":
    main()
