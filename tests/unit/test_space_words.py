"""What a full file system looks like in the errors plan-runner catches (runner.drivers.session.space.exhausted)."""

from __future__ import annotations

import errno

from runner.core.errors import PlanRunnerError
from runner.drivers.session import space


def _git_failed(why: str) -> PlanRunnerError:
    return PlanRunnerError(what="could not check out 0123abcd for the gates", why=why, fix="check `git fsck`")


def test_gits_out_of_diskspace_is_a_full_file_system():
    """git writing an index on a full disk says `Out of diskspace`, not the C library's words."""
    why = "fatal: sha1 file '/r/.git/plan-runner/calc/gate.index.lock' write error. Out of diskspace"
    assert space.exhausted(_git_failed(why))


def test_the_c_librarys_words_and_errno_still_count_and_other_failures_do_not():
    assert space.exhausted(OSError(errno.ENOSPC, "No space left on device"))
    assert space.exhausted(_git_failed("error: unable to write file: No space left on device"))
    assert not space.exhausted(_git_failed("fatal: reference is not a tree: 0123abcd"))
