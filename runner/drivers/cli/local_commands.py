"""Local subcommands: `session`, `run`, `status`. They register with `runner.drivers.cli.main.command`."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from runner.core.actions import describe
from runner.drivers.cli.main import command, frozen_imports
from runner.core.exits import Exit
from runner.drivers.cli.progress import Progress, cost_text, print_result, print_sessions_table
from runner.adapters.render.term import err, out

# The session machinery (git, httpx, jinja2...) is imported inside the commands that need it,
# so `plan-runner validate` and `--help` start fast.
EXIT_FINISHED, EXIT_PARKED = Exit.OK, Exit.PARKED


def _plan_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("plan", type=Path, help="the plan file, e.g. plans/add-auth.md")
    parser.add_argument("--isolation", choices=("auto", "user", "none"), default=None,
                        help="override the plan's `isolation`: `none` runs the agent and the gates as your own "
                             "user, unprotected (local mode only)")


def session_json(result) -> dict:
    r, s, plan = result.record, result.state, result.plan
    attempts = {}
    for stage in plan.stages:
        budget = plan.stage_attempt_budget(stage)
        attempts[str(stage.number)] = {"used": s.stage_attempts.get(stage.number, 0), "budget": budget}
    return {
        "status": result.status, "plan": plan.id, "message": result.message,
        "outcome": r.outcome.value if r else None, "blame": r.blame.value if r else None,
        "rule": r.rule if r else None, "reasons": list(r.reasons) if r else [],
        "next_action": result.action.model_dump(mode="json") if result.action is not None else None,
        "next": describe(result.action) if result.action is not None else None,
        "attempts": attempts,
        "gates": [g.model_dump(mode="json", exclude={"output_tail"}) for g in result.evidence.gates] if result.evidence else [],
        "work_commits": [c.sha for c in result.evidence.work_commits] if result.evidence else [],
        "rejected_flips": list(r.rejected_flips) if r else [],
        "hints": r.hints.model_dump(mode="json") if r else {},
        "tokens": r.tokens if r else 0, "cost_usd": r.cost_usd if r else None,
        "url": result.url,
    }


def _preflight(ws, ports, session=None, *, full: bool = False) -> None:
    """before the first session, stop on a setup mistake with what/why/fix, recording nothing.
    `session`: the plan and state as the caller read them already (not read twice)."""
    from runner.drivers.session.preflight import before_first_session
    from runner.drivers.cli.progress import StepLine

    line = StepLine("preflight", "a fresh checkout of the base commit")  # a live line on a terminal only
    hook, ws.on_event = ws.on_event, line.event
    try:
        before_first_session(ws, ports, warn=lambda text: err.say(f"preflight {text}", "yellow"), session=session,
                             full=full)
    finally:
        line.stop()
        ws.on_event = hook


def _session_arguments(parser: argparse.ArgumentParser) -> None:
    _plan_argument(parser)
    parser.add_argument("--json", action="store_true", help="print the session record as JSON on stdout")
    parser.add_argument("--dry-run", action="store_true", help="print the next action instead of running it")
    parser.add_argument("--local", action="store_true",
                        help="inside GitHub Actions, run locally anyway (no dispatch, issue or pull request)")


@command("session", help="run exactly one session of a plan (locally, or as a GitHub Actions job)",
         arguments=_session_arguments)
def cmd_session(args: argparse.Namespace) -> int:
    if os.environ.get("GITHUB_ACTIONS") == "true" and not args.local and not args.dry_run:
        # In a job, a session is the action's session mode: GitHub drives dispatch, parking, the PR.
        with frozen_imports():
            from runner.drivers.actions.main import run_action

        return run_action(dict(os.environ, PLAN_RUNNER_PLAN=str(args.plan)), mode="session")
    with frozen_imports():
        from runner.core.policy import decide_start
        from runner.drivers.cli.local import local_ports, local_workspace
        from runner.drivers.session import load_session
        from runner.drivers.session.cut_short import recorded_interruptions
        from runner.drivers.session.phases import run_session

    ws = local_workspace(args.plan, isolation=args.isolation)
    ports = local_ports(ws)
    s = load_session(ws, ports)  # the plan and its state, read once for the preflight and the session
    if args.dry_run:
        action = decide_start(s.state, s.plan)
        print(json.dumps({"plan": s.plan.id, "next": describe(action), "next_action": action.model_dump(mode="json")},
                         indent=2) if args.json else describe(action))
        return 0
    _preflight(ws, ports, s)
    progress = Progress()
    ws.on_event = progress.event
    try:
        with recorded_interruptions(ws, ports):
            result = run_session(ws, ports, s)
    finally:
        progress.stop()
    if args.json:
        print(json.dumps(session_json(result), indent=2))
    else:
        print_result(result)
    if result.status == "parked":
        plan_arg = _plan_display(args.plan)
        if not args.json:  # the report as plain text, as `run` prints it (the file is Markdown, its text escaped)
            from runner.adapters.render.termreport import print_report

            print_report(out, result.report or "")
        err.say(f"report: {result.url}\nanswer it here: plan-runner reply {plan_arg} resume|retry|skip|stop "
                f"[instructions]\nwhat the agent did: plan-runner logs {plan_arg}")
    return EXIT_PARKED if result.status == "parked" else 0


def _run_arguments(parser: argparse.ArgumentParser) -> None:
    _plan_argument(parser)
    parser.add_argument("--max-wait", type=float, default=None, metavar="SECONDS",
                        help="stop (exit 4) instead of waiting out a backoff longer than this")


@command("run", help="run a plan's sessions until it finishes or parks (exit 0 finished, 3 parked, 4 waiting)",
         arguments=_run_arguments)
def cmd_run(args: argparse.Namespace) -> int:
    with frozen_imports():
        from runner.drivers.cli.local import local_ports, local_workspace, run_loop
        from runner.drivers.session.cut_short import recorded_interruptions
        from runner.drivers.session.lock import plan_lock

    ws = local_workspace(args.plan, isolation=args.isolation)
    ports = local_ports(ws)
    with plan_lock(ws):  # a second `run` of this plan refuses; other plans run at once
        _preflight(ws, ports, full=True)
        progress = Progress()
        ws.on_event = progress.event
        try:
            with recorded_interruptions(ws, ports):
                code, result = run_loop(ws, ports, max_wait_s=args.max_wait, on_result=progress.result,
                                        on_wait=progress.wait)
        finally:
            progress.stop()
    entries, _ = ports.store.read(result.plan.id)
    print_sessions_table(entries, f"plan {result.plan.id}")
    plan_arg = _plan_display(args.plan)
    if code == EXIT_PARKED:
        from runner.adapters.render.termreport import print_report

        print_report(out, result.report or "")
        err.say(f"{result.message}\nreport: {result.url}", "bold red")
        err.say(f"answer it here: plan-runner reply {plan_arg} resume|retry|skip|stop [instructions]\n"
                f"what the agent did: plan-runner logs {plan_arg}")
    elif code == EXIT_FINISHED and result.status == "finished":
        plan = result.plan
        base = getattr(getattr(plan, "config", None), "base", None) or "main"
        err.say(result.message + (f"\nreport: {result.url}" if result.url else ""), "bold green")
        err.say(f"the work is on branch {plan.work_branch}; to merge it:\n"
                f"  git switch {base} && git merge --no-ff {plan.work_branch}")
    elif code == EXIT_FINISHED:
        err.say(result.message)
    else:
        err.say(f"stopped: {result.message}; run again later (the state is saved)")
    return code


def _plan_display(path: Path) -> str:
    """The plan's path as the user should type it again (relative to where they are)."""
    try:
        return os.path.relpath(path.absolute(), Path.cwd())
    except ValueError:
        return str(path)


