"""The egress benchmarks' client: run on the host or inside a sandbox (standard library only).

    python3 egress_client.py ROUTE ECHO SINK SOURCE --mib N --setups N --conc N --seconds S
    python3 egress_client.py loop ROUTE ECHO --seconds S --go FILE [--heal FILE]

ROUTE is ``direct`` or ``HOST:PORT`` of an HTTP CONNECT proxy (127.0.0.1:3128
inside a sandbox).  Prints one JSON line: one-stream MiB/s each way, tunnel
setup medians, and the concurrent tunnels' errors and round trips/s; or, for
``loop``, READY, then (once FILE exists) new tunnels opened and errors in S
seconds, one CONNECT + echo + close after another.  With ``--heal FILE``
it then prints that RESULT and HEALING, and goes on with one such request
every ``HEAL_INTERVAL`` seconds until FILE (the time of the proxy's kill -9, written by the
bench) exists and a request begun after that time has been echoed: HEALED
with that request's end (the clock inside is the host's) and the failures.
"""

from __future__ import annotations

import json
import os
import resource
import socket
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_proxy import Route, concurrent, setup_latency, throughput  # noqa: E402


def route_for(text: str) -> Route:
    if text == "direct":
        return Route("direct")
    host, _, port = text.rpartition(":")
    return Route(text, int(port))


def measure(argv: list[str]) -> dict:
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("route")
    ap.add_argument("echo", type=int)
    ap.add_argument("sink", type=int)
    ap.add_argument("source", type=int)
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--setups", type=int, default=1000)
    ap.add_argument("--conc", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=2.0)
    a = ap.parse_args(argv)
    route = route_for(a.route)
    ports = {"echo": a.echo, "sink": a.sink, "source": a.source}
    up, down = throughput(route, ports, a.mib)
    t200, techo = setup_latency(route, ports, a.setups)
    conc = concurrent(route, ports, a.conc, a.seconds)
    return {"up": up, "down": down, "t200_ms": statistics.median(t200) * 1000,
            "techo_ms": statistics.median(techo) * 1000, "conc": a.conc, "conc_errors": conc["errors"],
            "conc_rt_s": conc["rt_s"]}


def loop(argv: list[str]) -> dict:
    route, echo = route_for(argv[0]), int(argv[1])
    seconds = float(argv[argv.index("--seconds") + 1])
    go = argv[argv.index("--go") + 1]
    print("READY", flush=True)
    while not os.path.exists(go):
        time.sleep(0.05)
    opened = errors = 0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        if echoed(route, echo, timeout=10):
            opened += 1
        else:
            errors += 1
    return {"opened": opened, "errors": errors, "seconds": seconds}


def echoed(route: Route, echo: int, timeout: float) -> bool:
    """One CONNECT + echo + close: did the byte come back?  (One byte, not a bare token: that
    waits for a request line.)"""
    try:
        s, _ = route.open(echo, timeout=timeout)
        with s:
            s.sendall(b"\x01")
            return s.recv(1) == b"\x01"
    except OSError:
        return False


HEAL_INTERVAL = 0.05   # seconds from one request's start to the next while healing


def heal(route: Route, echo: int, killed: str, give_up: float = 60.0) -> dict:
    """Requests every ``HEAL_INTERVAL`` seconds until one begun after the kill written in ``killed`` is echoed."""
    print("HEALING", flush=True)
    failures, end = 0, time.time() + give_up
    while time.time() < end:
        began = time.time()
        ok = echoed(route, echo, timeout=15)      # one made in the gap waits in the listener's backlog
        done = time.time()
        failures += not ok
        try:
            with open(killed) as fh:
                kill_at = float(fh.read() or "inf")
        except (OSError, ValueError):
            kill_at = float("inf")
        if ok and began >= kill_at:
            return {"healed_at": done, "kill_at": kill_at, "failures": failures}
        time.sleep(max(0.0, HEAL_INTERVAL - (done - began)))
    return {"healed_at": None, "failures": failures}


def main() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    out = loop(sys.argv[2:]) if sys.argv[1] == "loop" else measure(sys.argv[1:])
    print("RESULT " + json.dumps(out), flush=True)
    if sys.argv[1] == "loop" and "--heal" in sys.argv:
        killed = sys.argv[sys.argv.index("--heal") + 1]
        print("HEALED " + json.dumps(heal(route_for(sys.argv[2]), int(sys.argv[3]), killed)), flush=True)
    return 0


if __name__ == "__main__":
    socket.setdefaulttimeout(30)
    sys.exit(main())
