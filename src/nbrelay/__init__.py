"""nbrelay: an MCP server that lets agents read, edit and run Jupyter notebooks."""

__version__ = "0.1.0"


def _jupyter_server_extension_points() -> list[dict[str, object]]:
    """Jupyter Server's entry point: ``nbrelay`` is a server extension (``nbrelay.extension``,
    imported only by Jupyter Server, so that ``import nbrelay`` stays light)."""
    import importlib

    points: list[dict[str, object]] = importlib.import_module(
        "nbrelay.extension"
    )._jupyter_server_extension_points()
    return points
