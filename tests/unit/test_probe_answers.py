"""The demo's sandbox probe says why the proxy answered what it did."""

from chtop_tasks.incontainer.probe import describe_answer


def test_an_allowed_domain_the_proxy_cannot_reach_says_so_with_the_proxys_reason():
    answer = ("HTTP/1.1 502 Bad Gateway\r\nX-Chtop-Proxy: allowed\r\nContent-Length: 80\r\n\r\n"
              "chtop egress proxy: cannot resolve api.anthropic.com: [Errno -2] Name or service not known\n")
    assert describe_answer(answer) == (
        "HTTP/1.1 502 Bad Gateway: allowed, but the proxy could not reach it from this machine "
        "(cannot resolve api.anthropic.com: [Errno -2] Name or service not known)")
    blocked = "HTTP/1.1 403 Forbidden\r\n\r\nchtop egress proxy: blocked github.com:443\n"
    assert describe_answer(blocked) == "HTTP/1.1 403 Forbidden"            # as the demo's test reads it
    assert describe_answer("HTTP/1.1 200 Connection established\r\n\r\n") == "HTTP/1.1 200 Connection established"
    assert describe_answer("") == "no answer"
