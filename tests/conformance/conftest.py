"""Fixtures for the conformance suite: a clean compiler cache around every test.

Markers: `aot_eager` and `inductor` select tests that need those backends
(`-m "not inductor"` leaves them out); `reference` is set on the whole run
when TENSORJIT_TEST_REFERENCE=torch. If tensorjit has no `compile` yet, every
conformance test is skipped rather than failed.
"""

import warnings

import pytest
import torch

from . import harness


def pytest_configure(config):
    config.addinivalue_line("markers", "aot_eager: needs the aot_eager backend")
    config.addinivalue_line("markers", "inductor: needs the inductor backend (C++ compiler on CPU)")


def pytest_collection_modifyitems(config, items):
    if harness.AVAILABLE:
        return
    skip = pytest.mark.skip(reason="tensorjit.compile does not exist yet")
    for item in items:
        if "conformance" in str(item.fspath):
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def clean_compiler_state():
    harness.reset()
    grad_enabled = torch.is_grad_enabled()
    limit = harness.set_cache_size_limit(8)
    with warnings.catch_warnings():
        yield
    harness.set_cache_size_limit(limit)
    torch.set_grad_enabled(grad_enabled)
    harness.reset()
