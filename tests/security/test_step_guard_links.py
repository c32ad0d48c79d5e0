"""The bots process measures and removes what a step leaves (its run directory, its /tmp) while
the step may still be changing it. A step may swap a directory for a link at any moment: the
bots process (root, or the install's own account) must then change, count and remove nothing
outside, least of all give an account's private files wider permissions."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from engine_adapter.sandbox.step_guard import _open_up_entry, _remove_tree, disk_usage


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _outside(tmp_path: Path) -> Path:
    """A private directory of the account's (a ~/.ssh), with a key in it."""
    private = tmp_path / "home" / ".ssh"
    private.mkdir(parents=True)
    (private / "id_ed25519").write_bytes(b"k" * 8192)
    private.chmod(0o500)
    return private


def test_opening_up_a_link_never_changes_its_target(tmp_path: Path) -> None:
    """The primitive the walk uses where a step made a directory unreadable: handed a link (what
    a swapped directory becomes), it leaves the link's target as it was."""
    private = _outside(tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    (run / "d").symlink_to(private)
    fd = os.open(run, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert _open_up_entry("d", fd) == 0
    finally:
        os.close(fd)
    assert _mode(private) == 0o500


def test_disk_usage_counts_inside_and_touches_nothing_outside(tmp_path: Path) -> None:
    private = _outside(tmp_path)
    run = tmp_path / "run"
    (run / "locked" / "deeper").mkdir(parents=True)
    (run / "locked" / "deeper" / "data").write_bytes(b"x" * 65536)
    (run / "locked" / "deeper").chmod(0o000)
    (run / "locked").chmod(0o000)
    (run / "to-home").symlink_to(private)
    (run / "to-key").symlink_to(private / "id_ed25519")

    used = disk_usage(run)

    assert used >= 65536  # the file in the directory the step locked is counted
    assert used < 65536 + 8192 + 64 * 1024  # the key behind the links is not
    assert _mode(run / "locked") & 0o700 == 0o700  # opened up, to be counted
    assert _mode(private) == 0o500


def test_removing_a_step_tree_leaves_link_targets_alone(tmp_path: Path) -> None:
    private = _outside(tmp_path)
    tree = tmp_path / "tmp-of-step"
    (tree / "a" / "b").mkdir(parents=True)
    (tree / "a" / "b" / "f").write_text("scratch")
    (tree / "a" / "b").chmod(0o000)
    (tree / "a" / "home").symlink_to(private)
    (tree / "a").chmod(0o500)

    _remove_tree(tree)

    assert not tree.exists()
    assert _mode(private) == 0o500
    assert (private / "id_ed25519").read_bytes() == b"k" * 8192


def test_a_directory_gone_counts_nothing_and_removes_quietly(tmp_path: Path) -> None:
    """A run's directory may go (cleanup, a step's own rm -rf) while its step is measured."""
    assert disk_usage(tmp_path / "gone") == 0
    _remove_tree(tmp_path / "gone")
