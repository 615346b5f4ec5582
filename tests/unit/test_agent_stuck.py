"""The built-in agent's stuck rules (runner.backends.anthropic.stuck), one by one, on plain records.

Each rule is pinned both ways: the loop it names is a stop, and the nearest thing that is iteration (an edit
between two runs of a failing gate, one repeat fewer, a result that differs) is not.
"""

from __future__ import annotations

from runner.backends.anthropic import stuck as stuck_mod
from runner.backends.anthropic.stuck import (
    ALTERNATION_STEPS,
    CYCLE_STEPS,
    ERROR_REPEATS,
    RESULT_REPEATS,
    Step,
    since_change,
    step,
    stuck,
)

GATE = {"command": "python -m pytest -q tests"}
RED = "exit code 1\nFAILED tests/test_calc.py::test_add - assert -1 == 5\n1 failed in 0.03s"


def gate(result: str = RED, ok: bool = False) -> Step:
    return step("run_shell", GATE, ok, result, changed=False)


def write(content: str = "x", changed: bool = True) -> Step:
    return step("write_file", {"path": "calc.py", "content": content}, True, "wrote 1 bytes to calc.py", changed)


def status() -> Step:
    return step("run_shell", {"command": "git status"}, True, "exit code 0\nnothing to commit, working tree clean", False)


def test_the_thresholds_are_a_careful_peers():
    """OpenHands' numbers: 3 identical errors, 4 identical results, A-B-A-B-A-B."""
    assert (ERROR_REPEATS, RESULT_REPEATS, ALTERNATION_STEPS, CYCLE_STEPS) == (3, 4, 6, 6)


def test_the_same_failing_call_three_times_with_no_change_is_repeated_error():
    found = stuck([gate()] * ERROR_REPEATS)
    assert found is not None and found.rule == "repeated_error"
    assert str(found).startswith("stuck (repeated_error): ") and "run_shell" in str(found) and "assert -1 == 5" in str(found)


def test_one_repeat_fewer_is_not_stuck():
    assert stuck([gate()] * (ERROR_REPEATS - 1)) is None
    assert stuck([status()] * (RESULT_REPEATS - 1)) is None


def test_the_gate_rerun_after_each_edit_is_iteration_not_a_repeat():
    """edit, gate red, edit, gate red...: every edit changed the tree, so no run of the gate repeats another."""
    steps = []
    for n in range(10):
        steps += [write(str(n)), gate()]
        assert stuck(steps) is None, n


def test_nothing_counts_across_a_change_to_the_work_tree():
    """Two failures, a change, one failure: three in all but only one since the change."""
    steps = [gate(), gate(), write(), gate()]
    assert since_change(steps) == [gate()]
    assert stuck(steps) is None
    assert stuck([*steps, gate(), gate()]).rule == "repeated_error"


