"""Fuzz targets over hostjob's hostile-input surfaces, and a runner (``python -m tests.fuzz``).

See ``tests/fuzz/README.md``.
"""
