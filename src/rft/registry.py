"""Name -> function registries (verl's core_algos habit): an unknown name lists the valid ones,
and registering a name twice raises."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

F = TypeVar("F", bound=Callable)


class Registry(Generic[F]):
    def __init__(self, kind: str):
        self.kind = kind
        self._items: dict[str, F] = {}

    def register(self, *names: str) -> Callable[[F], F]:
        """Decorator registering a function under one or more names (aliases)."""

        def wrap(fn: F) -> F:
            for name in names:
                if name in self._items:
                    raise ValueError(f"{self.kind} {name!r} is registered twice")
                self._items[name] = fn
            return fn

        return wrap

    def get(self, name: str) -> F:
        try:
            return self._items[name]
        except KeyError:
            raise KeyError(f"unknown {self.kind} {name!r}; valid: {', '.join(sorted(self._items))}") from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
