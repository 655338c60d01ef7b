"""Code nbrelay runs inside Python kernels to look at (and save) their state, and its parsing.

Each snippet runs silently (no execution count, no history) and prints one line
``<MARKER>{json}``; ``parse`` finds that line in the outputs, so stray prints of the user's threads
cannot confuse it. Snippets touch only names starting with ``_nbrelay`` and delete them after.
"""

from __future__ import annotations

import ast
import inspect
import json
import posixpath
import textwrap
from collections.abc import Callable, Sequence
from typing import Any

from nbrelay import runtime
from nbrelay.errors import KernelError
from nbrelay.notebook.outputs import Output
from nbrelay.notebook.render import output_text

MARKER = "\x1dnbrelay:"

_PRELUDE = f"""
def _nbrelay_emit(value):
    import json as _j
    print({MARKER!r} + _j.dumps(value, default=str), flush=True)

def _nbrelay_user_names():
    _ns = get_ipython().user_ns
    _hidden = set(get_ipython().user_ns_hidden)
    for _k, _v in list(_ns.items()):
        if _k.startswith('_') or _k in _hidden or _k in ('In', 'Out', 'exit', 'quit', 'get_ipython'):
            continue
        yield _k, _v
"""

_CLEANUP = """
for _n in [n for n in globals() if n.startswith('_nbrelay')]:
    del globals()[_n]
"""


# How the state snippets (``save_state``, ``restore_state``) begin; their own lines follow,
# indented under ``else``.
_IMPORT_DILL = """
try:
    import dill as _nbrelay_dill
except ImportError:
    _nbrelay_emit({'no_dill': True})
else:"""


def _wrap(body: str) -> str:
    return _PRELUDE + "try:\n" + _indent(body) + "\nfinally:\n" + _indent(_CLEANUP)


def _indent(text: str) -> str:
    return "\n".join(
        "    " + line if line.strip() else line for line in text.strip("\n").split("\n")
    )


def list_variables(limit: int) -> str:
    body = f"""
import sys as _nbrelay_sys, types as _nbrelay_types
_nbrelay_rows = []
for _nbrelay_k, _nbrelay_v in _nbrelay_user_names():
    if isinstance(_nbrelay_v, (_nbrelay_types.ModuleType, type, _nbrelay_types.FunctionType, _nbrelay_types.BuiltinFunctionType)) and not callable(getattr(_nbrelay_v, 'shape', None)):
        _nbrelay_kind = 'module' if isinstance(_nbrelay_v, _nbrelay_types.ModuleType) else 'class' if isinstance(_nbrelay_v, type) else 'function'
    else:
        _nbrelay_kind = 'value'
    try:
        _nbrelay_r = repr(_nbrelay_v)
    except Exception as _nbrelay_e:
        _nbrelay_r = '<repr failed: %s>' % type(_nbrelay_e).__name__
    if len(_nbrelay_r) > 80:
        _nbrelay_r = _nbrelay_r[:77] + '...'
    _nbrelay_shape = getattr(_nbrelay_v, 'shape', None)
    try:
        _nbrelay_len = len(_nbrelay_v) if hasattr(_nbrelay_v, '__len__') and _nbrelay_kind == 'value' else None
    except Exception:
        _nbrelay_len = None
    _nbrelay_rows.append({{
        'name': _nbrelay_k, 'type': type(_nbrelay_v).__module__.replace('builtins', '') + ('.' if type(_nbrelay_v).__module__ != 'builtins' else '') + type(_nbrelay_v).__qualname__,
        'kind': _nbrelay_kind, 'value': _nbrelay_r,
        'size': (str(tuple(_nbrelay_shape)) if isinstance(_nbrelay_shape, tuple) else (f'len {{_nbrelay_len}}' if _nbrelay_len is not None else None)),
        'bytes': _nbrelay_sys.getsizeof(_nbrelay_v, None),
    }})
_nbrelay_emit({{'total': len(_nbrelay_rows), 'rows': _nbrelay_rows[:{int(limit)}]}})
"""
    return _wrap(body)


def inspect_variable(name: str, limit: int) -> str:
    body = f"""
_nbrelay_ns = get_ipython().user_ns
if {name!r} not in _nbrelay_ns:
    _nbrelay_emit({{'missing': True, 'names': sorted(k for k, _ in _nbrelay_user_names())[:50]}})
else:
    _nbrelay_v = _nbrelay_ns[{name!r}]
    _nbrelay_out = {{'type': type(_nbrelay_v).__module__ + '.' + type(_nbrelay_v).__qualname__}}
    for _nbrelay_attr in ('shape', 'dtype', 'dtypes', 'columns'):
        try:
            _nbrelay_a = getattr(_nbrelay_v, _nbrelay_attr, None)
            if _nbrelay_a is not None:
                _nbrelay_out[_nbrelay_attr] = str(list(_nbrelay_a) if _nbrelay_attr == 'columns' else _nbrelay_a)[:2000]
        except Exception:
            pass
    try:
        _nbrelay_out['len'] = len(_nbrelay_v)
    except Exception:
        pass
    try:
        _nbrelay_r = repr(_nbrelay_v)
    except Exception as _nbrelay_e:
        _nbrelay_r = '<repr failed: %r>' % _nbrelay_e
    _nbrelay_out['total_chars'] = len(_nbrelay_r)
    _nbrelay_out['repr'] = _nbrelay_r[:{int(limit)}]
    _nbrelay_doc = getattr(type(_nbrelay_v), '__doc__', None) if callable(_nbrelay_v) else None
    if _nbrelay_doc:
        _nbrelay_out['doc'] = str(_nbrelay_doc)[:500]
    _nbrelay_emit(_nbrelay_out)
"""
    return _wrap(body)


