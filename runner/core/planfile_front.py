"""The front matter of a plan file: split it off, load the YAML with line numbers, validate it.

Every function here returns its problems instead of raising, so `runner.core.planfile`
can report all problems of a file at once. Lines are 1-based file lines.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from dataclasses import dataclass
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from runner.core.errors import Problem
from runner.core.plan import PlanConfig

FORMAT_DOC = "docs/plan-format.md"
YamlPath = tuple  # a location inside the YAML document: keys (str) and list indexes (int)


@dataclass(frozen=True)
class FrontMatter:
    yaml_text: str
    first_line: int  # file line of the first YAML line (the one after the opening `---`)
    body_index: int  # index into the file's lines of the first body line
    prefix: str  # the whole block, fences included, exactly as written


def split_front_matter(lines: list[str], path: str) -> tuple[FrontMatter | None, int, list[Problem]]:
    """Return the front matter (None if absent or unterminated), the body's first index, problems."""
    first = lines[0].lstrip("\ufeff").rstrip() if lines else ""
    if first != "---":
        fence_later = next((i for i, line in enumerate(lines[:50]) if line.rstrip() == "---"), None)
        why = (
            f"the plan has no front matter on line 1 (a `---` appears only on line {fence_later + 1})"
            if fence_later is not None
            else "the plan has no front matter"
        )
        fix = "start the file with a line `---`, the YAML configuration, then a line `---` (`---` twice uses the defaults)"
        return None, 0, [Problem(path, 1, why, fix)]
    for i in range(1, len(lines)):
        if lines[i].rstrip() in ("---", "..."):
            fm = FrontMatter("".join(lines[1:i]), 2, i + 1, "".join(lines[: i + 1]))
            return fm, i + 1, []
    problem = Problem(
        path,
        1,
        "the front matter opened on line 1 is never closed",
        "add a line `---` after the last configuration line, before the `# Title`",
    )
    return None, len(lines), [problem]


def load_yaml(fm: FrontMatter, path: str) -> tuple[object, dict[YamlPath, int], list[Problem]]:
    """Load the YAML and map every key / list item to its file line."""
    loader = None
    try:
        loader = yaml.SafeLoader(fm.yaml_text)
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = fm.first_line + (mark.line if mark else 0)
        what = " ".join(str(x) for x in (e.context, e.problem) if x)
        return None, {}, [Problem(path, line, f"YAML syntax error: {what}", _yaml_fix(what))]
    except yaml.YAMLError as e:
        position = getattr(e, "position", 0) or 0
        line = fm.first_line + fm.yaml_text[:position].count("\n")
        return None, {}, [Problem(path, line, f"YAML error: {e}", "remove the offending character")]
    except RecursionError:
        return None, {}, [Problem(path, fm.first_line, "YAML nested too deeply", "flatten the front matter")]
    finally:
        if loader is not None:
            loader.dispose()
    lines: dict[YamlPath, int] = {}
    problems: list[Problem] = []
    if node is not None:
        _index_lines(node, (), fm.first_line, lines, problems, path, set())
    return data, lines, problems


def _yaml_fix(what: str) -> str:
    if "tab" in what:
        return "indent with spaces, not tabs"
    if "mapping values are not allowed" in what:
        return "quote values that contain `: `, and check the indentation of the line above"
    return "check the indentation and quoting on this line and the one above it"


def _index_lines(node, at: YamlPath, base: int, out: dict, problems: list[Problem], path: str, seen: set) -> None:
    # Aliases share nodes; visiting each node once keeps a "billion laughs" document linear.
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        first_seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else repr(key_node.value)[:40]
            line = base + key_node.start_mark.line
            if key in first_seen:
                problems.append(
                    Problem(path, line, f"key `{key}` appears twice (first on line {first_seen[key]}); YAML keeps only the last",
                            f"delete one of the two `{key}:` entries")
                )
            first_seen.setdefault(key, line)
            out.setdefault(at + (key,), line)
            _index_lines(value_node, at + (key,), base, out, problems, path, seen)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            out.setdefault(at + (i,), base + item.start_mark.line)
            _index_lines(item, at + (i,), base, out, problems, path, seen)


def line_of(lines: dict[YamlPath, int], loc: YamlPath, default: int) -> int:
    """The line of the longest prefix of `loc` that the YAML mentions."""
    for n in range(len(loc), 0, -1):
        key = tuple(x if isinstance(x, int) else str(x) for x in loc[:n])
        if key in lines:
            return lines[key]
    return default


def dotted(loc: YamlPath) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "the front matter"


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# --- pydantic errors, mapped to lines and turned into advice ---------------------------------

_EXPECTS = {
    "int": "a whole number, e.g. `3`",
    "float": "a number, e.g. `2.5`",
    "string": "text (quote it if it looks like a number or `yes`/`no`)",
    "bool": "`true` or `false`",
    "tuple": "a YAML list (`- item` lines, or `[a, b]`)",
    "list": "a YAML list (`- item` lines, or `[a, b]`)",
    "model": "a mapping (indented `key: value` lines)",
    "dict": "a mapping (indented `key: value` lines)",
}


