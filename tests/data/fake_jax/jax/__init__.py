"""A stand-in for JAX's import, for the `memsnap run` tests (tests/intercept/test_run.sh) on a
machine without JAX or a GPU.

`import jax` is what memsnap's sitecustomize watches for; XLA_PYTHON_CLIENT_ALLOCATOR is what
JAX's GPU client reads when it starts ("default": its arena, a preallocation of 75% of the card
that it suballocates; "platform": a cuMemAlloc per array; "cuda_async": the driver's pool).
`allocator` says which this process would get.
"""
import os

__version__ = "0.0-fake"
allocator = os.environ.get("XLA_PYTHON_CLIENT_ALLOCATOR", "default")
