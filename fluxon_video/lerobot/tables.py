"""Parquet tables as numpy columns (pyarrow, the ``lerobot`` extra).

LeRobot writes its rows, episodes and tasks as parquet; a column here is a
numpy array (a fixed-size list column: a 2-D array; an image column, Hugging
Face's ``struct<bytes, path>``, left in the file: its rows' numbers there,
image_store.py reads the images) or, for anything else (strings, nested
values), a Python list; JSON values
(Arrow's ``arrow.json``, as in LeRobot's language annotations) parsed, as
Hugging Face's ``datasets.Json`` gives them to LeRobot.
"""

from __future__ import annotations

import json
from typing import Any, BinaryIO

import numpy as np

from fluxon_video.errors import FluxonFsConfigError, FluxonFsDecodeError


def pyarrow() -> tuple[Any, Any]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:  # an optional dependency: say how to get it
        raise FluxonFsConfigError(
            "fluxon_video.lerobot reads parquet with pyarrow: "
            "pip install 'fluxon_video[lerobot]' (or pip install pyarrow)") from None
    return pa, pq


def read_parquet(source: bytes | BinaryIO, name: str, skip_prefix: str | None = None, *,
                 image_rows: bool = False) -> dict[str, Any]:
    """The columns of one parquet file (its bytes, or the file open for ranged
    reads: only the columns kept are read), by name, but those whose name
    starts with ``skip_prefix`` (LeRobot's per-episode statistics, never read
    here). ``image_rows``: an image column is not read; its values are the
    rows' numbers in the file (``ImageStore`` serves the images)."""
    pa, pq = pyarrow()
    try:
        parquet = pq.ParquetFile(pa.BufferReader(source) if isinstance(source, bytes) else source)
        schema = parquet.schema_arrow
        keep = [n for n in schema.names if not (skip_prefix and n.startswith(skip_prefix))]
        images = {n for n in keep if image_rows and is_image(pa, schema.field(n).type)}
        table = parquet.read(columns=[n for n in keep if n not in images], use_threads=False)
    except (pa.ArrowException, OSError) as exc:
        raise FluxonFsDecodeError(f"{name}: not a readable parquet file ({exc})") from exc
    rows = np.arange(parquet.metadata.num_rows, dtype=np.int64)
    return {field: rows if field in images else _column(table.column(field)) for field in keep}


def is_image(pa: Any, kind: Any) -> bool:
    """Hugging Face's image type: ``struct<bytes: binary, path: string>``."""
    return bool(pa.types.is_struct(kind) and kind.get_field_index("bytes") >= 0 and (
        pa.types.is_binary(kind.field("bytes").type)
        or pa.types.is_large_binary(kind.field("bytes").type)))


def _column(column: Any) -> Any:
    pa, _ = pyarrow()
    kind = column.type
    if pa.types.is_fixed_size_list(kind) and _numeric(pa, kind.value_type):
        flat = column.combine_chunks()
        return flat.flatten().to_numpy(zero_copy_only=False).reshape(len(flat), kind.list_size)
    if _numeric(pa, kind) and column.null_count == 0:
        return column.to_numpy()
    values = column.to_pylist()
    if _holds_json(pa, kind):
        return [_parse_json(pa, kind, v) for v in values]
    return values


def _is_list(pa: Any, kind: Any) -> bool:
    return bool(pa.types.is_list(kind) or pa.types.is_large_list(kind)
                or pa.types.is_fixed_size_list(kind))


def _holds_json(pa: Any, kind: Any) -> bool:
    if getattr(kind, "extension_name", None) == "arrow.json":
        return True
    if _is_list(pa, kind):
        return _holds_json(pa, kind.value_type)
    if pa.types.is_struct(kind):
        return any(_holds_json(pa, kind.field(i).type) for i in range(kind.num_fields))
    return False


def _parse_json(pa: Any, kind: Any, value: Any) -> Any:
    """``value`` (a Python value of Arrow type ``kind``) with its JSON texts parsed."""
    if value is None:
        return None
    if getattr(kind, "extension_name", None) == "arrow.json":
        return json.loads(value)
    if pa.types.is_struct(kind):
        return {field.name: _parse_json(pa, field.type, value[field.name])
                for field in (kind.field(i) for i in range(kind.num_fields))}
    if _is_list(pa, kind):
        return [_parse_json(pa, kind.value_type, v) for v in value]
    return value


def _numeric(pa: Any, kind: Any) -> bool:
    return pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)


def concat(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The columns of several files of one table, rows in file order."""
    if not parts:
        return {}
    names = list(parts[0])
    out: dict[str, Any] = {}
    for field in names:
        values = [part[field] for part in parts if field in part]
        if len(values) != len(parts):
            raise FluxonFsDecodeError(f"column {field!r} is missing from some of the table's files")
        if all(isinstance(v, np.ndarray) for v in values):
            out[field] = np.concatenate(values)
        else:
            out[field] = [x for v in values
                          for x in (v.tolist() if isinstance(v, np.ndarray) else v)]
    return out