def _model_at(loc: YamlPath) -> type[BaseModel] | None:
    """The pydantic model whose field `loc[-1]` is (walks annotations, unwrapping tuples and Optionals)."""
    model: object = PlanConfig
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        if not (isinstance(model, type) and issubclass(model, BaseModel)) or part not in _keys(model):
            return None
        model = _unwrap(_keys(model)[part].annotation)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _keys(model: type[BaseModel]) -> dict[str, FieldInfo]:
    """A model's fields by the key a plan writes: the alias where there is one (`stall_minutes` for `stall_s`)."""
    return {info.alias or name: info for name, info in model.model_fields.items()}


def _unwrap(annotation: object) -> object:
    while True:
        origin = typing.get_origin(annotation)
        args = [a for a in typing.get_args(annotation) if a is not type(None) and a is not Ellipsis]
        if origin in (typing.Union, types.UnionType, tuple, list) and args:
            models = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
            annotation = models[0] if models else args[0]
        else:
            return annotation


def _field_help(loc: YamlPath) -> str:
    model = _model_at(loc)
    if model is None or not loc or not isinstance(loc[-1], str) or loc[-1] not in _keys(model):
        return ""
    return _keys(model)[loc[-1]].description or ""


def problem_from_error(err: typing.Mapping[str, typing.Any], lines: dict[YamlPath, int], path: str, default_line: int) -> Problem:
    loc = tuple(err["loc"])
    kind, msg = err["type"], err["msg"].removeprefix("Value error, ")
    line = line_of(lines, loc, default_line)
    name = dotted(loc)
    see = f"see {FORMAT_DOC}"
    if kind == "extra_forbidden":
        model = _model_at(loc)
        known = list(_keys(model)) if model else []
        where = f"`{dotted(loc[:-1])}`" if loc[:-1] else "the front matter"
        guess = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
        fix = (f"did you mean `{guess[0]}`? " if guess else "remove it; ") + f"keys allowed here: {', '.join(known)}"
        return Problem(path, line, f"unknown key `{loc[-1]}` in {where}", fix)
    if kind == "missing":
        help_ = _field_help(loc)
        return Problem(path, line, f"`{name}` is missing", f"add `{loc[-1]}: ...`" + (f" ({help_})" if help_ else f"; {see}"))
    if kind == "literal_error":
        return Problem(path, line, f"`{name}` is {_short(err.get('input'))}: {msg.lower()}", "use one of the values listed")
    if kind in ("value_error", "assertion_error"):
        if "duration" in msg:
            fix = f"write minutes as a number (`{loc[-1]}: 12`) or a string with a unit (`45s`, `12m`, `2h`)"
        else:
            help_ = _field_help(loc)
            fix = f"`{loc[-1]}`: {help_}; {see}" if help_ else see
        return Problem(path, line, f"`{name}`: {msg}", fix)
    expected = next((text for prefix, text in _EXPECTS.items() if kind.startswith(prefix)), None)
    what = f"`{name}` is {_short(err.get('input'))}: {msg[0].lower() + msg[1:]}"
    fix = f"write {expected}" if expected else see
    help_ = _field_help(loc)
    return Problem(path, line, what, fix + (f"; `{loc[-1]}`: {help_}" if help_ else ""))


# The gate checks below report these with better lines; drop pydantic's copy of them.
_GATE_VALIDATOR_MESSAGES = ("exactly one of", "command is empty")


def validate_config(data: object, lines: dict[YamlPath, int], path: str, first_line: int) -> tuple[PlanConfig | None, list[Problem]]:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        return None, [Problem(path, first_line, f"the front matter is a {type(data).__name__}, not a mapping",
                              "write `key: value` lines, e.g. `base: main`")]
    problems = check_semantics(data, lines, path, first_line)
    config: PlanConfig | None = None
    try:
        config = PlanConfig.model_validate(data)
    except ValidationError as exc:
        for err in exc.errors(include_url=False):
            if err["type"] == "value_error" and any(m in err["msg"] for m in _GATE_VALIDATOR_MESSAGES):
                continue
            problems.append(problem_from_error(err, lines, path, first_line))
    except (TypeError, OverflowError, RecursionError) as exc:  # a value no validator expected
        problems.append(Problem(path, first_line, f"the front matter could not be read: {exc}", f"see {FORMAT_DOC}"))
    if config is None and not problems:  # only dropped gate errors: cannot happen, but never pass silently
        problems.append(Problem(path, first_line, "the front matter is invalid", f"see {FORMAT_DOC}"))
    return (None if problems else config), problems


# --- checks pydantic does not make -----------------------------------------------------------

