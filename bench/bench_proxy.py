#!/usr/bin/env python3
"""Benchmark the chtop egress proxy against a direct loopback baseline (and tinyproxy).

    python bench/bench_proxy.py [--mib 512] [--setups 3000] [--seconds 3]

Measures, for direct / chtop proxy / tinyproxy (if installed):
  * one-stream CONNECT tunnel throughput, MIB each way (upload, then download),
    with the CPU seconds per GiB each party spent (client, servers, proxy)
  * tunnel setup latency (median, p99) to the 200 and to a first echoed byte
  * 50 / 200 / 1000 concurrent tunnels echoing 64-byte messages: errors,
    round-trips/s, proxy peak RSS and CPU
  * denial latency (connect -> complete 403)
and prints each as a ratio to direct.  Not run by the tests.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import resource
import selectors
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CHUNK = 1 << 20
MSG = b"m" * 63 + b"\n"     # a line: a bare token as first bytes waits for a request line


# ---- the servers (one separate process) ----------------------------------------------
def _echo_loop(lsock):
    sel = selectors.DefaultSelector()
    lsock.setblocking(False)
    sel.register(lsock, selectors.EVENT_READ)
    while True:
        for key, _ in sel.select():
            s = key.fileobj
            if s is lsock:
                while True:
                    try:
                        c, _ = lsock.accept()
                    except BlockingIOError:
                        break
                    c.setblocking(False)
                    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    sel.register(c, selectors.EVENT_READ)
                continue
            try:
                data = s.recv(65536)
                if data:
                    s.sendall(data)         # small messages: never blocks in practice
                    continue
            except OSError:
                pass
            sel.unregister(s)
            s.close()


def _sink(conn):
    with conn:
        want = int.from_bytes(conn.recv(8, socket.MSG_WAITALL), "big")
        buf = bytearray(CHUNK)
        got = 0
        while got < want:
            n = conn.recv_into(buf)
            if not n:
                return
            got += n
        conn.sendall(b"k")


def _source(conn):
    with conn:
        want = int.from_bytes(conn.recv(8, socket.MSG_WAITALL), "big")
        block = b"s" * CHUNK
        sent = 0
        while sent < want:
            n = min(CHUNK, want - sent)
            conn.sendall(block[:n] if n < CHUNK else block)
            sent += n
        conn.shutdown(socket.SHUT_WR)
        conn.recv(1)


def _accept_loop(lsock, handler):
    while True:
        c, _ = lsock.accept()
        threading.Thread(target=handler, args=(c,), daemon=True).start()


def servers_main(ports_q):
    resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)
    socks = []
    for _ in range(3):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", 0))
        s.listen(4096)
        socks.append(s)
    threading.Thread(target=_accept_loop, args=(socks[1], _sink), daemon=True).start()
    threading.Thread(target=_accept_loop, args=(socks[2], _source), daemon=True).start()
    ports_q.put([s.getsockname()[1] for s in socks])
    _echo_loop(socks[0])


# ---- clients --------------------------------------------------------------------------
class Route:
    """How to reach a target port: directly, or through an HTTP CONNECT proxy."""

    def __init__(self, name, proxy_port=None, pid=None):
        self.name, self.proxy_port, self.pid = name, proxy_port, pid

    def open(self, port, timeout=30.0):
        """Connected socket to 127.0.0.1:port (tunnel established); times (t200)."""
        t0 = time.perf_counter()
        if self.proxy_port is None:
            s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return s, time.perf_counter() - t0
        s = socket.create_connection(("127.0.0.1", self.proxy_port), timeout=timeout)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = s.recv(4096)
            if not chunk:
                raise ConnectionError("proxy closed during CONNECT")
            buf += chunk
        if b" 200 " not in buf.split(b"\r\n", 1)[0]:
            raise ConnectionError(buf.split(b"\r\n", 1)[0].decode())
        return s, time.perf_counter() - t0


def throughput(route, ports, mib):
    total = mib * CHUNK
    s, _ = route.open(ports["sink"])
    s.sendall(total.to_bytes(8, "big"))
    block = b"u" * CHUNK
    t0 = time.perf_counter()
    for _ in range(mib):
        s.sendall(block)
    assert s.recv(1) == b"k"
    up = total / (time.perf_counter() - t0) / CHUNK
    s.close()
    s, _ = route.open(ports["source"])
    s.sendall(total.to_bytes(8, "big"))
    buf = bytearray(CHUNK)
    got = 0
    t0 = time.perf_counter()
    while got < total:
        n = s.recv_into(buf)
        if not n:
            break
        got += n
    down = got / (time.perf_counter() - t0) / CHUNK
    s.sendall(b"x")
    s.close()
    return up, down


def setup_latency(route, ports, n):
    to200, toecho = [], []
    for _ in range(n):
        t0 = time.perf_counter()
        s, t = route.open(ports["echo"])
        s.sendall(b"\x01")                 # not a bare token (that waits for a request line)
        s.recv(1)
        toecho.append(time.perf_counter() - t0)
        to200.append(t)
        s.close()
    return to200, toecho


def denial_latency(route, n):
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        s = socket.create_connection(("127.0.0.1", route.proxy_port))
        s.sendall(b"CONNECT denied.example.org:443 HTTP/1.1\r\n\r\n")
        buf = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            buf += chunk
        out.append(time.perf_counter() - t0)
        s.close()
        assert b" 403 " in buf[:20], buf[:60]
    return out


def proc_sample(pid):
    """(rss_bytes, cpu_seconds) of a process."""
    if pid is None:
        return 0, 0.0
    with open(f"/proc/{pid}/status") as fh:
        rss = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmRSS:"))
    return rss, sum(cpu_split(pid))


def cpu_split(pid):
    """(user, system) CPU seconds a process has used so far."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def stream_costs(route, ports, mib, server_pid):
    """throughput() plus who spent the CPU: seconds per GiB moved, and cores kept busy.

    The parties are this process (the client), the servers' process and the
    proxy.  If the cores busy are the same for direct and proxied streams, the
    throughput ratio is the ratio of their CPU costs per GiB.
    """
    parties = {"client": os.getpid(), "servers": server_pid, "proxy": route.pid}
    before = {k: cpu_split(pid) for k, pid in parties.items() if pid}
    t0 = time.perf_counter()
    up, down = throughput(route, ports, mib)
    wall = time.perf_counter() - t0
    gib = 2 * mib / 1024
    cost = {}
    for k, (user0, sys0) in before.items():
        user1, sys1 = cpu_split(parties[k])
        cost[k] = ((user1 - user0) / gib, (sys1 - sys0) / gib)
    busy = sum(sum(c) for c in cost.values()) * gib / wall
    return up, down, cost, busy


