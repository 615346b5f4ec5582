"""The `plan-runner` command line.

Adding a subcommand: write `def cmd_<name>(args) -> int`, decorate it with
`@command("<name>", help=..., arguments=<function adding its arguments>)`. A command
defined in another module registers itself the same way; list that module in
`_COMMAND_MODULES` so it is imported before the parser is built.

User errors are `PlanRunnerError`s, caught once in `main`.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from runner import __version__
from runner.core.errors import PlanError, PlanRunnerError
from runner.core.exits import Exit

DEBUG_ENV = "PLAN_RUNNER_DEBUG"
_COMMAND_MODULES: tuple[str, ...] = ("runner.drivers.cli.local_commands", "runner.drivers.cli.action_commands")  # each registers with @command on import


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    run: Callable[[argparse.Namespace], int]
    arguments: Callable[[argparse.ArgumentParser], None] | None = None


COMMANDS: dict[str, Command] = {}


@contextmanager
def frozen_imports() -> Iterator[None]:
    """The imports a command makes inside it (a session's: GitPython, the judge, the agent's backends) with no
    collection midway, and what they made frozen after (`run` says why; 15 ms of a session's start)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def command(name: str, *, help: str, arguments: Callable[[argparse.ArgumentParser], None] | None = None):
    """Register `run(args) -> exit code` as subcommand `name`."""

    def register(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
        if name in COMMANDS:
            raise ValueError(f"subcommand {name!r} registered twice")
        COMMANDS[name] = Command(name, help, run, arguments)
        return run

    return register


# --- validate --------------------------------------------------------------------------------


def _validate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", type=Path, metavar="FILE_OR_DIR",
                        help="plan files, or directories whose *.md files are plans (*.handoff.md excluded)")
    parser.add_argument("--root", type=Path, default=None,
                        help="repository root plans must live in (default: the enclosing git work tree)")


def collect_plan_paths(paths: list[Path]) -> list[Path]:
    """Files as given; directories expand to their `*.md` files except handoffs, sorted."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found += sorted(p for p in path.glob("*.md") if not p.name.endswith(".handoff.md") and p.is_file())
        else:
            found.append(path)
    return found


def find_root(path: Path) -> Path:
    """The git work tree containing `path`, else its directory (plans must not escape it)."""
    start = path.absolute().parent if not path.is_dir() else path.absolute()
    for candidate in (start, *start.parents):
        if (candidate / ".git").exists():
            return candidate
    return start


@command("validate", help="check plan files; report every problem with file:line and a fix", arguments=_validate_arguments)
def cmd_validate(args: argparse.Namespace) -> int:
    from runner.adapters.plan_io import load_plan  # imported here so `--help` stays fast

    files = collect_plan_paths(args.paths)
    if not files:
        raise PlanRunnerError(what="no plan files found", why=f"no *.md files in {', '.join(map(str, args.paths))}",
                              fix="pass plan files or a directory such as `plans/`")
    bad = 0
    for file in files:
        try:
            plan = load_plan(file, args.root or find_root(file))
        except PlanError as err:
            bad += 1
            print(err.render())
        else:
            n = len(plan.checkpoints)
            print(f"ok {plan.path}: {len(plan.stages)} stage(s), {n} checkpoint(s), {len(plan.config.gates)} gate(s)")
            _warn_unresolvable_gates(plan, args.root or find_root(file))
    if bad:
        raise PlanRunnerError(
            what=f"{bad} of {len(files)} plan file(s) invalid",
            why="a plan with problems never starts a session",
            fix="correct each problem listed above, then run `plan-runner validate` again",
        )
    return 0


def _warn_unresolvable_gates(plan, root: Path) -> None:
    """Gate, `verify:` and `setup:` commands that would not start where they run (the shell would exit 127), as
    far as can be told without a checkout: warnings, the plan stays valid."""
    from runner.drivers.session.preflight import command_problem, commands_of, one_fix_each

    found = [command_problem(c.label, c.command, os.environ, root, cwd=c.cwd, extra_env=c.env, required=c.required,
                             made=c.made) for c in commands_of(plan)]
    for problem in one_fix_each([p for p in found if p is not None]):
        print(f"  warning: {problem.what} ({problem.fix})")


# --- schema ----------------------------------------------------------------------------------


@command("schema", help="print the JSON Schema of the plan front matter")
def cmd_schema(args: argparse.Namespace) -> int:
    from runner.core.planfile import plan_json_schema

    print(render_schema(plan_json_schema()), end="")
    return 0


def render_schema(schema: dict) -> str:
    """The exact text of docs/plan.schema.json."""
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


# --- main ------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    for module in _COMMAND_MODULES:
        importlib.import_module(module)
    parser = argparse.ArgumentParser(prog="plan-runner", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"plan-runner {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for cmd in COMMANDS.values():
        p = sub.add_parser(cmd.name, help=cmd.help, description=cmd.help)
        if cmd.arguments:
            cmd.arguments(p)
        p.set_defaults(_run=cmd.run, _command=cmd.name)
    return parser


def interrupted_message(command: str, plan) -> str:
    """What a Ctrl-C left: for a plan's `run` or `session`, that the work is kept and how to go on."""
    if command not in ("run", "session") or plan is None:
        return "plan-runner: interrupted"
    return (f"plan-runner: interrupted. The work is kept: a session that was running is recorded as Interrupted "
            f"(no attempt used), with the agent's commits and uncommitted work on the plan's work branch.\n"
            f"  continue: plan-runner run {plan}")


def main(argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None) -> int:
    args = (parser or build_parser()).parse_args(argv)
    try:
        return args._run(args)
    except PlanRunnerError as err:
        print(err.render(), file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print(interrupted_message(getattr(args, "_command", ""), getattr(args, "plan", None)), file=sys.stderr)
        return Exit.INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - the one place an unexpected error becomes a message
        from runner.drivers.session import space

        if space.exhausted(exc) and not os.environ.get(DEBUG_ENV):
            import tempfile

            full = space.out_of_space([Path.cwd(), Path(tempfile.gettempdir())], when="",
                                      outcome="plan-runner stopped before it started a session or after it "
                                              "ended; nothing of a session was lost.")
            print(full.render(), file=sys.stderr)
            return full.exit_code
        if os.environ.get(DEBUG_ENV):
            traceback.print_exc()
        else:
            print(f"plan-runner: unexpected error: {type(exc).__name__}: {exc}", file=sys.stderr)
            print(f"  hint: rerun with {DEBUG_ENV}=1 for the traceback, and report it", file=sys.stderr)
        return Exit.UNEXPECTED


def run() -> None:
    """The `plan-runner` command: the console script and `python -m runner`.

    Importing the commands (pydantic, GitPython, the records' schemas) creates a few hundred thousand objects
    that live as long as the process: the collector would scan them again and again (about 20 ms of a session),
    and once more over everything at exit (about 25 ms). They are frozen once imported; collection goes on
    as usual for everything made after (`benchmarks/overhead_ab.py` measures the session's overhead)."""
    with frozen_imports():
        parser = build_parser()
    code = main(parser=parser)
    gc.freeze()  # the process ends: no last collection pass (module teardown frees what is left)
    sys.exit(code)


if __name__ == "__main__":
    run()