_REF_CHARS = re.compile(r"^[A-Za-z0-9._/-]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SECRET_ENV = {"GITHUB_TOKEN", "GH_TOKEN", "ACTIONS_RUNTIME_TOKEN", "ACTIONS_ID_TOKEN_REQUEST_TOKEN"}


def ref_name_problem(name: str) -> str | None:
    """Why `name` is not a safe git branch name, or None. Stricter than git: no shell metacharacters."""
    if not name:
        return "is empty"
    if len(name) > 200:
        return "is longer than 200 characters"
    if not _REF_CHARS.match(name):
        return "may contain only letters, digits, `.`, `_`, `-` and `/`"
    if name.startswith(("-", "/")) or name.endswith(("/", ".")):
        return "may not start with `-` or `/`, nor end with `/` or `.`"
    if ".." in name or "//" in name:
        return "may not contain `..` or `//`"
    if any(part.startswith(".") or part.endswith(".lock") for part in name.split("/")):
        return "has a part starting with `.` or ending with `.lock`"
    return None


def check_semantics(data: dict, lines: dict[YamlPath, int], path: str, default: int) -> list[Problem]:
    problems: list[Problem] = []

    def add(loc: YamlPath, what: str, fix: str) -> None:
        problems.append(Problem(path, line_of(lines, loc, default), what, fix))

    for key in ("branch", "base"):
        value = data.get(key)
        if isinstance(value, str) and (why := ref_name_problem(value)):
            add((key,), f"`{key}: {_short(value)}` is not a safe branch name: it {why}", "use a name like `plan-runner/add-auth`")
    handoff = data.get("handoff")
    if isinstance(handoff, str) and (
        not handoff.strip() or handoff.startswith(("/", "~")) or "\\" in handoff or ".." in handoff.split("/")
    ):
        add(("handoff",), f"`handoff: {_short(handoff)}` must be a relative path inside the repository",
            "use a path like `plans/add-auth.handoff.md`")
    agent = data.get("agent")
    env = agent.get("env") if isinstance(agent, dict) else None
    for i, name in enumerate(env if isinstance(env, list) else []):
        if isinstance(name, str) and not _ENV_NAME.match(name):
            add(("agent", "env", i), f"`{_short(name)}` is not an environment variable name", "use names like `MY_SETTING`")
        elif isinstance(name, str) and name.upper() in _SECRET_ENV:
            add(("agent", "env", i), f"`{name}` must never reach the agent: plan-runner, not the agent, talks to GitHub",
                f"remove `{name}` from `agent.env`")
    gates = data.get("gates")
    if isinstance(gates, list):
        problems.extend(_check_gates(gates, lines, path, default))
    return problems


def _check_gates(gates: list, lines: dict[YamlPath, int], path: str, default: int) -> list[Problem]:
    problems: list[Problem] = []
    names: dict[str, int] = {}
    for i, gate in enumerate(gates):
        if not isinstance(gate, dict):
            continue  # pydantic reports the wrong type

        def at(*key: str | int, i: int = i) -> int:  # this gate's index, bound now
            return line_of(lines, ("gates", i, *key), default)

        label = f"gate `{gate['name']}`" if isinstance(gate.get("name"), str) else f"gate #{i + 1}"
        name = gate.get("name")
        if isinstance(name, str):
            if name in names:
                problems.append(Problem(path, at("name"), f"two gates are named `{name}` (first on line {names[name]})",
                                        "give every gate a distinct name; results and reports are keyed by it"))
            names.setdefault(name, at("name"))
        kinds = [k for k in ("run", "http", "checks") if gate.get(k) is not None]
        if not kinds:
            problems.append(Problem(path, at(), f"{label} has none of `run`, `http` or `checks`",
                                    "add `run: <shell command>` (exit 0 is green), `http: <url>` or `checks: [<check names>]`"))
        elif len(kinds) > 1:
            problems.append(Problem(path, at(kinds[1]), f"{label} has both `{kinds[0]}` and `{kinds[1]}`",
                                    "a gate checks one thing; split it into two gates with distinct names"))
        run = gate.get("run")
        if isinstance(run, str) and not run.strip():
            problems.append(Problem(path, at("run"), f"{label} has an empty `run` command",
                                    "write the command, e.g. `run: pytest -q`, or delete the gate"))
        checks = gate.get("checks")
        if isinstance(checks, list) and not checks:
            problems.append(Problem(path, at("checks"), f"{label} lists no check names",
                                    "name the check runs to wait for, e.g. `checks: [build, test]`"))
        url = gate.get("http")
        if isinstance(url, str) and (why := _url_problem(url)):
            problems.append(Problem(path, at("http"), f"{label}: `http: {_short(url)}` {why}",
                                    "write a full URL such as `http://127.0.0.1:8000/health`"))
    return problems


def _url_problem(url: str) -> str | None:
    try:
        parts = urlsplit(url.strip())
        host = parts.hostname
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError as e:
        return f"is not a URL ({e})"
    if parts.scheme not in ("http", "https"):
        return "must start with http:// or https://"
    if not host:
        return "has no host"
    if any(c.isspace() for c in url.strip()):
        return "contains spaces"
    return None
