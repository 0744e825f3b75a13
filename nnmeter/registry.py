"""A small explicit registry: a name → object map that fails helpfully.

Examples
--------
>>> reg = Registry("colours")
>>> @reg.register("red")
... def make_red():
...     return "red"
>>> reg.get("red")()
'red'
>>> sorted(reg.names())
['red']
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from nnmeter.errors import UnknownNameError

__all__ = ["Registry"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


class Registry(Generic[T]):
    """Map names to objects. Third parties may add entries via an entry-point group.

    Parameters
    ----------
    kind : str
        What the registry holds, used in error messages ("backends").
    entry_point_group : str, optional
        Entry-point group scanned once, lazily, the first time a name is missing.
    """

    def __init__(self, kind: str, *, entry_point_group: str | None = None) -> None:
        self.kind = kind
        self.entry_point_group = entry_point_group
        self._items: dict[str, T] = {}
        self._entry_points_loaded = False

    def register(self, name: str, obj: T | None = None) -> Callable[[T], T] | T:
        """Register ``obj`` under ``name``; usable as a decorator when ``obj`` is None.

        Raises
        ------
        ValueError
            If ``name`` is already registered to another object.
        """

        def _add(item: T) -> T:
            existing = self._items.get(name)
            if existing is not None and existing is not item:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._items[name] = item
            return item

        if obj is None:
            return _add
        return _add(obj)

    def _load_entry_points(self) -> None:
        if self._entry_points_loaded or not self.entry_point_group:
            return
        self._entry_points_loaded = True
        from importlib.metadata import entry_points

        for ep in entry_points(group=self.entry_point_group):
            if ep.name in self._items:
                continue
            try:
                self._items[ep.name] = ep.load()
            except Exception as err:  # a broken plugin must not break the registry
                logger.warning("could not load %s plugin %r: %s", self.kind, ep.name, err)

    def get(self, name: str) -> T:
        """Return the object registered as ``name``.

        Raises
        ------
        UnknownNameError
            If nothing is registered under ``name``; the message lists the names that exist.
        """
        if name not in self._items:
            self._load_entry_points()
        try:
            return self._items[name]
        except KeyError:
            known = ", ".join(sorted(self._items)) or "(none)"
            raise UnknownNameError(
                f"unknown {self.kind} {name!r}; known {self.kind}: {known}"
            ) from None

    def names(self) -> list[str]:
        """All registered names, sorted, including entry-point plugins."""
        self._load_entry_points()
        return sorted(self._items)

    def ordered(self) -> list[str]:
        """All registered names in the order they were registered (built-ins first,
        then entry-point plugins)."""
        self._load_entry_points()
        return list(self._items)

    def __contains__(self, name: object) -> bool:
        if name not in self._items:
            self._load_entry_points()
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())