def _status_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("plans", nargs="*", type=Path, help="plan files (default: plans/*.md)")
    parser.add_argument("--json", action="store_true")


@command("status", help="every plan's stage, checkpoints, attempts left, last outcome and what happens next",
         arguments=_status_arguments)
def cmd_status(args: argparse.Namespace) -> int:
    from runner.drivers.cli.status import default_plan_paths, plan_statuses

    rows = plan_statuses(args.plans or default_plan_paths(Path.cwd()))
    if args.json:
        print(json.dumps(rows, indent=2))
        return 1 if any(r.get("error") for r in rows) else 0
    ok = [r for r in rows if not r.get("error")]
    out.table("plan-runner status", ("plan", "stage", "done", "attempts left", "sessions", "cost", "last outcome"),
              [(r["plan"], r["stage"], f"{r['done']}/{r['checkpoints']}", str(r["attempts_left"]),
                str(r["sessions"]), cost_text(r["cost_usd"], r.get("cost_lower_bound", False)) if r["cost_known"] else "-", r["last_outcome"] or "-",
                ) for r in ok])
    for r in ok:  # below the table, a line each: a column cut paths and commands mid-word
        out.say(f"{r['plan']}, next: {r['next']}")
        if r.get("compacted"):
            out.say(f"{r['plan']}, earlier: {r['compacted']}")
    for r in rows:
        if r.get("error"):
            err.say(f"{r['path']}: {r['error']}\n  fix: {r['fix']}", "bold red")
    return 1 if len(ok) < len(rows) else 0


