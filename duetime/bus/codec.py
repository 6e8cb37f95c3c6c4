"""Avro codecs for every topic: schemas/*.avsc is the contract, domain code sees dataclasses.

Each record carries the header ``duetime-schema`` = the 16-hex-digit CRC-64-AVRO fingerprint of the
writer schema's parsing canonical form, so a reader can refuse a record written with a schema it
does not know instead of decoding it into wrong data. Any decoding failure (fastavro raises
``EOFError``, ``IndexError``, ``UnicodeDecodeError``, ``ValueError`` ... on malformed input) becomes
one ``CodecError``; so does trailing garbage after a complete record.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar, cast

from fastavro import schemaless_reader, schemaless_writer
from fastavro.schema import fingerprint, load_schema, parse_schema, to_parsing_canonical_form

from duetime.errors import CodecError

__all__ = ["SCHEMA_HEADER", "AvroCodec", "schema_dir"]

SCHEMA_HEADER = "duetime-schema"

T = TypeVar("T")
Headers = Sequence[tuple[str, bytes | None]] | None


def schema_dir() -> Path:
    """The directory of the .avsc files: the repo's schemas/ or the copy inside the wheel."""
    package = Path(__file__).resolve().parent.parent
    for candidate in (package.parent / "schemas", package / "_schemas"):
        if (candidate / "run_event.avsc").exists():
            return candidate
    raise FileNotFoundError("duetime Avro schemas not found (schemas/ or duetime/_schemas)")


class AvroCodec(Generic[T]):
    """Encode and decode one record type against one schema file."""

    def __init__(
        self,
        schema_file: str,
        to_record: Callable[[T], dict[str, Any]],
        from_record: Callable[[dict[str, Any]], T],
    ) -> None:
        self.schema: dict[str, Any] = cast(
            dict[str, Any], load_schema(str(schema_dir() / schema_file), _write_hint=False)
        )
        # Parsed once, with fastavro's "already parsed" hint: handed the plain schema, fastavro
        # parses it again on every record (measured: 79 us to encode a RunEvent instead of 21).
        self._parsed: Any = parse_schema(self.schema)
        self.name: str = self.schema["name"]
        self.fingerprint: str = fingerprint(to_parsing_canonical_form(self.schema), "CRC-64-AVRO")
        self._to_record = to_record
        self._from_record = from_record
        self._header_value = self.fingerprint.encode("ascii")

    def headers(self) -> list[tuple[str, str | bytes | None]]:
        return [(SCHEMA_HEADER, self._header_value)]

    def encode(self, obj: T) -> bytes:
        buffer = io.BytesIO()
        schemaless_writer(buffer, self._parsed, self._to_record(obj))
        return buffer.getvalue()

    def read(self, data: bytes) -> dict[str, Any]:
        """The Avro record as fastavro reads it (a named union branch as ``(name, record)``),
        for tools at the boundary that print it (``duetime replay``); ``CodecError`` if the
        bytes are not one complete record of this schema."""
        buffer = io.BytesIO(data)
        try:
            record = schemaless_reader(buffer, self._parsed, None, return_record_name=True)
        except Exception as exc:  # fastavro raises many types on malformed input
            raise CodecError(f"{self.name}: not valid Avro ({type(exc).__name__}: {exc})") from exc
        if buffer.tell() != len(data):
            raise CodecError(
                f"{self.name}: {len(data) - buffer.tell()} trailing bytes after the record"
            )
        if not isinstance(record, dict):
            raise CodecError(f"{self.name}: decoded to {type(record).__name__}, not a record")
        return record

    def decode(self, data: bytes | None, headers: Headers = None) -> T:
        """Decode ``data``; every failure is a ``CodecError`` whose message says what is wrong."""
        if data is None:
            raise CodecError(f"{self.name}: empty record (null value)")
        self.check_headers(headers)
        record = self.read(data)
        try:
            return self._from_record(record)
        except CodecError:
            raise
        except (KeyError, TypeError, ValueError, ArithmeticError) as exc:
            raise CodecError(f"{self.name}: {exc}") from exc

    def check_headers(self, headers: Headers) -> None:
        """``CodecError`` if the headers name another schema than this codec's."""
        for key, value in headers or ():
            if key == SCHEMA_HEADER and value != self._header_value:
                shown = value.decode("ascii", "replace") if value else "none"
                raise CodecError(
                    f"{self.name}: unknown schema fingerprint {shown!r} "
                    f"(expected {self.fingerprint})"
                )
