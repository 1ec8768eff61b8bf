"""list_options / list_mode_options: the names `compile(options=...)` and `mode=` accept."""

from __future__ import annotations

from typing import Any

from ..config import MODES, option_names


def list_options() -> list[str]:
    """Every option name `tensorjit.compile(options={...})` accepts."""
    return option_names()


def list_mode_options(mode: str | None = None, dynamic: bool | None = None) -> dict[str, Any]:
    """The options a mode sets, or every mode's options when mode is None (as torch._inductor's)."""
    if mode is None:
        return {name: dict(options) for name, options in MODES.items()}
    if mode not in MODES:
        raise RuntimeError(f"Unrecognized mode={mode}, should be one of: {', '.join(MODES)}")
    return dict(MODES[mode])
