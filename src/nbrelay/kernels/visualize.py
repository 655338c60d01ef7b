"""Code nbrelay runs inside a Python kernel to visualise a value: a chart, a table or a graph.

The value is a cell's result (IPython's ``Out[n]`` for the cell's execution count) or an
expression. It is turned into table data (pandas DataFrame or Series, NumPy arrays, dicts, lists
of records, rows or numbers) and, for a chart or a graph, drawn with matplotlib's object API
(``matplotlib.figure.Figure``: no pyplot, so the notebook's own plotting state and backend are
left alone) into a PNG. A graph is a networkx graph or an adjacency mapping ``{node: [nodes]}``.

The snippet prints one ``introspect.MARKER`` line of JSON and deletes every name it made.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from nbrelay.kernels.introspect import MARKER

KINDS = ("auto", "chart", "table", "graph")
CHARTS = ("line", "bar", "scatter", "hist", "pie")

_BODY = r"""
def _nbrelay_visualize(n, kind, opts):
    import base64, io, math, numbers
    shell = get_ipython()
    if opts.get("expression"):
        try:
            value = eval(opts["expression"], shell.user_ns)
        except Exception as exc:
            return {"error": "expression", "detail": f"{type(exc).__name__}: {exc}"}
    else:
        results = shell.user_ns.get("Out", {})
        if n is None or n not in results:
            return {"error": "no_result"}
        value = results[n]

    def is_graph(v):
        return callable(getattr(v, "nodes", None)) and callable(getattr(v, "edges", None))

    def adjacency(v):
        if isinstance(v, dict) and v and all(isinstance(x, (list, tuple, set)) for x in v.values()):
            keys = set(map(str, v))
            if all(str(y) in keys for x in v.values() for y in x):
                return {str(k): [str(y) for y in x] for k, x in v.items()}
        return None

    def number(x):
        return isinstance(x, numbers.Number) and not isinstance(x, bool)

    def cell(x):
        if isinstance(x, float) and not math.isfinite(x):
            return None
        if number(x) or isinstance(x, (str, bool)) or x is None:
            return x.item() if hasattr(x, "item") else x
        return str(x)

    def table(v):
        try:
            import pandas as pd
        except ImportError:
            pd = None
        if pd is not None and isinstance(v, pd.Series):
            v = v.to_frame(name=v.name if v.name is not None else "value")
        if pd is not None and isinstance(v, pd.DataFrame):
            if not isinstance(v.index, pd.RangeIndex):
                v = v.reset_index()
            return [str(c) for c in v.columns], v.values.tolist()
        if hasattr(v, "tolist") and hasattr(v, "ndim"):
            if v.ndim == 1:
                return ["value"], [[x] for x in v.tolist()]
            if v.ndim == 2:
                return [f"col{i}" for i in range(v.shape[1])], v.tolist()
            return None
        if isinstance(v, dict):
            if v and all(isinstance(x, (list, tuple)) for x in v.values()):
                lengths = {len(x) for x in v.values()}
                if len(lengths) == 1:
                    return [str(k) for k in v], [list(r) for r in zip(*v.values())]
            return ["key", "value"], [[k, x] for k, x in v.items()]
        if isinstance(v, (list, tuple)) and v:
            if all(isinstance(r, dict) for r in v):
                cols = list(dict.fromkeys(str(k) for r in v for k in r))
                return cols, [[r.get(c) for c in cols] for r in v]
            if all(isinstance(r, (list, tuple)) for r in v):
                width = max(len(r) for r in v)
                return [f"col{i}" for i in range(width)], [list(r) + [None] * (width - len(r)) for r in v]
            return ["value"], [[x] for x in v]
        return None

    graph = value if is_graph(value) else None
    adj = adjacency(value) if graph is None else None
    found = table(value)
    if kind == "auto":
        if graph is not None or adj is not None:
            kind = "graph"
        elif found is not None and len(found[1]) >= 2 and any(
            all(number(r[i]) for r in found[1]) for i in range(len(found[0]))
        ):
            kind = "chart"
        else:
            kind = "table"
    if kind == "graph" and graph is None and adj is None:
        return {"error": "not_graph", "type": type(value).__name__}
    if kind in ("table", "chart") and found is None:
        return {"error": "not_tabular", "type": type(value).__name__}
    out = {"kind": kind, "type": type(value).__name__}
    if found is not None:
        cols, rows = found
        limit = int(opts.get("max_rows", 50))
        out["columns"] = cols
        out["rows"] = [[cell(x) for x in r] for r in rows[:limit]]
        out["total_rows"] = len(rows)
    if kind == "table":
        return out
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return {"error": "no_matplotlib"}
    fig = Figure(figsize=(float(opts.get("width", 7)), float(opts.get("height", 4.5))), dpi=100)
    ax = fig.subplots()
    if kind == "graph":
        if graph is not None:
            edges = [(str(a), str(b)) for a, b, *_ in graph.edges]
            nodes = [str(x) for x in graph.nodes]
        else:
            nodes = list(dict.fromkeys([*adj, *(y for x in adj.values() for y in x)]))
            edges = [(a, b) for a, x in adj.items() for b in x]
        place = {}
        for i, name in enumerate(nodes):
            angle = 2 * math.pi * i / max(len(nodes), 1)
            place[name] = (math.cos(angle), math.sin(angle))
        for a, b in edges:
            (x0, y0), (x1, y1) = place[a], place[b]
            ax.plot([x0, x1], [y0, y1], color="#888888", zorder=1)
        ax.scatter([place[x][0] for x in nodes], [place[x][1] for x in nodes], s=600, color="#4c72b0", zorder=2)
        for name in nodes:
            ax.annotate(name, place[name], ha="center", va="center", color="white", zorder=3)
        ax.set_axis_off()
        out.update(nodes=len(nodes), edges=len(edges))
    else:
        cols, rows = found
        numeric = [i for i in range(len(cols)) if all(number(r[i]) for r in rows)]
        x_name = opts.get("x")
        if x_name is not None and x_name not in cols:
            return {"error": "no_column", "column": x_name, "columns": cols}
        xi = cols.index(x_name) if x_name is not None else next((i for i in range(len(cols)) if i not in numeric), None)
        wanted = opts.get("y")
        wanted = [wanted] if isinstance(wanted, str) else wanted
        for name in wanted or []:
            if name not in cols:
                return {"error": "no_column", "column": name, "columns": cols}
        ys = [cols.index(c) for c in wanted] if wanted else [i for i in numeric if i != xi][:6]
        if not ys:
            return {"error": "no_numbers", "columns": cols}
        xs = [r[xi] for r in rows] if xi is not None else list(range(len(rows)))
        chart = opts.get("chart") or ("bar" if xi is not None and len(rows) <= 30 else "line")
        labels = [str(x) for x in xs]
        for k, yi in enumerate(ys):
            values = [r[yi] for r in rows]
            if chart == "bar":
                width = 0.8 / len(ys)
                ax.bar([i + k * width for i in range(len(values))], values, width=width, label=cols[yi])
                ax.set_xticks([i + width * (len(ys) - 1) / 2 for i in range(len(values))], labels, rotation=45 if len(rows) > 8 else 0)
            elif chart == "scatter":
                ax.scatter(xs, values, label=cols[yi])
            elif chart == "hist":
                ax.hist(values, bins=int(opts.get("bins", 20)), alpha=0.7, label=cols[yi])
            elif chart == "pie":
                ax.pie(values, labels=labels, autopct="%1.0f%%")
                break
            else:
                ax.plot(xs if xi is not None and all(number(x) for x in xs) else range(len(values)), values, label=cols[yi], marker="o" if len(values) <= 30 else None)
                if xi is not None and not all(number(x) for x in xs):
                    ax.set_xticks(range(len(values)), labels, rotation=45 if len(rows) > 8 else 0)
        if chart not in ("pie",):
            if xi is not None:
                ax.set_xlabel(cols[xi])
            if len(ys) > 1 or chart == "hist":
                ax.legend()
            elif chart != "hist":
                ax.set_ylabel(cols[ys[0]])
        out.update(chart=chart, x=cols[xi] if xi is not None else None, y=[cols[i] for i in ys])
    if opts.get("title"):
        ax.set_title(str(opts["title"]))
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    out["png"] = base64.b64encode(buf.getvalue()).decode("ascii")
    return out

try:
    print(_nbrelay_marker + _nbrelay_json.dumps(_nbrelay_visualize(_nbrelay_n, _nbrelay_kind, _nbrelay_opts), default=str), flush=True)
finally:
    [globals().pop(k) for k in [k for k in globals() if k.startswith("_nbrelay")]]
"""


def snippet(execution_count: int | None, kind: str, options: Mapping[str, Any]) -> str:
    """The code that visualises ``Out[execution_count]`` (or ``options['expression']``)."""
    head = (
        "import json as _nbrelay_json\n"
        f"_nbrelay_marker = {MARKER!r}\n"
        f"_nbrelay_n = {execution_count!r}\n"
        f"_nbrelay_kind = {kind!r}\n"
        f"_nbrelay_opts = _nbrelay_json.loads({json.dumps(dict(options))!r})\n"
    )
    return head + _BODY
