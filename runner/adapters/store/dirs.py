"""Directories kept with a plan's state (the agent's transcripts) as git trees: only files changed since they
were restored are read and stored, a big file is stored as blocks of whole lines cut where its content says (so
an appended log keeps its old blocks), every stored byte is cleared of the secrets given, and each directory is
bounded in size.

A changed file is cleared of the secrets whole, as one stream (`secrets.redact_file`: a secret straddling two of
its reads is found), before it is bounded or cut into blocks: neither a secret holding a newline (a PEM key), which
a block's cut or the bound's cut at a line end would split, nor one split between two blocks, leaves a part of
itself that no longer reads as the secret."""

from __future__ import annotations

import os
import zlib
from collections.abc import Sequence
from pathlib import Path

from runner.adapters.secrets import redact_file
from runner.adapters.store.objects import BLOB_MODE, CHUNK, TREE_MODE, GitObjects, blob_sha

DIR_LIMIT = 16 * 2**20  # bytes kept per directory (transcripts) per plan, in total
BLOCKED_FROM = 2**20  # a kept file bigger than this is stored as blocks (see `_blocks`)
BLOCK_AVG, BLOCK_MAX = 512 * 2**10, 4 * 2**20
BLOCKS_SUFFIX = ".plan-runner-blocks"

Shas = dict[str, tuple[str, frozenset[str] | None]]  # relative path -> (blob or tree-of-blocks sha, block shas)


def store_dir(objects: GitObjects, root: Path, redact: Sequence[bytes], restored: dict[str, tuple]) -> tuple[str, Shas]:
    """The tree of `root` (bounded to DIR_LIMIT), storing only what changed since it was restored (`restored`:
    the manifest `checkout_tree` made): a file whose size and mtime are as restored is not even read; any other
    is redacted whole first, then the directory bounded; a big file is stored as blocks, only its new ones stored."""
    if redact:
        for rel, path in walk(root):
            st, was = path.stat(), restored.get(rel)
            if was is None or was[0] != st.st_size or was[1] != st.st_mtime_ns:
                redact_file(path, redact)
    bound_dir(root)
    shas: Shas = {}
    nested: dict = {}
    for rel, path in walk(root):
        st = path.stat()
        was = restored.get(rel)
        if was is not None and was[0] == st.st_size and was[1] == st.st_mtime_ns:
            sha, blocks = was[2], was[3]  # unchanged since it was restored: neither read nor stored again
        elif st.st_size > BLOCKED_FROM:
            sha, blocks = _store_blocks(objects, path, was[3] if was is not None and was[3] else frozenset())
        else:
            sha, blocks = objects.store_file(path), None
        shas[rel] = (sha, blocks)
        node = nested
        *folders, leaf = rel.split("/")
        for folder in folders:
            node = node.setdefault(folder, {})
        node[leaf + BLOCKS_SUFFIX if blocks is not None else leaf] = (
            (TREE_MODE, sha) if blocks is not None else (BLOB_MODE, sha))
    return _write_nested(objects, nested), shas


def _write_nested(objects: GitObjects, node: dict) -> str:
    entries = {}
    for key, value in node.items():
        entries[key] = (TREE_MODE, _write_nested(objects, value)) if isinstance(value, dict) else value
    return objects.write_tree(entries)


def _store_blocks(objects: GitObjects, path: Path, known: frozenset[str]) -> tuple[str, frozenset[str]]:
    """`path` (redacted already, whole: `store_dir`) as a tree of blocks `000000`, `000001`, ...: a block
    restored from the state as it was is reused as is; any other block is stored unless git has it already."""
    entries: dict[str, tuple[int, str]] = {}
    for number, data in enumerate(_blocks(path)):
        sha = blob_sha(data)
        if sha not in known and not objects.has(sha):
            objects.store(b"blob", data)
        entries[f"{number:06d}"] = (BLOB_MODE, sha)
    blocks = frozenset(sha for _, sha in entries.values())
    return objects.write_tree(entries), blocks


