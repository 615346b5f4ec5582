"""The publishing and dispatching ports' contract (`runner.core.ports.Parker`, `Dispatcher`), checked the same way on
both implementations: the GitHub driver (PyGithub over real HTTP against the local GitHub server) and the local
loop's (report files, "the loop goes on"). The drivers reach them only through the port: no probing for a member
(`getattr`/`hasattr`), nothing assigned onto them from outside."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.adapters.github.api import RetryPolicy
from runner.adapters.github.client import GitHubDriver
from runner.adapters.github.events import GitHubContext
from runner.core.ports import Dispatcher, Parker
from runner.drivers.cli.local import LocalDispatcher, LocalParker
from tests.servers.github import GitHubServer

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "ghs_contractTokenValue0123456789"


class Published:
    """One implementation of both ports, and how to make a work branch it can publish."""

    def __init__(self, parker: Parker, dispatcher: Dispatcher, branch=lambda name: None) -> None:
        self.parker, self.dispatcher, self.branch = parker, dispatcher, branch


@pytest.fixture(params=["local", "github"])
def impl(request, tmp_path: Path) -> Iterator[Published]:
    if request.param == "local":
        yield Published(LocalParker(tmp_path / "reports"), LocalDispatcher())
        return
    with GitHubServer(token=TOKEN) as srv:
        srv.actions_can_create_prs = True
        env = {"GITHUB_API_URL": srv.url, "GITHUB_REPOSITORY": f"{srv.owner}/{srv.repo}", "GITHUB_RUN_ID": "7",
               "GITHUB_WORKFLOW_REF": "octo-org/demo/.github/workflows/plan-runner.yml@refs/heads/main",
               "GITHUB_REF_NAME": "main"}
        with GitHubDriver(GitHubContext.from_env(env), TOKEN, retry=RetryPolicy.fast()) as driver:
            yield Published(driver, driver, branch=srv.set_branch)


def _members(protocol: type) -> set[str]:
    return {n for n in vars(protocol) if not n.startswith("_")}


def test_each_implementation_has_every_member_of_both_ports(impl: Published) -> None:
    assert isinstance(impl.parker, Parker) and isinstance(impl.dispatcher, Dispatcher)
    missing = sorted(n for n in _members(Parker) if not hasattr(impl.parker, n))
    missing += sorted(n for n in _members(Dispatcher) if not hasattr(impl.dispatcher, n))
    assert missing == []
    assert isinstance(impl.parker.local, bool)


def test_a_park_is_published_once_per_plan_and_found_again(impl: Published) -> None:
    first = impl.parker.open_park("add-auth", "plan-runner: add-auth needs a human", "Why: gates red twice.")
    again = impl.parker.open_park("add-auth", "plan-runner: add-auth needs a human", "Why: still red.")
    other = impl.parker.open_park("other", "plan-runner: other needs a human", "Why: a limit.")
    assert isinstance(first, str) and first == again and other != first


def test_a_finish_is_published_once_per_plan(impl: Published) -> None:
    impl.branch("plan-runner/add-auth")
    first = impl.parker.open_finish("add-auth", "plan-runner/add-auth", "main", "Add auth", "report 1")
    second = impl.parker.open_finish("add-auth", "plan-runner/add-auth", "main", "Add auth", "report 2")
    assert isinstance(first, str) and first == second


def test_the_watch_view_and_the_run_it_belongs_to(impl: Published) -> None:
    impl.parker.follow_run(lambda: "20261206T120000.000000Z", lambda head: "the run before a reset")
    url = impl.parker.update_watch("add-auth", "plan-runner/add-auth", "main", "Add auth", "nothing yet", None)
    assert url is None or isinstance(url, str)


def test_a_dispatch_reports_only_runs_it_started(impl: Published) -> None:
    run = impl.dispatcher.dispatch_next("plans/add-auth.md", "add-auth#3")
    assert run is None or isinstance(run, int)
    runs = list(impl.dispatcher.dispatched_runs)
    assert all(key == "add-auth#3" and isinstance(run_id, int) and isinstance(url, str) for key, run_id, url in runs)
    assert len(runs) <= 1


PORT_NAMES = {"parker", "dispatcher", "driver", "later"}


def test_no_driver_probes_a_port_or_assigns_onto_it() -> None:
    """`getattr(driver, ...)`, `hasattr(parker, ...)` or `driver.x = ...` in runner/drivers: the port says it all."""
    wrong = []
    for path in sorted((ROOT / "runner" / "drivers").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in {"getattr", "hasattr"}:
                target = ast.unparse(node.args[0]) if node.args else ""
                if target.rpartition(".")[2] in PORT_NAMES:
                    wrong.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
            if isinstance(node, (ast.Assign, ast.AugAssign)):
                for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    if isinstance(t, ast.Attribute) and ast.unparse(t.value).rpartition(".")[2] in PORT_NAMES:
                        wrong.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(t)} = ...")
    assert wrong == []


def test_a_verdict_check_is_published_where_there_are_checks(impl: Published) -> None:
    from runner.adapters.github.verdict_check import VerdictCheck

    head = impl.branch("plan-runner/add-auth")
    check = VerdictCheck(name="plan-runner / add-auth", conclusion="success", title="Advanced", summary="s", text="t")
    url = impl.parker.publish_check(check, head or "0" * 40)
    assert url is None if impl.parker.local else isinstance(url, str)
