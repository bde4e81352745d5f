"""Strict request bodies: a string where a number or a boolean is due is a 400 naming the field.

Litestar converts a decoded body into its struct with `strict=False`, which turns `"maxResults": "2"` into 2
and `"explain": "true"` into True: a client with a type bug would never learn of it. This hook decodes each
JSON body once more, strictly, against the same struct before the handler runs; Litestar's own decoding
then only ever sees bodies of the right types. Malformed JSON is a 400 saying "JSON is malformed" and how:
msgspec says that of a syntax error, but of a body cut short only "Input data was truncated" and of Latin-1
only "Invalid UTF-8 encoded string", naming neither the body nor JSON (`_malformed`). An empty body is
refused here, saying so, unless every field of the body is optional (`/v1/index`): then no body is `{}`,
so `curl -X POST .../v1/index` starts a sync of the default agent. A body sent with a `Content-Encoding`
(`gzip`, as some HTTP clients compress requests) is a 415 saying to send it uncompressed: it was read as
JSON, and refused as "JSON is malformed: invalid character (byte 0)". A query parameter on these routes is a
400 naming it: they read only their body, and `?agent=bob` silently answering for `main` would be worse.
`StrictJSONBody` says so in the OpenAPI document too (`additionalProperties: false`), where Litestar would
let a body carry any other property.
"""

from __future__ import annotations

import codecs
import functools
import json
from typing import Annotated, Any, TypeAlias, TypeVar

import msgspec
from litestar import Request
from litestar.enums import RequestEncodingType
from litestar.exceptions import HTTPException, ValidationException
from litestar.params import Body

from api.schemas import GetRequest, IndexRequest, SearchRequest, has_lone_surrogate

T = TypeVar("T")
StrictJSONBody: TypeAlias = Annotated[
    T, Body(media_type=RequestEncodingType.JSON, schema_extra={"additionalProperties": False})
]
BODIES: dict[str, type[msgspec.Struct]] = {
    "/v1/search": SearchRequest,
    "/v1/get": GetRequest,
    "/v1/index": IndexRequest,
}


def only_query_parameters(request: Request[Any, Any, Any], *read: str, hint: str = "") -> None:
    """A query parameter the route does not read (`?deeep=true`, `POST /v1/search?agent=bob`) is a 400 naming
    it, as an unknown body field is, not answered as if it were absent."""
    if unknown := sorted(set(request.query_params) - set(read)):
        expected = f"expected {', '.join(read)}" if read else "this route reads none"
        raise ValidationException(extra=[{"key": unknown[0], "message": f"unknown query parameter; {expected}{hint}"}])


async def strict_body(request: Request[Any, Any, Any]) -> None:
    kind = BODIES.get(request.scope["path"])
    if kind is None or request.method != "POST":
        return
    only_query_parameters(request, hint="; send it in the JSON body")  # `?agent=bob` answered for main
    if (coding := request.headers.get("content-encoding", "identity").strip().lower()) != "identity":
        detail = f"Content-Encoding {coding!r}: not accepted; send the JSON body uncompressed"
        raise HTTPException(status_code=415, detail=detail, headers={"Accept-Encoding": "identity"})
    body = await request.body()
    if not body and not any(f.required for f in msgspec.structs.fields(kind)):
        return  # every field optional (`/v1/index`): `curl -X POST` with no body is `{}`
    if not body.strip():  # else Litestar's detail is "body: 'data'" (the name of its handler argument)
        example = ", ".join(f'"{f.encode_name}": "..."' for f in msgspec.structs.fields(kind) if f.required)
        message = f"empty: send a JSON object, e.g. {{{example}}} (Content-Type: application/json)"
        raise ValidationException(extra=[{"key": "body", "message": message}])
    try:
        msgspec.json.decode(body, type=kind)
    except msgspec.ValidationError as exc:
        _refuse(_with_whole_numbers(body, kind, exc), kind)
    except msgspec.DecodeError as exc:
        if (field := _lone_surrogate(body)) is not None:  # msgspec's word for it: "Input data was truncated"
            message = "contains a lone surrogate (\\ud800-\\udfff without its pair), which is no character"
            raise ValidationException(extra=[{"key": field, "message": message}]) from None
        form = _form_type(request.headers.get("content-type", ""))
        raise ValidationException(extra=[{"key": "body", "message": _malformed(body, exc, form, kind)}]) from None


#: Content types of HTML forms: what `curl -d query=tea` (application/x-www-form-urlencoded) and `curl -F` send
FORMS = ("application/x-www-form-urlencoded", "multipart/form-data")


def _form_type(content_type: str) -> str | None:
    media = content_type.split(";")[0].strip().lower()
    return media if media in FORMS else None