def _demo_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", type=Path, default=None, help="where to create the demo repository (default: a temp dir)")


@command("demo", help="run a complete, offline, realistic plan in a temporary repository", arguments=_demo_arguments)
def cmd_demo(args: argparse.Namespace) -> int:
    from runner.drivers.cli.demo import run_demo

    return run_demo(args.dir)


# --- reply -----------------------------------------------------------------------------------


def _reply_arguments(parser: argparse.ArgumentParser) -> None:
    _plan_argument(parser)
    parser.add_argument("verb", choices=("resume", "retry", "skip", "stop"),
                        help="resume: go on; retry: fresh attempt budgets; skip: skip the checkpoint; stop: end the plan")
    parser.add_argument("text", nargs="*", help="instructions for the next session's prompt (or the reason)")


def local_user(repo: Path) -> str:
    """Who answers locally: git's user.name, else the login name."""
    from runner.adapters.git import work as gitwork

    try:
        name = gitwork.git_text(repo, "config", "user.name").strip()
    except Exception:  # noqa: BLE001 - no name configured
        name = ""
    return name or os.environ.get("USER", "") or "local user"


@command("reply", help="answer a parked plan locally: resume, retry, skip or stop (as `/plan-runner ...` on GitHub)",
         arguments=_reply_arguments)
def cmd_reply(args: argparse.Namespace) -> int:
    from runner.core.errors import PlanRunnerError
    from runner.core.ledger import Reply
    from runner.drivers.cli.local import local_ports, local_workspace
    from runner.core.policy import decide_after_reply
    from runner.core.replies import MAX_INSTRUCTIONS
    from runner.drivers.session import load_session

    text = " ".join(args.text).strip()
    if len(text) > MAX_INSTRUCTIONS:
        raise PlanRunnerError(what=f"the instructions are {len(text)} characters long",
                              why=f"a reply is a prompt addendum of at most {MAX_INSTRUCTIONS} characters",
                              fix="shorten them, or write them to a file in the repository and name it")
    ws = local_workspace(args.plan)
    s = load_session(ws, local_ports(ws))
    plan_arg = _plan_display(args.plan)
    if s.state.open_session is not None:
        raise PlanRunnerError(what=f"session {s.state.open_session.n} of {s.plan.id} has started and not finished",
                              why="a reply steers a parked plan; this one is running (or its job was killed)",
                              fix=f"wait for it, or run `plan-runner run {plan_arg}` to reconcile it")
    if not s.state.parked:
        now = "finished" if s.state.finished else ("not started" if not s.entries else "not parked")
        raise PlanRunnerError(what=f"plan {s.plan.id} is {now}, so there is nothing to answer",
                              why="`reply` answers a parked plan, as a `/plan-runner` comment on its park issue does",
                              fix=f"see `plan-runner status`; `plan-runner run {plan_arg}` runs it")
    user = local_user(ws.repo)
    action = decide_after_reply(args.verb, text, user, s.state, s.plan)
    s.write([Reply(at=ws.clock(), command=args.verb, text=text, user=user, source="local: plan-runner reply",
                   next_action=action)])
    if args.verb == "stop":
        err.say(f"plan {s.plan.id} is stopped; nothing more runs. `plan-runner reply {plan_arg} retry` starts it again.")
        return 0
    said = " Your instructions go into the next session's prompt." if text else ""
    err.say(f"{args.verb} recorded for plan {s.plan.id}.{said}\nnext: {describe(action)}\n"
            f"continue with: plan-runner run {plan_arg}")
    return 0


# --- logs ------------------------------------------------------------------------------------


def _logs_arguments(parser: argparse.ArgumentParser) -> None:
    _plan_argument(parser)
    parser.add_argument("session", nargs="?", type=int, default=None,
                        help="a session number (see the sessions table; default: the last session)")
    parser.add_argument("--max-lines", type=int, default=400, metavar="N",
                        help="print at most the last N lines (default 400)")


@command("logs", help="what the agent did in a session: its words, tool calls and results, as readable text",
         arguments=_logs_arguments)
def cmd_logs(args: argparse.Namespace) -> int:
    from runner.drivers.cli.local import local_ports, local_workspace
    from runner.drivers.cli.transcripts import render_logs

    ws = local_workspace(args.plan)
    text = render_logs(ws, local_ports(ws), args.session, max_lines=args.max_lines)
    out.say(text.rstrip("\n"))
    return 0


# --- reset and clean -------------------------------------------------------------------------


def _reset_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("plan", type=Path, help="the plan file, e.g. plans/add-auth.md")