def python_environment() -> str:
    """The interpreter the kernel runs (``python``), its environment (``prefix``) and whether
    it can run pip (``pip``)."""
    body = """
import sys as _nbrelay_s, importlib.util as _nbrelay_u
_nbrelay_emit({'python': _nbrelay_s.executable, 'prefix': _nbrelay_s.prefix,
               'pip': _nbrelay_u.find_spec('pip') is not None})
"""
    return _wrap(body)


def distributions() -> str:
    """Every distribution the kernel can import from, as ``{"dists": [[name, version], ...]}``
    (import caches refreshed first, so what was just installed is seen)."""
    body = """
import importlib as _nbrelay_il
_nbrelay_il.invalidate_caches()
try:
    import importlib.metadata as _nbrelay_md
    _nbrelay_found = [[_nbrelay_d.metadata['Name'], _nbrelay_d.version]
                      for _nbrelay_d in _nbrelay_md.distributions()
                      if _nbrelay_d.metadata['Name']]
except ImportError:  # Python 3.7 (an old project's kernel): setuptools' view of the same
    import pkg_resources as _nbrelay_pr
    _nbrelay_found = [[_nbrelay_d.project_name, _nbrelay_d.version]
                      for _nbrelay_d in _nbrelay_pr.WorkingSet()]
_nbrelay_emit({'dists': _nbrelay_found})
"""
    return _wrap(body)


def _kernel_copy(function: Callable[..., object]) -> str:
    """The source of ``function`` (one that uses nothing but its arguments and ``os``) as a
    kernel runs it: without docstring and annotations (the kernel has not imported their types)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    for node in ast.walk(tree):
        if isinstance(node, ast.arg):
            node.annotation = None
        elif isinstance(node, ast.FunctionDef):
            node.returns = None
            if ast.get_docstring(node) is not None:
                node.body = node.body[1:]
    return ast.unparse(tree)


# State files are opened from "/" (a relative path: the kernel's folder) one folder at a time,
# never following a symlink (``target`` is a real path, so it has none), by the walk nbrelay's own
# files use (``runtime.descend``): a folder swapped for a symlink after nbrelay checked the path
# makes the save or restore fail instead of writing or reading outside the root. Only the last
# folder (.nbrelay-state, or --session-dir, whose parents nbrelay makes) is made if missing.
_FOLDER_AT = f"""
def _nbrelay_folder(path, create):
    import os
{textwrap.indent(_kernel_copy(runtime.descend), "    ")}
    def open_child(fd, name, make=False):
        if make:
            try:
                os.mkdir(name, dir_fd=fd)
            except FileExistsError:
                pass
        return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
    parts = [p for p in path.split('/') if p]
    fd = descend(os.open('/' if path.startswith('/') else '.', os.O_RDONLY | os.O_DIRECTORY), parts[:-1], open_child)
    return descend(fd, parts[-1:], lambda fd, name: open_child(fd, name, create))
"""


def save_state(target: str) -> str:
    """Save the user's variables with dill into ``target`` (a real path: see ``_FOLDER_AT``),
    written beside it and renamed over it, mode 0600."""
    folder, name = posixpath.split(target)
    body = (
        _FOLDER_AT
        + _IMPORT_DILL
        + f"""
    import types as _nbrelay_types, os as _nbrelay_os
    _nbrelay_saved, _nbrelay_skipped, _nbrelay_modules = {{}}, {{}}, {{}}
    for _nbrelay_k, _nbrelay_v in _nbrelay_user_names():
        if isinstance(_nbrelay_v, _nbrelay_types.ModuleType):
            _nbrelay_modules[_nbrelay_k] = _nbrelay_v.__name__
            continue
        try:
            _nbrelay_saved[_nbrelay_k] = _nbrelay_dill.dumps(_nbrelay_v)
        except Exception as _nbrelay_e:
            _nbrelay_skipped[_nbrelay_k] = type(_nbrelay_e).__name__ + ': ' + str(_nbrelay_e)[:120]
    _nbrelay_dir = _nbrelay_folder({folder!r}, True)
    try:
        _nbrelay_tmp = {name!r} + '.partial'
        try:
            _nbrelay_os.unlink(_nbrelay_tmp, dir_fd=_nbrelay_dir)
        except FileNotFoundError:
            pass
        _nbrelay_fd = _nbrelay_os.open(_nbrelay_tmp, _nbrelay_os.O_WRONLY | _nbrelay_os.O_CREAT | _nbrelay_os.O_EXCL | _nbrelay_os.O_NOFOLLOW, 0o600, dir_fd=_nbrelay_dir)
        with _nbrelay_os.fdopen(_nbrelay_fd, 'wb') as _nbrelay_f:
            _nbrelay_dill.dump({{'format': 1, 'values': _nbrelay_saved, 'modules': _nbrelay_modules}}, _nbrelay_f)
        _nbrelay_os.replace(_nbrelay_tmp, {name!r}, src_dir_fd=_nbrelay_dir, dst_dir_fd=_nbrelay_dir)
        _nbrelay_size = _nbrelay_os.stat({name!r}, dir_fd=_nbrelay_dir, follow_symlinks=False).st_size
    finally:
        _nbrelay_os.close(_nbrelay_dir)
    _nbrelay_emit({{'saved': sorted(_nbrelay_saved), 'modules': sorted(_nbrelay_modules), 'skipped': _nbrelay_skipped, 'bytes': _nbrelay_size}})
