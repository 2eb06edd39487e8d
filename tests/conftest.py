"""Collection order: the tests marked `longest` run first, so that under `pytest -n 2` (make test) one worker starts
them at once while the other works through the rest, instead of one of them starting last and running alone."""

from __future__ import annotations


def pytest_collection_modifyitems(config, items) -> None:
    items.sort(key=lambda item: item.get_closest_marker("longest") is None)  # stable: the rest keep their order
