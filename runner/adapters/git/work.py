"""The face of the git room, for the callers that reach it as `work`: every name they use, from the module that
holds it (runner.adapters.git.invoke: running git; .objects: reading one repository; .trees: work trees and
plan-runner's own commits in them; .branches: the work branch; .evidence: a session's git evidence)."""

from __future__ import annotations

from git.exc import GitCommandError

from runner.adapters.git.branches import (
    branch_refspecs, commit_on_branch, ensure_work_branch, fast_forward, fetch_branch, move_branch, push_branch,
    push_leased, push_ref, remote_refs,
)
from runner.adapters.git.evidence import (
    collect_commits, commits_carrying, deleted_files, display_path, files_changed, paths_adding,
    protected_paths_changed,
)
from runner.adapters.git.invoke import (
    BOT_EMAIL, BOT_ENV, BOT_NAME, REVERT_TRAILER, WIP_TRAILER, ZERO, CatFile, git_text, judge_git_env, run_git,
    stderr_of,
)
from runner.adapters.git.objects import (
    Repository, current_branch, git_dir, head_sha, is_ancestor, is_symlink_at, objects_dir,
    read_file_at, ref_sha, remotes, tree_hash,
)
from runner.adapters.git.trees import (
    attach_tree, commit_files, commit_leftovers, has_checkout, is_dirty, release_tree, remove_tree, worktrees_on,
)

__all__ = [
    "BOT_EMAIL", "BOT_ENV", "BOT_NAME", "REVERT_TRAILER", "WIP_TRAILER", "ZERO", "CatFile", "GitCommandError",
    "Repository", "attach_tree", "branch_refspecs", "collect_commits", "commit_files",
    "commit_leftovers", "commit_on_branch", "commits_carrying", "current_branch", "deleted_files", "display_path",
    "ensure_work_branch", "fast_forward", "fetch_branch", "files_changed", "git_dir", "git_text", "has_checkout",
    "head_sha", "is_ancestor", "is_dirty", "is_symlink_at", "judge_git_env", "move_branch", "objects_dir",
    "paths_adding", "protected_paths_changed", "push_branch", "push_leased", "push_ref", "read_file_at", "ref_sha",
    "release_tree", "remote_refs", "remotes", "remove_tree", "run_git", "stderr_of", "tree_hash", "worktrees_on",
]