@command("reset", help="start a plan over: its state and work branch are kept under a backup ref, then removed",
         arguments=_reset_arguments)
def cmd_reset(args: argparse.Namespace) -> int:
    from runner.core.planfile import plan_id_from_path
    from runner.drivers.cli.cleanup import reset_plan
    from runner.drivers.cli.local import local_workspace
    from runner.drivers.session.lock import plan_lock

    ws = local_workspace(args.plan)
    plan_id = plan_id_from_path(ws.plan_path)
    branch = _work_branch(ws, plan_id)
    with plan_lock(ws):  # never under a running `run` of the plan
        _refuse_open_session(ws, "reset")
        prefix, done = reset_plan(ws.repo, plan_id, branch, ws.scratch_dir, ws.remote)
    for line in done:
        err.say(line)
    if prefix is None:
        err.say(f"plan {plan_id} had no state and no work branch: nothing to reset")
    else:
        err.say(f"plan {plan_id} is reset; the old state is kept under {prefix}/ (`git for-each-ref {prefix}/`). "
                f"`plan-runner run {_plan_display(args.plan)}` starts it from the beginning.", "bold")
    return 0


def _refuse_open_session(ws, verb: str) -> None:
    """A `plan-runner session` of the plan still running (it holds no run lock): its agent works in the area."""
    from runner.core.errors import PlanRunnerError
    from runner.drivers.cli.local import local_ports
    from runner.drivers.session import load_session
    from runner.drivers.session.cut_short import _pid_alive

    try:
        open_ = load_session(ws, local_ports(ws)).state.open_session
    except PlanRunnerError:
        return  # a plan that cannot be read has no session running
    if open_ is not None and _pid_alive(open_.job):
        raise PlanRunnerError(what=f"session {open_.n} of this plan is running ({open_.job})",
                              why=f"`{verb}` would remove the folders its agent works in",
                              fix=f"wait for it to finish (or stop it: Ctrl-C), then {verb} again")


def _work_branch(ws, plan_id: str) -> str:
    """The plan's work branch as its trusted configuration names it (the default when it cannot be read)."""
    from runner.core.errors import PlanRunnerError
    from runner.drivers.session.context import load_trusted_plan

    try:
        return load_trusted_plan(ws)[0].work_branch
    except PlanRunnerError:
        return f"plan-runner/{plan_id}"


def _clean_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("plan", type=Path, nargs="?", default=None,
                        help="one plan (default: every plan of this repository, and finished demo folders)")


@command("clean", help="free disk: agent areas, plan-runner's own work trees, demo folders (state and branches stay)",
         arguments=_clean_arguments)
def cmd_clean(args: argparse.Namespace) -> int:
    from runner.core.errors import PlanRunnerError
    from runner.core.planfile import plan_id_from_path
    from runner.drivers.cli.cleanup import clean_demo, clean_plan, demo_folders, remove_old_pool_users
    from runner.drivers.cli.local import local_workspace
    from runner.drivers.session.lock import plan_lock
    from runner.drivers.cli.status import default_plan_paths

    done: list[str] = []
    if args.plan is not None:
        paths = [args.plan]
    else:
        try:
            paths = default_plan_paths(Path.cwd())
        except PlanRunnerError as exc:  # outside a repository: there are only the demo folders to clean
            err.say(f"no plans here ({exc.what}): cleaning the demo folders only", "yellow")
            paths = []
    for path in paths:
        ws = local_workspace(path)
        plan_id = plan_id_from_path(ws.plan_path)
        try:
            with plan_lock(ws):  # a running plan's area is in use
                _refuse_open_session(ws, "clean")
                done += clean_plan(ws.repo, plan_id, ws.scratch_dir)
        except PlanRunnerError as exc:
            if args.plan is not None:
                raise
            err.say(f"skipped {plan_id}: {exc.what}", "yellow")
    if args.plan is None:
        for folder in demo_folders():
            done += clean_demo(folder)
        done += remove_old_pool_users()
    for line in done:
        err.say(line)
    gone: list[Path] = []
    if args.plan is None:
        from runner.adapters.sandbox import sweep

        err.say("looking for the areas of repositories that no longer exist (one that may still exist, such as a "
                "repository in a folder you cannot read, keeps its areas)")
        gone = sweep.sweep(wait=False)  # each renamed aside now (a session starting then makes a new one)
        for path in gone:
            err.say(f"removed {path} (its repository is gone)")
        if gone:
            err.say(f"their files are being deleted in the background ({len(gone)} folder(s))")
    if not done and not gone:
        err.say("nothing to clean")
    return 0
