"""Check HTTP exchanges against GitHub's published OpenAPI description (tests/data/github-openapi-subset.json).

A small validator for the OpenAPI 3.0 schema keywords that description uses
(type, nullable, properties, required, additionalProperties, items, enum,
oneOf/anyOf/allOf), so a test can say which field of which call differs from
what GitHub documents.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

SPEC_FILE = Path(__file__).parent / "data" / "github-openapi-subset.json"
# Answers any endpoint can give that the description leaves to its general pages: bad credentials,
# rate limits (403/429), GitHub's own failures (5xx), and a token without the permission a call needs.
GENERAL_STATUSES = frozenset({401, 403, 429, 500, 502, 503, 504})
_TYPES: dict[str, tuple[type, ...]] = {"object": (dict,), "array": (list,), "string": (str,), "boolean": (bool,),
                                       "integer": (int,), "number": (int, float)}


@cache
def spec() -> dict[str, Any]:
    return json.loads(SPEC_FILE.read_text(encoding="utf-8"))


@dataclass(frozen=True)
class Operation:
    path: str  # the template, e.g. /repos/{owner}/{repo}/issues/{issue_number}
    method: str
    op: dict[str, Any]

    @property
    def statuses(self) -> frozenset[int]:
        return frozenset(int(code) for code in self.op["responses"] if code.isdigit())

    @property
    def query_names(self) -> frozenset[str]:
        return frozenset(p["name"] for p in self.op.get("parameters", []) if p.get("in") == "query")

    def request_schema(self) -> dict[str, Any] | None:
        return (self.op.get("requestBody") or {}).get("content", {}).get("application/json", {}).get("schema")

    def response_schema(self, status: int) -> dict[str, Any] | None:
        answer = self.op["responses"].get(str(status)) or {}
        return answer.get("content", {}).get("application/json", {}).get("schema")


def _template_regex(template: str) -> re.Pattern[str]:
    return re.compile(re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template)))


def operation(method: str, path: str) -> Operation | None:
    """The documented operation a concrete request path belongs to (the most literal template wins)."""
    found = []
    for template, ops in spec()["paths"].items():
        if method.lower() in ops and _template_regex(template).fullmatch(path):
            found.append(Operation(template, method.upper(), ops[method.lower()]))
    found.sort(key=lambda o: o.path.count("{"))
    return found[0] if found else None


def validate(schema: dict[str, Any], value: Any, where: str = "$", *, strict: bool = False) -> list[str]:
    """Problems of `value` against an OpenAPI 3.0 schema; `strict` also refuses undocumented object keys
    (for request bodies: a field GitHub does not know is silently ignored, which is a bug of the sender)."""
    if value is None:
        if schema.get("nullable") or not schema or "type" not in schema and not any(
                k in schema for k in ("oneOf", "anyOf", "allOf", "properties")):
            return []
        return [f"{where}: null, but the schema does not allow null"]
    for key in ("oneOf", "anyOf"):
        if key in schema:
            options = [validate(s, value, where, strict=strict) for s in schema[key]]
            if not any(not problems for problems in options):
                return [f"{where}: matches none of {key} ({'; '.join(p[0] for p in options if p)})"]
            return []
    problems: list[str] = []
    for sub in schema.get("allOf", []):
        problems += validate(sub, value, where, strict=strict)
    kind = schema.get("type")
    if kind:
        ok = isinstance(value, _TYPES[kind]) and not (kind in ("integer", "number") and isinstance(value, bool))
        if not ok:
            return problems + [f"{where}: {type(value).__name__} {str(value)[:40]!r}, documented as {kind}"]
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{where}: {value!r} is not one of {schema['enum']}")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                problems.append(f"{where}: required field {name!r} is missing")
        for name, item in value.items():
            if name in props:
                problems += validate(props[name], item, f"{where}.{name}", strict=strict)
            elif strict and props and schema.get("additionalProperties") is not True:
                problems.append(f"{where}: field {name!r} is not documented")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            problems += validate(schema["items"], item, f"{where}[{i}]", strict=strict)
    return problems


def check_exchange(method: str, path: str, query: dict[str, str], body: Any, status: int,
                   response: Any) -> list[str]:
    """Every way one request and its answer differ from GitHub's description."""
    op = operation(method, path)
    if op is None:
        return [f"{method} {path}: no such operation in GitHub's description"]
    problems = []
    unknown = set(query) - op.query_names
    if unknown:
        problems.append(f"{method} {op.path}: undocumented query parameter(s) {sorted(unknown)}")
    request = op.request_schema()
    if body is not None:
        if request is None:
            problems.append(f"{method} {op.path}: sends a body, the operation takes none")
        else:
            problems += [f"{method} {op.path} request {p}" for p in validate(request, body, strict=True)]
    elif request is not None and op.op["requestBody"].get("required"):
        problems.append(f"{method} {op.path}: the request body is required")
    if status not in op.statuses and status not in GENERAL_STATUSES:
        problems.append(f"{method} {op.path}: answered {status}, documented {sorted(op.statuses)}")
    schema = op.response_schema(status) if 200 <= status < 300 else None
    if schema is not None:
        problems += [f"{method} {op.path} {status} response {p}" for p in validate(schema, response)]
    elif 200 <= status < 300 and status != 204 and response is not None and status in op.statuses:
        pass  # documented without a body schema
    if status >= 400 and not (isinstance(response, dict) and isinstance(response.get("message"), str)):
        problems.append(f"{method} {op.path}: error {status} without GitHub's {{message, documentation_url}}")
    return problems
