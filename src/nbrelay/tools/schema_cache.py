"""Tools' argument schemas, computed once and kept on disk, so that a server lists its tools
without building a pydantic model for each (most of the start-up nbrelay adds to the SDK's).

A tool's schema is what ``sdk.argument_schema(sdk.argument_model(fn))`` gives. It is kept in
``tool-schemas-<fingerprint>.json`` in nbrelay's private runtime folder (``nbrelay.runtime``: this user's,
checked before use), under a fingerprint of everything it depends on: nbrelay's own source
files (each one's path, size and modification time, as Python's bytecode cache judges a
source), the versions of Python, pydantic and pydantic-core, and the source of the SDK module
that builds the models; and, per tool, the function's module, name and signature (its
annotations as evaluated). Any of them changed, the schemas are built again and kept in
another file (files unused for a week are removed when one is written). The file unreadable,
damaged or the folder refused, schemas are built as before.

A call's arguments are always validated with the model itself (``validation.Arguments`` builds
it on the tool's first call), never with what this file says; ``tests/tools/test_schema_cache.py``
checks that listings from the file are the ones built live, byte for byte.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pydantic
import pydantic_core
from mcp.server.mcpserver.utilities import func_metadata
from pydantic import BaseModel

from nbrelay import runtime
from nbrelay.errors import NbrelayError
from nbrelay.tools import sdk

logger = logging.getLogger("nbrelay")

PREFIX = "tool-schemas-"
_FORMAT = "1"
_UNUSED = 7 * 24 * 3600.0  # seconds after which another fingerprint's file is removed


def _fingerprint() -> str:
    """What every schema in the file depends on (see the module docstring)."""
    digest = hashlib.blake2b(digest_size=16)
    for part in (_FORMAT, sys.version, pydantic.VERSION, pydantic_core.__version__):
        digest.update(part.encode() + b"\0")
    sources = [func_metadata.__file__ or ""]
    package = Path(__file__).resolve().parent.parent  # nbrelay
    for folder, subfolders, files in os.walk(package):
        subfolders[:] = sorted(f for f in subfolders if f != "__pycache__")
        sources += [os.path.join(folder, f) for f in sorted(files) if f.endswith(".py")]
    for source in sources:
        try:
            st = os.stat(source)
        except OSError:
            continue
        digest.update(f"{source}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return digest.hexdigest()


def key_of(fn: Callable[..., Any]) -> str:
    """A tool function's entry in the file: where it is defined and its signature."""
    return f"{fn.__module__}:{fn.__qualname__}{inspect.signature(fn)}"


class SchemaCache:
    """The schemas of the file, and those built since it was read (``save`` writes them)."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder  # None: nbrelay's runtime folder
        self._fingerprint: str | None = None
        self._schemas: dict[str, Any] | None = None
        self._new: dict[str, Any] = {}
        self.built = 0  # schemas built (and argument models with them) instead of read

    def schema_of(self, fn: Callable[..., Any]) -> tuple[dict[str, Any], type[BaseModel] | None]:
        """``fn``'s argument schema, and its argument model when it had to be built for it."""
        key = key_of(fn)
        found = self._read().get(key)
        if isinstance(found, dict):
            return json.loads(json.dumps(found)), None  # the caller's own, as if built
        model = sdk.argument_model(fn)
        schema = sdk.argument_schema(model)
        self.built += 1
        self._new[key] = schema
        return schema, model

    def save(self) -> None:
        """Write the schemas built since the file was read, with those it had (best effort)."""
        if not self._new:
            return
        schemas = {**self._read(), **self._new}
        data = json.dumps({"fingerprint": self._fingerprint, "schemas": schemas}).encode()
        name = self._name()
        try:
            with runtime.folder_fd(self.folder) as dir_fd:
                temp = f".{name}.{os.getpid()}.tmp"
                fd = runtime.open_file(dir_fd, temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, temp)
                try:
                    os.write(fd, data)
                finally:
                    os.close(fd)
                os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
                _remove_unused(dir_fd, keep=name)
        except (OSError, NbrelayError) as exc:
            logger.debug("tool schemas not kept: %s", exc)
            return
        self._schemas = schemas
        self._new = {}

    def _read(self) -> dict[str, Any]:
        if self._schemas is not None:
            return self._schemas
        self._fingerprint = _fingerprint()
        self._schemas = {}
        try:
            with runtime.folder_fd(self.folder) as dir_fd:
                fd = runtime.open_file(dir_fd, self._name(), os.O_RDONLY, self._name())
                with open(fd, "rb") as file:
                    data = json.loads(file.read())
        except FileNotFoundError:
            return self._schemas
        except (OSError, ValueError, NbrelayError) as exc:
            logger.debug("tool schemas not read: %s", exc)
            return self._schemas
        if isinstance(data, dict) and data.get("fingerprint") == self._fingerprint:
            schemas = data.get("schemas")
            if isinstance(schemas, dict):
                self._schemas = schemas
        return self._schemas

    def _name(self) -> str:
        return f"{PREFIX}{self._fingerprint}.json"


def _remove_unused(dir_fd: int, keep: str) -> None:
    """Remove the files of other fingerprints not used for ``_UNUSED`` seconds."""
    now = time.time()
    for name in os.listdir(dir_fd):
        if name.startswith(PREFIX) and name.endswith(".json") and name != keep:
            with contextlib.suppress(OSError):
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                if now - st.st_atime > _UNUSED and now - st.st_mtime > _UNUSED:
                    os.unlink(name, dir_fd=dir_fd)


# The process's cache: every server built in it reads the file once.
SCHEMAS = SchemaCache()