def checkout_tree(objects: GitObjects, tree_sha: str, dest: Path, prefix: str, manifest: dict) -> None:
    """Write the tree into `dest`; `manifest` gets (size, mtime, sha, block shas) of every file written."""
    for entry_name, (mode, sha) in objects.tree(tree_sha).items():
        rel = f"{prefix}{entry_name}"
        if mode == TREE_MODE and entry_name.endswith(BLOCKS_SUFFIX):  # a big file, stored as blocks
            rel = rel[: -len(BLOCKS_SUFFIX)]
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            blocks = objects.tree(sha)
            with target.open("wb") as out:
                for number in sorted(blocks):
                    out.write(objects.get(blocks[number][1], b"blob") or b"")
            st = target.stat()
            manifest[rel] = (st.st_size, st.st_mtime_ns, sha, frozenset(b for _, b in blocks.values()))
        elif mode == TREE_MODE:
            (dest / rel).mkdir(parents=True, exist_ok=True)
            checkout_tree(objects, sha, dest, rel + "/", manifest)
        elif mode == BLOB_MODE:
            data = objects.get(sha, b"blob") or b""
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            st = target.stat()
            manifest[rel] = (st.st_size, st.st_mtime_ns, sha, None)


def walk(root: Path):
    """(relative posix path, path) of every regular file under `root`, in a stable order."""
    if not root.is_dir():
        return
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if path.is_symlink() or not path.is_file():
                continue
            yield path.relative_to(root).as_posix(), path


def scan(root: Path, shas: dict[str, tuple[str, frozenset[str] | None]]) -> dict[str, tuple]:
    manifest = {}
    for rel, path in walk(root):
        if rel in shas:
            st = path.stat()
            manifest[rel] = (st.st_size, st.st_mtime_ns, *shas[rel])
    return manifest


def _blocks(path: Path):
    """The file in blocks of whole lines, cut after a line whose checksum says so, with a chance proportional
    to its length (blocks of BLOCK_AVG bytes on average, at most BLOCK_MAX): where a cut falls depends on that
    line alone, not on where the block began, so an appended file, or one whose head was cut, keeps the same
    blocks. A secret may hold a newline, so a block's cut may fall inside one: the file is redacted whole before
    it is cut (`store_dir`)."""
    block: list[bytes] = []
    size = 0
    scale = 2**32 / BLOCK_AVG
    with path.open("rb") as fh:
        for line in fh:
            block.append(line)
            size += len(line)
            if size >= BLOCK_MAX or zlib.crc32(line) < len(line) * scale:
                yield b"".join(block)
                block, size = [], 0
    if block:
        yield b"".join(block)


def bound_dir(root: Path, limit: int = DIR_LIMIT) -> None:
    """Keep at most `limit` bytes under `root`: the least recently written files go first; a single
    file still over the limit (a log appended across sessions) keeps its newest lines."""
    files = [(path.stat().st_mtime_ns, path.stat().st_size, path) for _, path in walk(root)]
    total = sum(size for _, size, _ in files)
    if total <= limit:
        return
    files.sort(key=lambda f: f[0])
    for _mtime, size, path in files[:-1]:
        if total <= limit:
            return
        path.unlink()
        total -= size
    if total > limit and files:
        _keep_tail(files[-1][2], limit)


def _keep_tail(path: Path, limit: int) -> None:
    """Cut the head of `path` so at most `limit` bytes stay, at a line boundary; streamed."""
    size = path.stat().st_size
    tmp = path.with_name(path.name + ".plan-runner-tail")
    with path.open("rb") as src, tmp.open("wb") as dst:
        src.seek(size - limit)
        first = src.read(CHUNK)
        cut = first.find(b"\n")
        dst.write(first[cut + 1:] if cut >= 0 else first)
        for chunk in iter(lambda: src.read(CHUNK), b""):
            dst.write(chunk)
    os.replace(tmp, path)
