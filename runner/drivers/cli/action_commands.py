"""GitHub subcommands: `action` (the job step) and `init` (writes the workflow). Registered with `runner.drivers.cli.main.command`."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from runner.drivers.cli.main import command, frozen_imports


def _action_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mode", choices=("session", "tick", "reply", "reconcile"), default=None,
                        help="what the job does (default: $PLAN_RUNNER_MODE, else session); "
                             "every other input comes from the environment (see action.yml)")
    parser.add_argument("--cancelled", action="store_true",
                        help="the job was cancelled and the session step did not finish its salvage: push what the "
                             "agent left and report the stop (the action's `if: cancelled()` step)")


@command("action", help="run as a GitHub Actions step: one session, a schedule tick, or a reply to a park issue",
         arguments=_action_arguments)
def cmd_action(args: argparse.Namespace) -> int:
    with frozen_imports():
        from runner.drivers.actions.main import run_action

    return run_action(os.environ, mode=args.mode, cancelled=args.cancelled)


def _init_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", nargs="?", type=Path, default=Path("."), help="the repository (default: .)")
    parser.add_argument("--force", action="store_true", help="overwrite files that exist")
    parser.add_argument("--action-ref", default=None, metavar="OWNER/REPO@REF",
                        help="the action the workflow uses (default: this release of plan-runner)")
    from runner.adapters.init import AUTHS

    parser.add_argument("--auth", choices=tuple(AUTHS), default="api-key",
                        help="how the agent pays: an Anthropic API key (default), a Claude subscription token, "
                             "Amazon Bedrock or Google Vertex AI through the job's OIDC token, Codex with an API key "
                             "or a ChatGPT login (docs/github-actions.md, Credentials)")
    parser.add_argument("--github-app", action="store_true",
                        help="the session job pushes with a token plan-runner mints from a GitHub App, so that its "
                             "pushes start workflows (`checks:` gates, CI on the pull request): passes `app-id` from "
                             "the repository variable PLAN_RUNNER_APP_ID and `app-private-key` from the secret "
                             "PLAN_RUNNER_APP_PRIVATE_KEY (docs/github-actions.md, \"A push token from a GitHub App\")")


def next_steps(written: list[Path], secret: str, github_app: bool = False) -> list[str]:
    """What is left to do on GitHub after `init`, in order: the action's home first when the workflow names the
    placeholder, the secret, the setting without which the plan's pull request is refused, then commit and run."""
    from runner.adapters.init import DEFAULT_ACTION_REF

    steps = []
    texts = [p.read_text(encoding="utf-8") for p in written if p.suffix == ".yml"]
    if any(f"uses: {DEFAULT_ACTION_REF}" in text for text in texts):
        steps.append(f"replace `{DEFAULT_ACTION_REF}` in the workflow files with where the action lives (run "
                     "`plan-runner init --force --action-ref <owner>/plan-runner@<sha>`; docs/github-actions.md, "
                     "Where the action lives): until then the workflow cannot run")
    steps.append(f"{secret} (Settings -> Secrets and variables -> Actions)")
    if github_app:
        from runner.adapters.init import GITHUB_APP_SETUP

        steps.append(GITHUB_APP_SETUP)
    steps.append("let Actions open the plan's pull request: Settings -> Actions -> General -> Workflow permissions -> "
                 "Allow GitHub Actions to create and approve pull requests")
    steps.append("commit the files on the default branch and push, then run the workflow (Actions -> plan-runner -> "
                 "Run workflow) with plan plans/example.md")
    return ["next:"] + [f"  {i}. {step}" for i, step in enumerate(steps, 1)]


@command("init", help="write .github/workflows/plan-runner{,-clock,-reconcile}.yml and plans/example.md into a repository",
         arguments=_init_arguments)
def cmd_init(args: argparse.Namespace) -> int:
    from runner.adapters.init import AUTHS, write_init

    import sys

    written = write_init(args.dir, force=args.force, action_ref=args.action_ref, auth=args.auth,
                         github_app=args.github_app,
                         warn=lambda text: print(f"warning: {text}", file=sys.stderr))
    for path in written:
        print(f"wrote {path}")
    for line in next_steps(written, AUTHS[args.auth].setup, github_app=args.github_app):
        print(line)
    from runner.adapters.init import billing_lines

    for line in billing_lines():
        print(line)
    return 0
