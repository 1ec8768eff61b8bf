"""The `eager` backend: run the captured graph as it is (for testing capture)."""

from __future__ import annotations


def eager(gm, example_inputs):
    return gm.forward
