"""The API-route bench's client: fetch one streamed Messages response again and again (standard library only).

    python3 api_client.py MODE URL --kib N --times N [MODE URL ...]

MODE is ``direct`` (URL is the fake API's), ``route`` (URL is the credential route inside a sandbox:
origin form to 127.0.0.1:3128, the placeholder key) or ``proxy`` (URL is the fake's, sent through the
HTTP proxy at 127.0.0.1:3128 in absolute form, no credential added).  The modes take turns, one request
each; prints one JSON line: every request's seconds per mode.
"""

from __future__ import annotations

import argparse
import http.client
import json
import time
from urllib.parse import urlsplit

PLACEHOLDER = "chtop-placeholder-credential-held-by-the-proxy"
PROXY = ("127.0.0.1", 3128)


def fetch(mode: str, url: str, kib: int) -> float:
    """One streamed response read to its end; its seconds (status and size checked)."""
    parts = urlsplit(url)
    body = json.dumps({"model": "m", "stream": True, "bytes": kib * 1024, "messages": []})
    start = time.perf_counter()
    conn = http.client.HTTPConnection(*PROXY) if mode == "proxy" else http.client.HTTPConnection(parts.netloc)
    conn.request("POST", url if mode == "proxy" else parts.path, body=body,
                 headers={"Content-Type": "application/json", "x-api-key": PLACEHOLDER})
    resp = conn.getresponse()
    size = 0
    while chunk := resp.read1(65536):
        size += len(chunk)
    conn.close()
    took = time.perf_counter() - start
    if resp.status != 200 or size < kib * 1024 * 0.9:
        raise SystemExit(f"{mode}: status {resp.status}, {size} bytes")
    return took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("pairs", nargs="+")
    ap.add_argument("--kib", type=int, default=400)
    ap.add_argument("--times", type=int, default=20)
    args = ap.parse_args()
    modes = list(zip(args.pairs[::2], args.pairs[1::2], strict=True))
    for mode, url in modes:
        fetch(mode, url, args.kib)                      # a first one each, not counted
    times: dict[str, list[float]] = {mode: [] for mode, _ in modes}
    for _ in range(args.times):
        for mode, url in modes:
            times[mode].append(fetch(mode, url, args.kib))
    print("RESULT " + json.dumps(times), flush=True)


if __name__ == "__main__":
    main()