def _malformed(body: bytes, exc: msgspec.DecodeError, form: str | None, kind: type[msgspec.Struct]) -> str:
    """What is wrong with a body that is no JSON, in words a client can act on. A form (`curl -d query=tea`,
    `curl -F`) was "JSON is malformed: invalid character (byte 0)", which did not say that JSON was wanted
    where a form came."""
    if form is not None:
        example = ", ".join(f'"{f.encode_name}": "..."' for f in msgspec.structs.fields(kind) if f.required)
        return (
            f"JSON is malformed: a form ({form}) came where a JSON object is wanted; send e.g. {{{example}}} "
            "with Content-Type: application/json"
        )
    if body.startswith(codecs.BOM_UTF8):  # msgspec: "invalid character (byte 0)", a byte no editor shows
        return "JSON is malformed: it starts with a UTF-8 byte order mark (EF BB BF); send the JSON without it"
    said = str(exc)
    # UTF-16 (or UTF-32) text starts with its byte order mark or, its first character being ASCII (`{`), has a
    # NUL byte among its first two: msgspec said "invalid character (byte 0)" of it, which named neither.
    utf16 = body.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) or b"\x00" in body[:2]
    if said == "Invalid UTF-8 encoded string" or utf16:
        return "JSON is malformed: not UTF-8 (JSON over HTTP is UTF-8; Latin-1 or UTF-16 text is refused)"
    if said == "Input data was truncated":
        return "JSON is malformed: the body ends before the JSON value does (cut short?)"
    return said


def _refuse(exc: msgspec.ValidationError | None, kind: type[msgspec.Struct]) -> None:
    if exc is None:  # valid after all
        return
    # "Expected `int`, got `str` - at `$.maxResults`": the field, then what was wrong with it.
    message, _, where = str(exc).partition(" - at `$")
    field = where.strip("`.").split(".")[0].split("[")[0] or "body"
    if message.startswith("Invalid enum value") and (values := _choices(kind, field)):
        message += f"; expected one of {', '.join(values)}"  # msgspec names the value given, not those it takes
    raise ValidationException(extra=[{"key": field, "message": message}]) from None


def _choices(kind: type[msgspec.Struct], field: str) -> tuple[str, ...]:
    """The values a Literal field of `kind` takes (`mode`: hybrid, keyword, vector), or ()."""

    def values(t: Any) -> tuple[str, ...]:
        if isinstance(t, msgspec.inspect.Metadata):
            return values(t.type)
        if isinstance(t, msgspec.inspect.UnionType):
            return tuple(v for u in t.types for v in values(u))
        return tuple(map(str, t.values)) if isinstance(t, msgspec.inspect.LiteralType) else ()

    return next((values(f.type) for f in msgspec.inspect.type_info(kind).fields if f.encode_name == field), ())


def _with_whole_numbers(
    body: bytes, kind: type[msgspec.Struct], exc: msgspec.ValidationError
) -> msgspec.ValidationError | None:
    """The body checked again with each integer field's number that has no fraction (2.0, 1e2) as that integer:
    JSON has one kind of number, and JSON Schema's `integer` (the OpenAPI document's) is any without a fraction,
    as a client keeping every number a float sends them (Litestar's decoding takes them so). None when it then
    passes; else what is still wrong (2.5 stays a float), or `exc`, the typed decode's error, when no float
    was refused or only that decode can read the body (a number out of range: its error names the field)."""
    if "got `float`" not in str(exc):  # nothing to read again (a body nested 5,000 deep is refused unread)
        return exc
    try:
        doc = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return exc
    if isinstance(doc, dict):
        integers = _integer_fields(kind)
        doc = {k: int(v) if k in integers and isinstance(v, float) and v.is_integer() else v for k, v in doc.items()}
    try:
        msgspec.convert(doc, kind)
    except msgspec.ValidationError as still:
        return still
    return None


@functools.cache
def _integer_fields(kind: type[msgspec.Struct]) -> frozenset[str]:
    def integer(t: Any) -> bool:
        if isinstance(t, msgspec.inspect.Metadata):
            return integer(t.type)
        if isinstance(t, msgspec.inspect.UnionType):
            return any(integer(u) for u in t.types)
        return isinstance(t, msgspec.inspect.IntType)

    return frozenset(f.encode_name for f in msgspec.inspect.type_info(kind).fields if integer(f.type))


def _lone_surrogate(body: bytes) -> str | None:
    """The field whose string holds a `\\uXXXX` escape of half a UTF-16 pair ("body" for a key), or None.
    Python's own JSON parser takes such an escape, which names no character, where msgspec refuses it."""
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    for key, value in doc.items():
        if has_lone_surrogate(key):
            return "body"
        if has_lone_surrogate(value):
            return key
    return None
