"""The files corral reads that are not its config: those users write (a config's or a job file's
text, YAML with no key given twice, JSON objects likewise) and the server.json a running corral
writes. Apart from corral.config, so that the command line reads them without building every
settings model at its start."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml


class DamagedServerInfo(ValueError):
    """A server.json that cannot be read; the message names the file and what is wrong."""


def read_server_info(path: Path) -> tuple[str, int, str | None]:
    """The URL, pid and CA bundle (None: plain HTTP, or a publicly trusted certificate) a running
    corral wrote to its data directory's server.json.

    FileNotFoundError if there is none; DamagedServerInfo if it is damaged (cut short by a full
    disk, edited by hand, not a file)."""
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise DamagedServerInfo(f"{path} cannot be read: {exc.strerror or exc}") from None
    except ValueError as exc:  # not JSON, or not UTF-8
        raise DamagedServerInfo(f"{path} is damaged (not JSON: {exc})") from None
    if not isinstance(data, dict):
        raise DamagedServerInfo(f"{path} is damaged (not a JSON object)")
    url, pid = data.get("url"), data.get("pid")
    if not isinstance(url, str) or not re.match(r"https?://", url):
        raise DamagedServerInfo(f"{path} is damaged (no server URL in it)")
    if not isinstance(pid, int) or isinstance(pid, bool):
        raise DamagedServerInfo(f"{path} is damaged (no server pid in it)")
    ca = data.get("ca")
    if ca is not None and not isinstance(ca, str):
        raise DamagedServerInfo(f"{path} is damaged (its CA bundle is not a path)")
    return url, pid, ca


# The password of a URL's user ('postgresql://corral:secret@db/x').
_PASSWORD_IN_URL = re.compile(r"(://[^:/@\s]*):[^@/\s]*@")


def without_password(text: str) -> str:
    """`text` with the password of any URL in it shown as ***."""
    return _PASSWORD_IN_URL.sub(r"\1:***@", text)


class UnreadableFile(ValueError):
    """A file that cannot be read as text; the message names the file (and the line)."""


def read_text(path: Path) -> str:
    """A UTF-8 text file that users write (a config, a job file), its byte-order mark dropped (some
    Windows editors write one; it is no part of the first line)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UnreadableFile(f"{path}: cannot read: {exc.strerror}") from exc
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise UnreadableFile(f"{path}: line {line}: not UTF-8 text ({exc.reason})") from exc


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML as users write it: a key given twice in one mapping is an error (PyYAML's own loader
    keeps the last one, so the first setting would silently not count)."""


def _mapping_without_duplicates(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    first_line: dict[Any, int] = {}
    for key_node, _value in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue  # what a merge key (<<) brings in may be overridden
        key = loader.construct_object(key_node, deep=True)
        try:
            seen = first_line.get(key)
        except TypeError:
            continue  # an unhashable key: construct_mapping says so
        if seen is not None:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} is given twice (first on line {seen + 1})", key_node.start_mark
            )
        first_line[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=True)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)


def load_yaml(text: str) -> Any:
    """A YAML document that users write (a config, a job file); a repeated key is an error."""
    return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader: no arbitrary objects


class RepeatedKey(ValueError):
    """A JSON object that gives a key twice (json keeps the last one, silently)."""


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """`json.loads(..., object_pairs_hook=unique_keys)`: a key given twice is a RepeatedKey."""
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise RepeatedKey(f"key {key!r} is given twice")
        found[key] = value
    return found


def is_yaml(path: Path) -> bool:
    return path.suffix.lower() in (".yaml", ".yml")
