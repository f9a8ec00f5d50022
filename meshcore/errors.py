"""The exceptions meshplan raises on bad input; cli.py maps each to a one-line message and exit code."""

from __future__ import annotations


class MeshplanError(Exception):
    """Base class: the message is meant for the user, one line, naming the problem and what is allowed."""

    exit_code = 2


class SpecError(MeshplanError):
    """A model, hardware or job description is malformed or inconsistent."""


class InputError(MeshplanError):
    """A file or preset name could not be read as the input it should be."""


class LayoutError(MeshplanError):
    """A parallel layout breaks a divisibility or topology rule."""


class InfeasibleError(MeshplanError):
    """No layout fits: the message names the tightest resource and what would make it fit."""

    exit_code = 3


class UnsupportedModelError(MeshplanError):
    """A launcher has no definition of the plan's model, so no other layout would help: the message names the
    model, what differs from the nearest model the launcher builds, and the models it builds."""