def concurrent(route, ports, nconn, seconds):
    socks, errors = [], 0
    for _ in range(nconn):
        try:
            socks.append(route.open(ports["echo"])[0])
        except OSError:
            errors += 1
    sel = selectors.DefaultSelector()
    for s in socks:
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
        s.send(MSG)
    peak_rss, cpu0 = proc_sample(route.pid)
    trips = 0
    t0 = time.perf_counter()
    next_sample = t0 + 0.2
    end = t0 + seconds
    pending = {s: 0 for s in socks}
    while True:
        now = time.perf_counter()
        if now >= end:
            break
        if now >= next_sample and route.pid:
            peak_rss = max(peak_rss, proc_sample(route.pid)[0])
            next_sample = now + 0.2
        for key, _ in sel.select(timeout=0.2):
            s = key.fileobj
            try:
                data = s.recv(65536)
            except OSError:
                data = b""
            if not data:
                errors += 1
                sel.unregister(s)
                continue
            pending[s] += len(data)
            while pending[s] >= len(MSG):
                pending[s] -= len(MSG)
                trips += 1
                try:
                    s.send(MSG)
                except OSError:
                    errors += 1
    wall = time.perf_counter() - t0
    rss, cpu1 = proc_sample(route.pid)
    for s in socks:
        s.close()
    return {"errors": errors, "rt_s": trips / wall, "rss_mib": max(peak_rss, rss) / 2**20,
            "cpu": (cpu1 - cpu0) / wall}


# ---- the proxies ---------------------------------------------------------------------
def start_chtop(tmp, ports: dict):
    from chtop_tasks.proxy import ensure_proxy
    from chtop_tasks.proxy.control import proxy_port
    group = Path(tmp) / "grp"
    policy = group / "sandbox"
    policy.mkdir(parents=True)
    # an entry allows 443 and 80 unless it names ports: the loopback servers'
    (policy / "net-allow.txt").write_text(f"127.0.0.1:{','.join(str(p) for p in ports.values())} private\n")
    (policy / "net-deny.txt").write_text("")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    os.environ["CHTOP_PROXY_PORT"] = str(sock.getsockname()[1])
    sock.close()
    ep = ensure_proxy(group, policy)
    return Route("chtop", proxy_port(group), ep.pid), group


