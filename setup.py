"""The one compiled part of gregor: the Spark source's record scanner.

Everything else is configured in pyproject.toml.  The extension is optional: where it
cannot be built (no C compiler), gregor.spark.record_scan falls back to pure Python.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "gregor.spark._record_scan",
            ["src/gregor/spark/_record_scan.c"],
            extra_compile_args=["-O3"],
            optional=True,
        )
    ]
)
