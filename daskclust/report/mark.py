"""Ownership marks of a report's files: how a later report knows which files it may replace.

A mark is ``format=1 kind=<page|figure> id=<32 hex digits>``, with one random id per report, put
where text cannot land by accident:

- the page: its third line is exactly ``<meta name="daskclust-report" content="MARK">``, after the
  two fixed lines every report page starts with (a page that merely mentions daskclust is not a
  report's);
- a figure: the PNG's ``daskclust-report`` text chunk, found by walking the PNG's chunks (each
  checked against its CRC) up to the image data.

Only a mark of the file's own kind counts: a figure never replaces a page, nor a page a figure.
"""

from __future__ import annotations

import re
import struct
import uuid
import zlib
from pathlib import Path

MARK_KEY = "daskclust-report"
FORMAT = 1
PAGE_START = ("<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">')
"""The first two lines of every report page; the mark is the third."""

_MARK = re.compile(r"format=1 kind=(page|figure) id=[0-9a-f]{32}")
_PAGE_MARK = re.compile(rf'<meta name="{MARK_KEY}" content="({_MARK.pattern})">')
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_HEAD_BYTES = 1 << 16
"""How much of a PNG is read for its mark: the text chunks come before the image data."""


def new_report_id() -> str:
    return uuid.uuid4().hex


def mark(kind: str, report_id: str) -> str:
    """The mark of a ``kind`` ("page" or "figure") file of the report ``report_id``."""
    text = f"format={FORMAT} kind={kind} id={report_id}"
    assert _MARK.fullmatch(text), text
    return text


def page_mark_line(report_id: str) -> str:
    """The page's third line."""
    return f'<meta name="{MARK_KEY}" content="{mark("page", report_id)}">'


def marked_kind(path: Path) -> str | None:
    """The kind in the report mark of the file at ``path`` ("page" or "figure"), or None if it has none."""
    with open(path, "rb") as f:
        head = f.read(_PNG_HEAD_BYTES)
    text = _png_mark(head) if head.startswith(_PNG_SIGNATURE) else _page_mark(head)
    if text is None:
        return None
    found = _MARK.fullmatch(text)
    return found.group(1) if found else None


def _page_mark(head: bytes) -> str | None:
    lines = head.split(b"\n", 3)
    if len(lines) < 4 or [line.decode("utf-8", "replace") for line in lines[:2]] != list(PAGE_START):
        return None
    found = _PAGE_MARK.fullmatch(lines[2].decode("utf-8", "replace"))
    return found.group(1) if found else None


def _png_mark(head: bytes) -> str | None:
    """The ``daskclust-report`` tEXt chunk of a PNG, read chunk by chunk until the image data."""
    at = len(_PNG_SIGNATURE)
    while at + 8 <= len(head):
        length, kind = struct.unpack(">I4s", head[at:at + 8])
        body_end = at + 8 + length
        if kind in (b"IDAT", b"IEND") or body_end + 4 > len(head):
            return None
        body = head[at + 8:body_end]
        (crc,) = struct.unpack(">I", head[body_end:body_end + 4])
        if zlib.crc32(kind + body) != crc:
            return None
        if kind == b"tEXt":
            key, _, value = body.partition(b"\0")
            if key == MARK_KEY.encode():
                return value.decode("latin-1")
        at = body_end + 4
    return None
