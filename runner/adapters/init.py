"""`plan-runner init`: write the workflow and an example plan into a repository.

Templates use `[[ ]]`/`[% %]` delimiters because the workflow is full of `${{ }}`.
Existing files are never overwritten without `--force`; nothing is written
unless every file can be.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import jinja2
import yaml

from runner.core.errors import PlanRunnerError
from runner.adapters.source import Source, installed_source

DEFAULT_ACTION_REF = "plan-runner/plan-runner@v0"
DEFAULT_SERVER = "https://github.com"
_SHA = re.compile(r"[0-9a-f]{40}")
_REF = re.compile(r"(?P<repo>[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+(?:/[^@\s]+)?)@(?P<ref>[^\s@]+)")
WORKFLOW_PATH = ".github/workflows/plan-runner.yml"
CLOCK_PATH = ".github/workflows/plan-runner-clock.yml"
RECONCILE_PATH = ".github/workflows/plan-runner-reconcile.yml"
EXAMPLE_PLAN_PATH = "plans/example.md"

_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("runner", "templates"),
    undefined=jinja2.StrictUndefined,
    variable_start_string="[[", variable_end_string="]]",
    block_start_string="[%", block_end_string="%]",
    comment_start_string="[#", comment_end_string="#]",
    keep_trailing_newline=True,
    autoescape=False,
)


AWS_CREDENTIALS_ACTION = "aws-actions/configure-aws-credentials@e6de054238d6b7531b4efff3b6587d9aade6a06c # v6.2.3"
GOOGLE_AUTH_ACTION = "google-github-actions/auth@7c6bc770dae815cd3e89ee6cdf493a5fab2cc093 # v3.0.0"


@dataclass(frozen=True)
class Auth:
    """One way of paying for the agent, as the workflow `init --auth NAME` writes asks for it."""

    backend: str
    provider: str | None  # the example plan's `agent.provider`
    inputs: tuple[tuple[str, str], ...]  # the action's `with:` lines
    setup: str  # what the user sets up in the repository (the `next:` line)
    steps: tuple[str, ...] = ()  # workflow steps before plan-runner's (each a YAML list item, indented 6)
    env: tuple[tuple[str, str], ...] = ()  # plan-runner's step's `env:`
    id_token: bool = False  # the session job asks for `id-token: write` (OIDC), only then
    model: str | None = None


AUTHS: dict[str, Auth] = {
    "api-key": Auth("claude-code", None, (("anthropic-api-key", "${{ secrets.ANTHROPIC_API_KEY }}"),),
                    "add the ANTHROPIC_API_KEY secret", model="claude-sonnet-4-5"),
    "oauth-token": Auth("claude-code", None, (("claude-code-oauth-token", "${{ secrets.CLAUDE_CODE_OAUTH_TOKEN }}"),),
                        "add the CLAUDE_CODE_OAUTH_TOKEN secret (`claude setup-token` makes it, with a Claude "
                        "subscription)", model="claude-sonnet-4-5"),
    "bedrock": Auth(
        "claude-code", "bedrock", (), "set the repository variables AWS_REGION and PLAN_RUNNER_AWS_ROLE_ARN (an IAM "
        "role whose trust policy accepts this repository's GitHub OIDC token, allowed bedrock:InvokeModel and "
        "bedrock:InvokeModelWithResponseStream)",
        steps=(f"""- name: AWS credentials for Bedrock, through OIDC (no stored key)
  uses: {AWS_CREDENTIALS_ACTION}
  with:
    role-to-assume: ${{{{ vars.PLAN_RUNNER_AWS_ROLE_ARN }}}}
    aws-region: ${{{{ vars.AWS_REGION }}}}
    role-duration-seconds: 10800  # the session job's timeout; the role's maximum must allow it""",),
        id_token=True),
    "vertex": Auth(
        "claude-code", "vertex", (), "set the repository variables GCP_WORKLOAD_IDENTITY_PROVIDER, "
        "GCP_SERVICE_ACCOUNT (allowed aiplatform.endpoints.predict), ANTHROPIC_VERTEX_PROJECT_ID and CLOUD_ML_REGION",
        steps=(f"""- name: Google Cloud credentials for Vertex AI, through OIDC (no stored key)
  uses: {GOOGLE_AUTH_ACTION}
  with:
    workload_identity_provider: ${{{{ vars.GCP_WORKLOAD_IDENTITY_PROVIDER }}}}
    service_account: ${{{{ vars.GCP_SERVICE_ACCOUNT }}}}
    create_credentials_file: true""",),
        env=(("ANTHROPIC_VERTEX_PROJECT_ID", "${{ vars.ANTHROPIC_VERTEX_PROJECT_ID }}"),
             ("CLOUD_ML_REGION", "${{ vars.CLOUD_ML_REGION }}")),
        id_token=True),
    "codex-api-key": Auth("codex", None, (("openai-api-key", "${{ secrets.OPENAI_API_KEY }}"),),
                          "add the OPENAI_API_KEY secret"),
    "codex-login": Auth("codex", None, (("codex-auth-json", "${{ secrets.CODEX_AUTH_JSON }}"),),
                        "add the CODEX_AUTH_JSON secret: the content of ~/.codex/auth.json after `codex login` "
                        "(a ChatGPT login; OpenAI advises it for private repositories only)"),
}