def test_a_write_that_changed_nothing_does_not_reset_the_count():
    """The same content written again is no change (the digest is of the content): writing it and running the
    failing gate, over and over, is two calls taking turns."""
    assert stuck([write(changed=False), gate()] * (ALTERNATION_STEPS // 2)).rule == "alternation"
    assert stuck([write(changed=True), gate()] * (ALTERNATION_STEPS // 2)) is None


def test_a_different_error_is_not_the_same_failure():
    other = gate("exit code 1\nSyntaxError: invalid syntax")
    assert stuck([gate(), other, gate()]) is None


def test_durations_do_not_make_a_result_different():
    """Normalised results: a failing gate's timing changes from run to run, the failure does not."""
    steps = [gate(RED.replace("0.03s", f"0.0{n}s")) for n in range(ERROR_REPEATS)]
    assert stuck(steps).rule == "repeated_error"


def test_the_same_successful_call_again_and_again_is_repeated_result():
    """`git status` thirteen times in a row, each identical, is a stop at the fourth."""
    steps = []
    for _ in range(13):
        steps.append(status())
        if stuck(steps) is not None:
            break
    assert len(steps) == RESULT_REPEATS and stuck(steps).rule == "repeated_result"
    assert "git status" in str(stuck(steps))


def test_the_same_call_with_a_different_result_is_not_a_repeat():
    steps = [step("run_shell", {"command": "ls"}, True, f"exit code 0\nfile{n}", False) for n in range(6)]
    assert stuck(steps) is None


def test_the_same_call_interrupted_by_another_is_not_in_a_row():
    steps = [status(), status(), status(), step("read_file", {"path": "a.py"}, True, "x", False), status()]
    assert stuck(steps) is None


def test_two_calls_taking_turns_is_alternation():
    read = step("read_file", {"path": "calc.py"}, True, "def add(a, b):\n    return a - b\n", False)
    steps = [read, gate()] * (ALTERNATION_STEPS // 2)
    found = stuck(steps)
    assert found is not None and found.rule == "alternation"
    assert stuck(steps[:-1]) is None  # five steps: not yet


def test_alternation_needs_two_different_calls_each_with_its_own_result_every_time():
    read = step("read_file", {"path": "calc.py"}, True, "v1", False)
    read2 = step("read_file", {"path": "calc.py"}, True, "v2", False)
    assert stuck([read, gate(), read2, gate(), read, gate()]) is None


def test_alternation_across_a_change_is_not_stuck():
    read = step("read_file", {"path": "calc.py"}, True, "x", False)
    steps = [read, gate(), read, write(), read, gate(), read, gate()]
    assert stuck(steps) is None


def test_the_input_is_compared_canonical():
    """The same input with its keys in another order is the same call."""
    a = step("edit_file", {"path": "a", "old_string": "x", "new_string": "y"}, False, "not found", False)
    b = step("edit_file", {"new_string": "y", "old_string": "x", "path": "a"}, False, "not found", False)
    assert a == b


def test_the_rules_are_read_in_order_errors_first(monkeypatch):
    """A failing call repeated is named as an error (the more specific rule), not as a repeated result."""
    steps = [gate()] * RESULT_REPEATS
    assert stuck(steps).rule == "repeated_error"
    monkeypatch.setattr(stuck_mod, "ERROR_REPEATS", 99)
    assert stuck(steps).rule == "repeated_result"


def test_a_longer_loop_with_nothing_new_is_a_cycle():
    """The 1.5B's loop: the same write (no change), the gate's name run as a command, a failing edit, again."""
    same_write = write(changed=False)
    run = step("run_shell", {"command": "tests"}, False, "exit code 127\nbash: tests: command not found", False)
    edit = step("edit_file", {"path": "t.py", "old_string": "tests", "new_string": "x"}, False, "not found", False)
    steps = [same_write, run, edit] * 3
    assert stuck(steps[:-1]) is None  # eight steps: the last six are not all repeats yet
    found = stuck(steps)
    assert found is not None and found.rule == "cycle" and "edit_file" in str(found)


def test_steps_that_bring_something_new_are_not_a_cycle():
    reads = [step("read_file", {"path": f"f{n}.py"}, True, "x", False) for n in range(4)]
    run = gate()
    steps = [run, reads[0], run, reads[1], run, reads[2], run, reads[3], run]
    assert stuck(steps) is None


def test_the_same_calls_with_new_results_are_not_a_cycle():
    """A log that grows between reads is news, even with the same calls."""
    steps = []
    for n in range(6):
        steps += [step("read_file", {"path": "log.txt"}, True, "line\n" * (n + 1), False),
                  step("run_shell", {"command": "sleep 1"}, True, "exit code 0", False)]
    assert stuck(steps) is None


def edit(old: str, new: str, tree: str) -> Step:
    return step("edit_file", {"path": "tests/test_m.py", "old_string": old, "new_string": new}, True, "edited", True,
                tree)


def test_an_edit_flipping_a_file_between_two_states_is_toggle():
    """3, 4, 3, 4...: each edit changes the tree, so only the states it comes back to show the loop (the 1.5B
    flipped a test's expected value between two numbers until the time limit)."""
    steps = []
    for n in range(10):
        steps += [edit("3", "4", "B") if n % 2 == 0 else edit("4", "3", "A"), gate()]
        found = stuck(steps)
        if found is not None:
            break
    assert found is not None and found.rule == "toggle" and n == 4  # B A B A B: B a third time
    assert "came back to the same state 3 times" in str(found) and "edit_file" in str(found)


def test_edits_that_reach_new_states_or_come_back_once_are_iteration():
    steps = [edit("1", "2", "B"), gate(), edit("2", "1", "A"), gate(), edit("1", "3", "C"), gate(), edit("3", "4", "D")]
    assert stuck(steps) is None
    assert stuck([*steps, edit("4", "1", "A")]) is None  # A a second time: not yet
    assert stuck([*steps, edit("4", "1", "A"), gate(), edit("1", "2", "B"), edit("2", "1", "A")]).rule == "toggle"


def test_a_step_that_changed_nothing_carries_no_state():
    assert step("read_file", {"path": "a"}, True, "x", False, "A").tree == ""
    assert stuck([write(changed=False)] + [step("read_file", {"path": str(n)}, True, "x", False, "A")
                                           for n in range(5)]) is None


def commit(tree: str) -> Step:
    return step("run_shell", {"command": "git commit -am work"}, True, "exit code 0", True, tree)


def test_a_flip_committed_each_time_is_toggle_and_a_commit_is_no_visit():
    """The 1.5B flipped `* 100` and `// 100` with a commit after each: the files come back, HEAD never does. The
    commit of the content just written stays in that state (no visit), so edit-commit-edit-commit is iteration
    until a state is entered a third time."""
    steps = [edit("a", "b", "B"), commit("B"), edit("b", "a", "A"), commit("A"), edit("a", "b", "B"), commit("B")]
    assert stuck(steps) is None  # B entered twice; the commits are not visits
    found = stuck([*steps, edit("b", "a", "A"), commit("A"), edit("a", "b", "B")])
    assert found is not None and found.rule == "toggle"
    assert stuck([*steps, edit("b", "a", "A"), commit("A"), edit("a", "c", "C")]) is None
