"""One benchmark row: a 1 s wrk warm-up, then DURATION s of measured load, and the CPU time each
named process spent during the measured run (from /proc/PID/stat; wrk's own from wait4), so a row
says not only how fast a path is but where its CPU went.

    measure.py NAME URL DURATION CONNECTIONS OUT_DIR label=PID ... [stats=ENVOY_ADMIN_URL ...]
               [header=NAME: VALUE]

Every request carries the header given (default `x-user: bench`, the sluice filter's and the RLS
rows' key; the quota filter's rows bucket by x-user-id).

Prints one line: NAME rps p50_ms p99_ms, then the CPU microseconds per request per label (in
order of first appearance; processes sharing a label are summed) and for wrk, then the total CPU
use in percent of one core, then the count of non-2xx/3xx answers, then the sluice filter's
callouts per 100 requests during the measured run (its Envoy stat sluice.callouts, summed over
the `stats=` admin URLs; `-` when none is given or no sluice filter served the row)."""

import os
import re
import subprocess
import sys
import urllib.request

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """utime + stime of every thread of PID, in seconds (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    # After the ")" that ends comm: field 3 is index 0, so utime (14) is 11 and stime (15) is 12.
    return (int(fields[11]) + int(fields[12])) / TICK


def wrk(args):
    """Runs wrk; returns (stdout, its CPU seconds)."""
    proc = subprocess.Popen(["wrk", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit(f"sluice bench: wrk failed: {out}")
    return out, usage.ru_utime + usage.ru_stime


def callouts(admins):
    """The filter's callouts so far (wasmcustom.sluice.callouts, or the dynamic-module build's
    dynamicmodulescustom.sluice.callouts), summed over Envoy admin URLs."""
    total = 0
    for admin in admins:
        with urllib.request.urlopen(f"{admin}/stats?filter=custom.sluice.callouts", timeout=5) as r:
            for line in r.read().decode().splitlines():
                name, _, value = line.partition(": ")
                if name.strip() in ("wasmcustom.sluice.callouts", "dynamicmodulescustom.sluice.callouts"):
                    total += int(value)
    return total


def ms(v, unit):
    return float(v) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def main():
    name, url, duration, connections, out_dir, *args = sys.argv[1:]
    admins = [a.split("=", 1)[1] for a in args if a.startswith("stats=")]
    header = next((a.split("=", 1)[1] for a in args if a.startswith("header=")), "x-user: bench")
    procs = [a for a in args if not a.startswith(("stats=", "header="))]
    pids = [(p.split("=", 1)[0], int(p.split("=", 1)[1])) for p in procs]
    labels = list(dict.fromkeys(label for label, _ in pids))
    common = ["-t1", f"-c{connections}", "-H", header, url]
    wrk(["-d1s", *common])
    calls_before = callouts(admins)
    before = [cpu_seconds(pid) for _, pid in pids]
    text, wrk_cpu = wrk([f"-d{duration}s", "--latency", *common])
    after = [cpu_seconds(pid) for _, pid in pids]
    calls = callouts(admins) - calls_before
    with open(os.path.join(out_dir, f"wrk-{name}.txt"), "w") as f:
        f.write(text)
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
    total = float(re.search(r"(\d+) requests in", text).group(1))
    pct = {p: ms(v, u) for p, v, u in re.findall(r"^\s+(50|99)%\s+([\d.]+)(us|ms|s)\s*$", text, re.M)}
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
    spent = [a - b for a, b in zip(after, before)]
    cpu = [sum(s for (label, _), s in zip(pids, spent) if label == want) for want in labels] + [wrk_cpu]
    per_req = [c / total * 1e6 if total else 0.0 for c in cpu]
    busy = sum(cpu) / float(duration) * 100
    cols = " ".join(f"{v:.0f}" for v in per_req)
    # "-": no sluice filter callout in the row (no filter, cached denials, Envoy's own ratelimit filter).
    per_100 = f"{calls / total * 100:.2f}" if admins and total and calls else "-"
    print(f"{name} {rps:.0f} {pct['50']:.3f} {pct['99']:.3f} {cols} {busy:.0f} {non2xx.group(1) if non2xx else 0} "
          f"{per_100}")


if __name__ == "__main__":
    main()
