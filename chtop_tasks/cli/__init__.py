"""chtop's entry points: the ``chtop`` command, chtop's ``inv`` and its light task path,
``chtop go``, the demo and the nox session bodies."""
