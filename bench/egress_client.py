"""The egress benchmarks' client: run on the host or inside a sandbox (standard library only).

    python3 egress_client.py ROUTE ECHO SINK SOURCE --mib N --setups N --conc N --seconds S
    python3 egress_client.py loop ROUTE ECHO --seconds S --go FILE

ROUTE is ``direct`` or ``HOST:PORT`` of an HTTP CONNECT proxy (127.0.0.1:3128
inside a sandbox).  Prints one JSON line: one-stream MiB/s each way, tunnel
setup medians, and the concurrent tunnels' errors and round trips/s; or, for
``loop``, READY, then (once FILE exists) new tunnels opened and errors in S
seconds, one CONNECT + echo + close after another.
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
        try:
            s, _ = route.open(echo, timeout=10)
            s.sendall(b"\x01")              # not a bare token (that waits for a request line)
            if s.recv(1) != b"\x01":
                errors += 1
            s.close()
            opened += 1
        except OSError:
            errors += 1
    return {"opened": opened, "errors": errors, "seconds": seconds}


def main() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    out = loop(sys.argv[2:]) if sys.argv[1] == "loop" else measure(sys.argv[1:])
    print("RESULT " + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    socket.setdefaulttimeout(30)
    sys.exit(main())
