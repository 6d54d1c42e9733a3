#!/bin/sh
# chtop sandbox image entrypoint: make sure $HOME exists (the image has no
# users' homes), then run the command chtop asked for.
set -eu
if [ -n "${HOME:-}" ] && [ ! -d "$HOME" ]; then
    mkdir -p "$HOME" 2>/dev/null || true
fi
exec "$@"
