"""Old names kept for one release after a rename to torchcodec's vocabulary
(``pts_s`` -> ``pts_seconds``, ``start_s=`` -> ``start_seconds=``, ...):
they work and warn with a DeprecationWarning naming the new one."""

from __future__ import annotations

import warnings
from typing import Any


def _warn(owner: str, old: str, new: str) -> None:
    warnings.warn(f"{owner}.{old} is deprecated and goes in the next release: use {new}",
                  DeprecationWarning, stacklevel=3)


def renamed_attribute(owner: str, old: str, new: str) -> property:
    """A read-only attribute ``old`` that reads ``new`` and warns."""

    def read(self: Any) -> Any:
        _warn(owner, old, new)
        return getattr(self, new)

    return property(read, doc=f"Deprecated: {new}.")


def add_renamed_attributes(cls: type, renames: dict[str, str]) -> None:
    """Give ``cls`` the old names (``{old: new}``) as warning aliases."""
    for old, new in renames.items():
        setattr(cls, old, renamed_attribute(cls.__name__, old, new))


class _NotGiven:
    def __repr__(self) -> str:
        return "<not given>"


# The default of a parameter whose old name may be given instead (None is a
# value the method checks and refuses like any other bad one).
NOT_GIVEN: Any = _NotGiven()


def renamed_arguments(where: str, given: dict[str, Any], renames: dict[str, str],
                      values: dict[str, Any]) -> dict[str, Any]:
    """``values`` (the new parameters, NOT_GIVEN where not passed) completed from the
    old keyword arguments in ``given`` (``{old: new}`` in ``renames``), with a
    warning each; a TypeError for any other keyword, or an argument passed twice."""
    out = dict(values)
    for old, value in given.items():
        new = renames.get(old)
        if new is None:
            raise TypeError(f"{where}() got an unexpected keyword argument {old!r}")
        if out.get(new, NOT_GIVEN) is not NOT_GIVEN and out.get(new) is not None:
            raise TypeError(f"{where}() got {new!r} twice (as {new!r} and as {old!r})")
        _warn(where, f"{old}=", f"{new}=")
        out[new] = value
    missing = [name for name, value in out.items() if value is NOT_GIVEN]
    if missing:
        raise TypeError(f"{where}() missing required argument(s): {', '.join(missing)}")
    return out
