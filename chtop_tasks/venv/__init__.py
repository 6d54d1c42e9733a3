"""Per-checkout venvs: ``<root>/.venv`` built from the manifest (``venv.build``).

May import: ``errors``, ``runner`` and ``workspace.manifest``.
"""