def start_tinyproxy(tmp):
    exe = shutil.which("tinyproxy")
    if not exe:
        return None, None
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    (Path(tmp) / "tinyproxy.filter").write_text("denied\\.example\\.org\n")
    conf = Path(tmp) / "tinyproxy.conf"
    conf.write_text(f"Port {port}\nListen 127.0.0.1\nTimeout 600\nMaxClients 2048\n"
                    f"LogLevel Critical\nLogFile \"{tmp}/tinyproxy.log\"\nPidFile \"{tmp}/tinyproxy.pid\"\n"
                    f"Allow 127.0.0.1\nFilter \"{tmp}/tinyproxy.filter\"\nFilterType ere\n"
                    "FilterDefaultDeny No\n")
    proc = subprocess.Popen([exe, "-d", "-c", str(conf)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    return Route("tinyproxy", port, proc.pid), proc


def ms(v):
    return v * 1000


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=512, help="MiB each way for the one-stream test")
    ap.add_argument("--setups", type=int, default=3000, help="tunnel setups for the latency test")
    ap.add_argument("--seconds", type=float, default=3.0, help="duration of each concurrency run")
    ap.add_argument("--levels", default="50,200,1000", help="concurrency levels")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the best of each is shown")
    args = ap.parse_args()
    resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)
    q = mp.Queue()
    srv = mp.Process(target=servers_main, args=(q,), daemon=True)
    srv.start()
    echo, sink, source = q.get(timeout=10)
    ports = {"echo": echo, "sink": sink, "source": source}
    tmp = tempfile.mkdtemp(prefix="bench-proxy-")
    chtop, group = start_chtop(tmp, ports)
    tiny, tiny_proc = start_tinyproxy(tmp)
    routes = [Route("direct"), chtop] + ([tiny] if tiny else [])
    levels = [int(x) for x in args.levels.split(",")]
    res = {}
    med = statistics.median
    try:
        # Rounds interleave the routes, and each figure is the best round: on a
        # shared machine that is the figure least disturbed by other load.
        for rnd in range(args.rounds):
            for r in routes:
                print(f"== round {rnd + 1}/{args.rounds}: {r.name} ...", file=sys.stderr, flush=True)
                out = res.setdefault(r.name, {})
                up, down, cost, busy = stream_costs(r, ports, args.mib, srv.pid)
                if up + down > out.get("up", 0) + out.get("down", 0):
                    out["cost"], out["busy"] = cost, busy
                out["up"], out["down"] = max(out.get("up", 0), up), max(out.get("down", 0), down)
                t200, techo = setup_latency(r, ports, args.setups)
                if "t200" not in out or med(t200) < med(out["t200"]):
                    out["t200"], out["techo"] = t200, techo
                for n in levels:
                    c = concurrent(r, ports, n, args.seconds)
                    if n not in out or c["rt_s"] > out[n]["rt_s"]:
                        c["errors"] += out.get(n, {}).get("errors", 0)
                        out[n] = c
                    else:
                        out[n]["errors"] += c["errors"]
                if r.proxy_port:
                    deny = denial_latency(r, min(args.setups, 2000))
                    if "deny" not in out or med(deny) < med(out["deny"]):
                        out["deny"] = deny
                if r.pid:
                    out["rss_end"] = proc_sample(r.pid)[0] / 2**20
    finally:
        from chtop_tasks.proxy import stop_proxy
        stop_proxy(group)
        if tiny_proc:
            tiny_proc.terminate()
        srv.terminate()
    d = res["direct"]
    print(f"\nproxy benchmark ({os.cpu_count()} cpus, python {sys.version.split()[0]}, load "
          f"{os.getloadavg()[0]:.1f}); best of {args.rounds} rounds; ratios are proxy/direct; "
          f"errors summed over rounds")
    d_total = sum(sum(c) for c in d["cost"].values())
    for name in [r.name for r in routes]:
        x = res[name]
        print(f"\n[{name}]")
        print(f"  one stream up   {x['up']:9.0f} MiB/s   ratio {x['up'] / d['up']:.2f}")
        print(f"  one stream down {x['down']:9.0f} MiB/s   ratio {x['down'] / d['down']:.2f}")
        total = sum(sum(c) for c in x["cost"].values())
        print("  stream CPU/GiB  " + ", ".join(f"{k} {sum(c):.2f} s (user {c[0]:.2f})" for k, c in x["cost"].items())
              + f"; total {total:.2f} s, ratio {d_total / total:.2f}; cores busy {x['busy']:.2f}")
        for key, label in (("t200", "setup to 200    "), ("techo", "setup to echo   ")):
            med, p99 = statistics.median(x[key]), pct(x[key], 0.99)
            print(f"  {label}median {ms(med):.3f} ms (+{ms(med - statistics.median(d[key])):.3f})"
                  f"  p99 {ms(p99):.3f} ms (+{ms(p99 - pct(d[key], 0.99)):.3f})"
                  f"  ratio {med / statistics.median(d[key]):.2f}")
        for n in levels:
            c = x[n]
            print(f"  {n:5} tunnels    errors {c['errors']:4}  {c['rt_s']:9.0f} rt/s  ratio "
                  f"{c['rt_s'] / d[n]['rt_s']:.3f}" + (f"  rss {c['rss_mib']:.1f} MiB  cpu {c['cpu'] * 100:.0f}%"
                                                      if name != "direct" else ""))
        if "deny" in x:
            med = statistics.median(x["deny"])
            print(f"  denial          median {ms(med):.3f} ms  p99 {ms(pct(x['deny'], 0.99)):.3f} ms"
                  f"  ratio to direct echo {med / statistics.median(d['techo']):.2f}")
        if "rss_end" in x:
            print(f"  rss at end      {x['rss_end']:.1f} MiB")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