# `init --github-app`: the session job's push token minted from a GitHub App (docs/github-actions.md, "A push token
# from a GitHub App"). The id is not secret: a repository variable; the private key is: a secret. They reach the
# action as inputs, and plan-runner's step through `env:` only (action.yml).
APP_ID_VARIABLE = "PLAN_RUNNER_APP_ID"
APP_KEY_SECRET = "PLAN_RUNNER_APP_PRIVATE_KEY"
GITHUB_APP_INPUTS = (("app-id", "${{ vars.%s }}" % APP_ID_VARIABLE),
                     ("app-private-key", "${{ secrets.%s }}" % APP_KEY_SECRET))
GITHUB_APP_SETUP = (f"create a GitHub App with Contents and Pull requests: read and write, install it on this "
                    f"repository, and store its App ID as the repository variable {APP_ID_VARIABLE} and its private "
                    f"key (the whole .pem) as the secret {APP_KEY_SECRET} (docs/github-actions.md, \"A push token "
                    "from a GitHub App\")")


@dataclass(frozen=True)
class InitOptions:
    action_ref: str = DEFAULT_ACTION_REF
    action_comment: str = ""  # "# v0" after a sha the tag was resolved to
    base: str = "main"
    # Every 30 minutes, off the top of the hour (GitHub delays and drops scheduled runs most at :00).
    cron: str = "17,47 * * * *"
    timeout_minutes: int = 180
    test_command: str = "make test"
    auth: str = "api-key"  # a key of AUTHS
    github_app: bool = False  # the session job passes `app-id` and `app-private-key` (GITHUB_APP_INPUTS)
    # what the example `setup:` installs for a Python project: the `test` extra when pyproject.toml declares one,
    # else the project and pytest by name (a missing extra is only a warning to pip: pytest would never come)
    python_install: str = ".venv/bin/pip install -q -e . pytest"
    # the files that install reads, as the cache's `key`: those of the project's that exist
    python_key: tuple[str, ...] = ("pyproject.toml",)


def parse_action_ref(text: str) -> tuple[str, str]:
    """(`owner/repo[/path]`, ref) of an action reference; `./` (a local action) is ("./", "")."""
    if text.startswith("./"):
        return text, ""
    match = _REF.fullmatch(text.strip())
    if match is None:
        raise PlanRunnerError(what=f"action reference {text!r} is not `owner/repo@ref`",
                              why="the workflow's `uses:` needs the action's repository and a version",
                              fix="pass e.g. --action-ref plan-runner/plan-runner@<40-character commit sha>")
    return match["repo"], match["ref"]


