"""Scripts that run *inside* a sandbox (stdlib only, no chtop imports).

- ``probe``: what a sandbox can see and reach (``inv demo``'s probe step).
- ``gpu_check``: a real GPU compute check (``nox -s gpu_smoke``).
"""
