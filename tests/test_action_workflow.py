"""What `init`'s workflow asks of GitHub's concurrency groups: a reply job per issue at a time, every comment in
its turn. GitHub keeps one pending run per group by default and cancels it when another arrives (three
`/plan-runner` comments while a reply runs would lose the middle one); `queue: max` keeps up to 100 pending, in
order ("Control the concurrency of workflows and jobs"; `queue: max` is refused with `cancel-in-progress: true`)."""

from __future__ import annotations

import yaml

from runner.adapters.init import write_init
from runner.adapters.source import Source


def test_reply_jobs_queue_every_comment_and_never_cancel_one_running(tmp_path) -> None:
    write_init(tmp_path, source=Source("octo-org/plan-runner", "0" * 40, "0.1.0", "read from the checkout"))
    jobs = yaml.safe_load((tmp_path / ".github/workflows/plan-runner.yml").read_text())["jobs"]
    reply = jobs["reply"]["concurrency"]
    assert reply["queue"] == "max" and reply["cancel-in-progress"] is False
    assert "github.event.issue.number" in reply["group"]
    # A session or tick that waits may be replaced by a newer one: the tick re-dispatches a lost session.
    assert "queue" not in jobs["session"]["concurrency"] and "queue" not in jobs["tick"]["concurrency"]