def resolve_ref(url: str, ref: str, timeout_s: float = 15.0) -> str | None:
    """The commit sha `ref` (a tag or branch) names in the git repository at `url`; None if unknown.

    Pinning by sha keeps a moved tag from changing what the workflow runs."""
    try:
        proc = subprocess.run(["git", "ls-remote", url, f"refs/tags/{ref}^{{}}", f"refs/tags/{ref}",
                               f"refs/heads/{ref}"], capture_output=True, text=True, timeout=timeout_s,
                              env={"GIT_TERMINAL_PROMPT": "0", "PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    except (OSError, subprocess.TimeoutExpired):
        return None
    refs = {name: sha for sha, name in (line.split("\t", 1) for line in proc.stdout.splitlines() if "\t" in line)}
    for name in (f"refs/tags/{ref}^{{}}", f"refs/tags/{ref}", f"refs/heads/{ref}"):  # peeled tag first
        if _SHA.fullmatch(refs.get(name, "")):
            return refs[name]
    return None


def pin_action_ref(text: str, server: str = DEFAULT_SERVER) -> tuple[str, str, bool]:
    """(the `uses:` value, a trailing comment, pinned?) for an action reference."""
    repo, ref = parse_action_ref(text)
    if repo == text:  # the action in this very repository: `./` is what GitHub, actionlint and act all read
        return text, "  # zizmor: ignore[self-repository]", True
    if _SHA.fullmatch(ref):
        return text, "", True
    owner_repo = "/".join(repo.split("/")[:2])
    sha = resolve_ref(f"{server.rstrip('/')}/{owner_repo}" if "://" in server else f"{server}/{owner_repo}", ref)
    if sha is None:
        return text, "", False
    return f"{repo}@{sha}", f" # {ref}", True


def render_workflow(opts: InitOptions = InitOptions()) -> str:
    """The workflow text; `opts.action_ref` as given (see `pin_action_ref` for pinning)."""
    parse_action_ref(opts.action_ref)
    auth = auth_of(opts.auth)
    steps = "".join("".join(f"      {line}\n" if line else "\n" for line in step.splitlines()) for step in auth.steps)
    return _ENV.get_template("workflow.yml.j2").render(
        action_ref=opts.action_ref, action_comment=opts.action_comment, example_plan=EXAMPLE_PLAN_PATH,
        cron=opts.cron, timeout_minutes=opts.timeout_minutes, auth=auth, auth_steps=steps,
        app_inputs=GITHUB_APP_INPUTS if opts.github_app else ())


def auth_of(name: str) -> Auth:
    if name not in AUTHS:
        raise PlanRunnerError(what=f"unknown --auth {name!r}", why="init writes the workflow for one way of paying",
                              fix="use one of: " + ", ".join(AUTHS))
    return AUTHS[name]


def render_clock(opts: InitOptions = InitOptions()) -> str:
    """The clock: the tick's schedule in a workflow of its own, enabled only while a plan waits on it."""
    parse_action_ref(opts.action_ref)
    return _ENV.get_template("clock.yml.j2").render(
        action_ref=opts.action_ref, action_comment=opts.action_comment, cron=opts.cron,
        clock_file=CLOCK_PATH.rsplit("/", 1)[1], session_file=WORKFLOW_PATH.rsplit("/", 1)[1])


def render_reconcile(opts: InitOptions = InitOptions()) -> str:
    """The reconcile workflow: a session's run that ended without succeeding (`workflow_run`)."""
    parse_action_ref(opts.action_ref)
    return _ENV.get_template("reconcile.yml.j2").render(action_ref=opts.action_ref, action_comment=opts.action_comment)


def old_single_workflow(text: str) -> bool:
    """plan-runner's workflow from before the clock had its own file: the tick job in the session workflow."""
    try:
        wf = yaml.safe_load(text)
    except yaml.YAMLError:
        return False
    on = wf.get(True, wf.get("on")) if isinstance(wf, dict) else None
    jobs = wf.get("jobs") if isinstance(wf, dict) else None
    return isinstance(on, dict) and "schedule" in on and isinstance(jobs, dict) and "workflow_dispatch" in on and any(
        isinstance(step, dict) and isinstance(step.get("with"), dict) and step["with"].get("mode") == "tick"
        for job in jobs.values() if isinstance(job, dict) for step in job.get("steps") or ())


MIGRATE_FIX = (
    "run `plan-runner init --force` (it rewrites .github/workflows/plan-runner.yml without the schedule and the tick "
    "job, adds plan-runner-clock.yml and plan-runner-reconcile.yml, and rewrites plans/example.md: move aside what you "
    "changed in them and carry it over), then commit the workflow files on the default branch. Plans and their state "
    "are kept as they are")


def billing_lines(opts: InitOptions = InitOptions()) -> list[str]:
    """What the repository will be billed for the files init writes (docs/github-actions.md, "What it costs";
    benchmarks/billing.py computes the figures from these files)."""
    per_hour = ticks_per_hour(opts.cron)
    return [
        "billing: GitHub bills each job of a private repository by the minute, rounded up (public repositories: free).",
        "billing: nothing runs on a schedule while no plan waits: an idle repository, a finished plan or a parked "
        "one is billed 0 minutes a month (one tick after you commit the files, which turns the clock off).",
        f"billing: a plan waiting out a rate or usage limit is billed one tick a job while it waits ({per_hour} an "
        f"hour: a 5-hour wait, at most {per_hour * 5 + 1} minutes), then the clock turns itself off.",
        "billing: each session is one job, billed its own minutes (agent, gates, about 1 minute of set-up), plus the "
        f"clock's ticks while sessions run ({per_hour} an hour), which find a session whose job died: GitHub sends no "
        "workflow_run for a run the job's token dispatched.",
    ]


def ticks_per_hour(cron: str) -> int:
    """How many times an hour a `M H * * *` cron with `H` = `*` fires (the clock's form: minutes, then `*`)."""
    minute, hour, *rest = cron.split()
    if hour != "*" or any(f != "*" for f in rest):
        raise ValueError(f"the clock's cron is `minutes * * * *`, not {cron!r}")
    count = 0
    for part in minute.split(","):
        if part.startswith("*/"):
            count += len(range(0, 60, int(part[2:])))
        elif "-" in part:
            lo, hi = part.split("-")
            count += int(hi) - int(lo) + 1
        else:
            count += 1
    return count


def render_example_plan(opts: InitOptions = InitOptions()) -> str:
    auth = auth_of(opts.auth)
    return _ENV.get_template("example_plan.md.j2").render(base=opts.base, test_command=opts.test_command,
                                                          python_install=opts.python_install,
                                                          python_key="[" + ", ".join(opts.python_key) + "]",
                                                          backend=auth.backend, provider=auth.provider,
                                                          model=auth.model)


def _default_branch(repo: Path) -> str:
    """The branch the work tree is on, so the example plan's `base` is right; `main` otherwise."""
    head = repo / ".git" / "HEAD"
    try:
        text = head.read_text(encoding="utf-8").strip()
    except OSError:
        return "main"
    return text.removeprefix("ref: refs/heads/") if text.startswith("ref: refs/heads/") else "main"


# Requirement files of a project's tests and tools, which `pip install -e .` never reads: the example set-up installs
# them too, or a test importing what only they name fails on the base (the cache's key names them already).
PYTHON_DEV_REQUIREMENTS = ("requirements-dev.txt", "requirements-test.txt")


def _python_install(repo: Path) -> str:
    """The example set-up's install line: the `test` extra only when pyproject.toml declares it (else pytest by
    name), and the dev/test requirement files the repository has."""
    import tomllib

    try:
        data = tomllib.loads((repo / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = {}
    extras = (data.get("project") or {}).get("optional-dependencies") or {}
    line = (".venv/bin/pip install -q -e .[test]" if isinstance(extras, dict) and "test" in extras
            else InitOptions.python_install)
    files = [name for name in PYTHON_DEV_REQUIREMENTS if (repo / name).is_file()]
    return line + "".join(f" -r {name}" for name in files)


PYTHON_KEY_FILES = ("pyproject.toml", "setup.py", "setup.cfg", "requirements.txt", "requirements-dev.txt",
                    "requirements-test.txt")


def _python_key(repo: Path) -> tuple[str, ...]:
    """The example set-up cache's `key`: the files of PYTHON_KEY_FILES the repository has (what `pip install -e .`
    reads); pyproject.toml alone when it has none of them."""
    return tuple(name for name in PYTHON_KEY_FILES if (repo / name).is_file()) or InitOptions.python_key


def _test_command(repo: Path) -> str:
    if (repo / "pyproject.toml").exists() or (repo / "setup.py").exists():
        return "python -m pytest -q"
    if (repo / "package.json").exists():
        return "npm test"
    if (repo / "Cargo.toml").exists():
        return "cargo test"
    if (repo / "go.mod").exists():
        return "go test ./..."
    return "make test"


def installed_action_ref(source: Source | None, warn=lambda text: None) -> tuple[str, str] | None:
    """(`uses:` value, comment) pinned to the commit this plan-runner was installed from, or None (warned)."""
    if source is None:
        warn("plan-runner cannot tell which commit it was installed from (no commit was recorded when it was "
             f"built, and it does not run from a git checkout); the workflow uses {DEFAULT_ACTION_REF}, "
             "resolved to a sha if GitHub answers. Pin it yourself: "
             "`plan-runner init --action-ref <owner>/<repo>@<40-character commit sha>`")
        return None
    if not source.repository:
        warn(f"plan-runner was installed from commit {source.commit} ({source.how}), but its origin is not a "
             "GitHub repository the workflow could name; pass `--action-ref <owner>/<repo>@" + source.commit + "`")
        return None
    if source.dirty:
        warn(f"the checkout plan-runner runs from has uncommitted changes; the workflow pins {source.commit}, "
             "which does not hold them: commit and push them, then run `plan-runner init --force` again")
    return f"{source.repository}@{source.commit}", f" # v{source.version}"


def write_init(directory: Path, *, force: bool = False, action_ref: str | None = None,
               server: str = DEFAULT_SERVER, warn=lambda text: None,
               source: Source | None | bool = True, auth: str = "api-key", github_app: bool = False) -> list[Path]:
    """Write the workflow and the example plan; returns the paths written.

    Without `action_ref` the workflow pins the commit this plan-runner was installed from
    (`runner.adapters.source`; `source` overrides what is found, True: look). A tag or branch is resolved to its
    commit sha (`git ls-remote`); when that fails the tag is written as given and `warn` says how to pin it.
    `github_app`: the session job passes the GitHub App's `app-id` and `app-private-key` (GITHUB_APP_INPUTS)."""
    repo = Path(directory)
    if not repo.is_dir():
        raise PlanRunnerError(what=f"{repo} is not a directory", why="init writes into an existing repository",
                              fix="create it (`git init`) or pass the repository's path")
    pinned_here = None
    if action_ref is None:
        pinned_here = installed_action_ref(installed_source() if source is True else source or None, warn)
    if pinned_here is not None:
        uses, comment = pinned_here
    else:
        uses, comment, pinned = pin_action_ref(action_ref or DEFAULT_ACTION_REF, server)
        if not pinned:
            warn(f"could not resolve {action_ref or DEFAULT_ACTION_REF} to a commit sha; the workflow uses the "
                 "tag as written. Pin it (`--action-ref owner/repo@<40-character sha>`): a tag can be moved to "
                 "other code.")
    auth_of(auth)  # an unknown way is refused before anything is resolved or written
    opts = InitOptions(action_ref=uses, action_comment=comment, base=_default_branch(repo),
                       test_command=_test_command(repo), auth=auth, github_app=github_app,
                       python_install=_python_install(repo), python_key=_python_key(repo))
    files = {repo / WORKFLOW_PATH: render_workflow(opts), repo / CLOCK_PATH: render_clock(opts),
             repo / RECONCILE_PATH: render_reconcile(opts), repo / EXAMPLE_PLAN_PATH: render_example_plan(opts)}
    existing = [p for p in files if p.exists()]
    old = repo / WORKFLOW_PATH
    if not force and old.is_file() and old_single_workflow(old.read_text(encoding="utf-8", errors="replace")):
        raise PlanRunnerError(
            what=f"{old} is plan-runner's old single workflow: its tick runs every 30 minutes whatever waits",
            why="that is about 1,440 billable minutes a month on a private repository (72 % of the free plan's 2,000), "
                "billed while no plan waits; plan-runner now runs the tick in a clock it enables only while a plan "
                "waits or a session runs",
            fix=MIGRATE_FIX)
    if existing and not force:
        names = ", ".join(str(p) for p in existing)
        raise PlanRunnerError(what=f"refusing to overwrite {names}",
                              why="init never replaces files you may have edited",
                              fix="move them aside, or run `plan-runner init --force` to overwrite them")
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return list(files)
