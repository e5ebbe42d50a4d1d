"""One MindRecord file written by MindSpore's own C++ writer, without importing mindspore.

`import mindspore.mindrecord` runs mindspore/__init__.py first: 1.4-1.8 CPU-s of imports (the
runtime, ops, parallel) that writing a file never uses, paid by every process that writes shards
(most of the data command line's start-up, measured). The C++ extension beneath the writer,
`mindspore._c_mindrecord`, loads alone in ~15 ms. `CoreFile` makes the calls FileWriter(path,
shard_num=1, overwrite=True) makes on it, in the same order: the same header and page sizes, the
schema, each row's blob fields merged as FileWriter merges them ([8-byte big-endian length]
[bytes] per field, in schema order), commit, then the .db index. The files are byte-identical to
FileWriter's (tests/test_data_pipeline.py builds a dataset both ways and compares them).

The extension is registered under its own name, so a later `import mindspore` in the same process
(a run that prepares its data, then trains) finds it loaded and uses it as it is.
"""
import importlib.machinery
import importlib.util
import os
import stat
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Dict, List, Sequence

import numpy as np

# lazy imports (mindspore): by design; a data worker loads only the MindRecord extension (see above)

_NAME = "mindspore._c_mindrecord"


def core() -> ModuleType:
    """mindspore._c_mindrecord, loaded from its file unless mindspore itself is loaded already."""
    if _NAME in sys.modules:
        return sys.modules[_NAME]
    if "mindspore" not in sys.modules:
        spec = importlib.util.find_spec("mindspore")   # finds the package without running it
        for folder in (spec.submodule_search_locations or []) if spec else []:
            for suffix in importlib.machinery.EXTENSION_SUFFIXES:
                path = Path(folder) / f"_c_mindrecord{suffix}"
                if path.is_file():
                    ext = importlib.util.spec_from_file_location(_NAME, path)
                    module = importlib.util.module_from_spec(ext)
                    ext.loader.exec_module(module)
                    sys.modules[_NAME] = module
                    return module
    import mindspore._c_mindrecord as module
    return module


def _check(ok: bool, what: str, path: Path) -> None:
    if not ok:   # the C++ side logged why; a full disk raises from inside it (RuntimeError)
        raise RuntimeError(f"MindRecord {what} failed for {path}")


class CoreFile:
    """One MindRecord file (shard_num=1) of two or more ndarray fields (blobs, merged as above;
    FileWriter writes a lone field unmerged): `write` rows, then `commit`."""

    def __init__(self, path: Path, schema: Dict[str, Dict], desc: str, header_size: int,
                 page_size: int) -> None:
        if len(schema) < 2:
            raise ValueError(f"CoreFile writes two or more fields, not {list(schema)}")
        c = core()
        self.path, self._c = Path(path), c
        self._dtypes = [np.dtype(f["type"]) for f in schema.values()]
        header = c.ShardHeader()
        _check(header.add_schema(c.Schema.build(desc, schema)) != -1, "add_schema", self.path)
        self._writer = c.ShardWriter()
        self._done(self._writer.set_header_size(header_size), "set_header_size")
        self._done(self._writer.set_page_size(page_size), "set_page_size")
        self._done(self._writer.open([str(self.path)], False, True), "open")
        self._done(self._writer.set_shard_header(header), "set_shard_header")

    def _done(self, status: Any, what: str) -> None:
        _check(status == self._c.MSRStatus.SUCCESS, what, self.path)

    def write(self, rows: Sequence[Sequence[np.ndarray]]) -> None:
        """Rows of arrays, one per field in schema order, of the schema's dtypes: anything else
        is refused (FileWriter would drop such a row with a warning; the bytes would lie)."""
        for row in rows:
            if len(row) != len(self._dtypes) or any(a.dtype != d for a, d in zip(row, self._dtypes)):
                raise TypeError(f"{self.path}: a row of {[str(a.dtype) for a in row]}, the schema's fields "
                                f"are {[str(d) for d in self._dtypes]}")
        blobs: List[bytes] = [b"".join(len(b).to_bytes(8, "big") + b for b in map(np.ndarray.tobytes, row))
                              for row in rows]
        self._done(self._writer.write_raw_data({}, blobs, False, False), "write")

    def commit(self) -> None:
        """Flush the file, build its .db index, and leave both owner read/write (as FileWriter)."""
        self._done(self._writer.commit(), "commit")
        write_index(self.path)


def write_index(path: Path) -> None:
    """Build the .db index beside a committed MindRecord file (`<path>.db`, which must not exist yet),
    owner read/write as FileWriter leaves it. The index depends only on the file's bytes and name, so
    it is built again byte-identical from the file alone (rowcache.py repairs a damaged one so)."""
    c = core()
    index = c.ShardIndexGenerator(os.path.realpath(path), False)
    _check(index.build() == c.MSRStatus.SUCCESS, "index build", Path(path))
    _check(index.write_to_db() == c.MSRStatus.SUCCESS, "index write", Path(path))
    for f in (Path(path), Path(f"{path}.db")):
        if f.exists():
            os.chmod(f, stat.S_IRUSR | stat.S_IWUSR)