"""
    )
    return _wrap(body)


def state_exists(source: str) -> str:
    """Whether the kernel sees the state file ``source`` (relative to its own folder: a kernel
    of a Jupyter Server, whose files nbrelay cannot see), by the same walk as ``restore_state``."""
    folder, name = posixpath.split(source)
    body = f"""
import os as _nbrelay_os
try:
    _nbrelay_dir = _nbrelay_folder({folder!r}, False)
except OSError:
    _nbrelay_emit({{'exists': False}})
else:
    try:
        _nbrelay_os.stat({name!r}, dir_fd=_nbrelay_dir, follow_symlinks=False)
        _nbrelay_emit({{'exists': True}})
    except OSError:
        _nbrelay_emit({{'exists': False}})
    finally:
        _nbrelay_os.close(_nbrelay_dir)
"""
    return _wrap(_FOLDER_AT + body)


def restore_state(source: str, *, remove: bool = False) -> str:
    """Load the variables saved in ``source`` (a real path: see ``_FOLDER_AT``); ``remove``:
    then delete the file, in the kernel (a Jupyter Server's kernel, whose files nbrelay cannot
    see)."""
    folder, name = posixpath.split(source)
    unlink = f"\n        _nbrelay_os.unlink({name!r}, dir_fd=_nbrelay_dir)" if remove else ""
    body = (
        _FOLDER_AT
        + _IMPORT_DILL
        + f"""
    import importlib as _nbrelay_il, os as _nbrelay_os
    _nbrelay_dir = _nbrelay_folder({folder!r}, False)
    try:
        _nbrelay_fd = _nbrelay_os.open({name!r}, _nbrelay_os.O_RDONLY | _nbrelay_os.O_NOFOLLOW, dir_fd=_nbrelay_dir)
        with _nbrelay_os.fdopen(_nbrelay_fd, 'rb') as _nbrelay_f:
            _nbrelay_state = _nbrelay_dill.load(_nbrelay_f){unlink}
    finally:
        _nbrelay_os.close(_nbrelay_dir)
    _nbrelay_ns = get_ipython().user_ns
    _nbrelay_failed = {{}}
    for _nbrelay_k, _nbrelay_m in _nbrelay_state.get('modules', {{}}).items():
        try:
            _nbrelay_ns[_nbrelay_k] = _nbrelay_il.import_module(_nbrelay_m)
        except Exception as _nbrelay_e:
            _nbrelay_failed[_nbrelay_k] = type(_nbrelay_e).__name__ + ': ' + str(_nbrelay_e)[:120]
    for _nbrelay_k, _nbrelay_b in _nbrelay_state.get('values', {{}}).items():
        try:
            _nbrelay_ns[_nbrelay_k] = _nbrelay_dill.loads(_nbrelay_b)
        except Exception as _nbrelay_e:
            _nbrelay_failed[_nbrelay_k] = type(_nbrelay_e).__name__ + ': ' + str(_nbrelay_e)[:120]
    _nbrelay_emit({{'restored': sorted(k for k in list(_nbrelay_state.get('values', {{}})) + list(_nbrelay_state.get('modules', {{}})) if k not in _nbrelay_failed), 'failed': _nbrelay_failed}})
"""
    )
    return _wrap(body)


def parse(outputs: Sequence[Output], what: str) -> dict[str, Any]:
    """The JSON a snippet printed; ``KernelError`` naming ``what`` if it printed none."""
    for out in outputs:
        if out.get("output_type") != "stream":
            continue
        for line in str(out.get("text", "")).split("\n"):  # not splitlines: it splits at \x1d
            if line.startswith(MARKER):
                value = json.loads(line[len(MARKER) :])
                if isinstance(value, dict):
                    return value
    errors = [output_text(o).text for o in outputs if o.get("output_type") == "error"]
    detail = errors[-1].strip().splitlines()[-1] if errors and errors[-1].strip() else "no answer"
    raise KernelError(
        f"{what} failed in the kernel: {detail}.",
        hint="The kernel may be busy or its namespace unusual; try again after the running cell ends.",
    )
