"""chakra.io.forkmap: results in piece order, errors of a child raised here, a dead child reported."""

from __future__ import annotations

import errno
import os
import re
import signal
import tempfile
import time
from pathlib import Path

import pytest

from chakra.errors import ChakraError, TraceFormatError
from chakra.io import forkmap

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork on this platform")



_FOLDER = [""]   # the temporary folder of the running test


@pytest.fixture(autouse=True)
def _own_temp_folder(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    _temp_folder(monkeypatch, str(tmp_path_factory.mktemp("parts")))


def _temp_folder(monkeypatch: pytest.MonkeyPatch, folder: str) -> None:
    """Make ``folder`` the temporary folder of both ways forkmap makes its files (TMPDIR, and tempfile's)."""
    monkeypatch.setenv("TMPDIR", folder)
    monkeypatch.setattr(tempfile, "tempdir", folder)
    _FOLDER[0] = folder

def test_split_covers_the_range_in_order() -> None:
    assert forkmap.split(10, 1, 3) == [range(0, 4), range(4, 7), range(7, 10)]
    assert forkmap.split(10, 4, 3) == [range(0, 5), range(5, 10)]   # pieces of >= 4: two
    assert forkmap.split(3, 4, 8) == [range(0, 3)]
    assert forkmap.split(0, 1, 2) == [range(0, 0)]


def test_parts_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHAKRA_PARTS", "3")
    assert forkmap.parts() == 3
    monkeypatch.setenv("CHAKRA_PARTS", "1")
    assert forkmap.parts() == 1
    assert forkmap.split(100, 1) == [range(0, 100)]
    monkeypatch.delenv("CHAKRA_PARTS")
    assert forkmap.parts() == len(os.sched_getaffinity(0))


def test_results_come_back_in_order_from_other_processes() -> None:
    got = forkmap.fork_map(lambda r: (os.getpid(), [i * i for i in r]), forkmap.split(9, 1, 3), "squares")
    assert [v for _, part in got for v in part] == [i * i for i in range(9)]
    pids = [pid for pid, _ in got]
    assert pids[0] == os.getpid() and len(set(pids)) == 3


def _fail(r: range) -> int:
    if r.start > 0:
        raise TraceFormatError("node 7 has no id", "x.json")
    return 1


def test_a_child_error_is_raised_here_with_its_type() -> None:
    with pytest.raises(TraceFormatError, match="x.json: node 7 has no id"):
        forkmap.fork_map(_fail, [range(0, 1), range(1, 2)], "decoding x.json")


def _die(r: range) -> int:
    if r.start > 0:
        os.kill(os.getpid(), signal.SIGKILL)
    return 1


def test_a_dead_child_is_reported() -> None:
    with pytest.raises(ChakraError, match=r"decoding x.json died \(killed by signal 9"):
        forkmap.fork_map(_die, [range(0, 1), range(1, 2)], "decoding x.json")


def _unpicklable(r: range) -> object:
    return [list(range(400_000)), lambda: None] if r.start > 0 else []


def test_a_result_that_does_not_pickle_is_reported_not_taken_for_a_crash() -> None:
    # the child has written the list (2 MB of pickle: more than its 1 MB buffer) before it meets the lambda;
    # the parent does not read what was written
    expected = r"squares died \(its result could not be pickled\); CHAKRA_PARTS=1"
    with pytest.raises(ChakraError, match=expected):
        forkmap.fork_map(_unpicklable, [range(0, 1), range(1, 2)], "squares")


def test_a_large_result_comes_back_whole_and_leaves_no_file(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # 3 x 4 MB of bytes plus 200k small ints, each child's through its own temporary file
    _temp_folder(monkeypatch, str(tmp_path))
    got = forkmap.fork_map(lambda r: (bytes([r.start]) * (4 << 20), list(range(r.start, r.start + 200_000))),
                           [range(0, 1), range(1, 2), range(2, 3)], "big")
    assert [b == bytes([i]) * (4 << 20) for i, (b, _) in enumerate(got)] == [True] * 3
    assert [ints[-1] for _, ints in got] == [199_999, 200_000, 200_001]
    assert list(tmp_path.iterdir()) == []   # unlinked as soon as it was opened


def _too_big_for_the_disk(r: range) -> object:
    import resource

    if r.start > 0:   # in the child: a file-size limit of 1 KB stands in for a full disk (Python ignores
        # SIGXFSZ, so the write fails with EFBIG); 2 MB of pickle: the failure comes while it is written
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    return list(range(400_000))


def test_a_result_that_cannot_be_written_is_reported_as_such(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    _temp_folder(monkeypatch, str(tmp_path))
    expected = (r"^the process squares could not write its result to " + re.escape(str(tmp_path))
                + r" \(disk full\?\); set TMPDIR to a folder with room, or CHAKRA_PARTS=1 to do all the work")
    with pytest.raises(ChakraError, match=expected):
        forkmap.fork_map(_too_big_for_the_disk, [range(0, 1), range(1, 2)], "squares")


def test_no_temporary_folder_means_the_piece_runs_here_with_a_warning(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    _temp_folder(monkeypatch, str(tmp_path / "gone"))
    got = forkmap.fork_map(lambda r: (os.getpid(), list(r)), [range(0, 2), range(2, 4)], "squares")
    assert got == [(os.getpid(), [0, 1]), (os.getpid(), [2, 3])]
    assert "could not open a temporary file for squares" in caplog.text


def test_a_folder_without_unnamed_files_falls_back_to_a_named_one_unlinked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # O_TMPFILE refused (as on a file system without it: EOPNOTSUPP): tempfile's named file, in its folder
    named = tmp_path / "named"
    named.mkdir()
    _temp_folder(monkeypatch, str(named))
    real_open = os.open

    def no_tmpfile(path: str, flags: int, *args: object) -> int:
        if flags & getattr(os, "O_TMPFILE", 0) == getattr(os, "O_TMPFILE", -1):
            raise OSError(errno.EOPNOTSUPP, "Operation not supported")
        return real_open(path, flags, *args)   # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", no_tmpfile)
    got = forkmap.fork_map(lambda r: (os.getpid(), list(r)), [range(0, 2), range(2, 4)], "squares")
    assert got[0] == (os.getpid(), [0, 1]) and got[1][0] != os.getpid() and got[1][1] == [2, 3]
    assert list(named.iterdir()) == []


class _OddError(Exception):
    """Pickles, but does not unpickle: its constructor takes other arguments than its ``args``."""

    def __init__(self, node: int, file: str) -> None:
        super().__init__(f"node {node} in {file} is odd")


def _odd(r: range) -> int:
    if r.start > 0:
        raise _OddError(7, "x.json")
    return 1


def test_a_child_error_that_does_not_come_back_whole_is_sent_as_its_text() -> None:
    with pytest.raises(ChakraError, match=r"_OddError: node 7 in x.json is odd"):
        forkmap.fork_map(_odd, [range(0, 1), range(1, 2)], "decoding x.json")


def _part_files() -> list[str]:
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(_FOLDER[0] + os.sep):   # named or not ("FOLDER/#inode (deleted)")
            out.append(target)
    return out


def test_a_child_holds_only_its_own_file() -> None:
    # the third child was started after the first two: it closes their files
    got = forkmap.fork_map(lambda r: len(_part_files()), [range(0, 1), range(1, 2), range(2, 3)], "files")
    assert got == [2, 1, 1]   # here: both children's files (until collected); each child: its own
    assert _part_files() == []


def test_an_interrupt_while_waiting_for_a_child_kills_and_reaps_it(monkeypatch: pytest.MonkeyPatch) -> None:
    spawned: list[tuple[int, int]] = []
    real_spawn, real_waitpid = forkmap._spawn, os.waitpid

    def spawn(*args: object) -> object:
        child = real_spawn(*args)   # type: ignore[arg-type]
        spawned.append(child)   # type: ignore[arg-type]
        return child

    def waitpid(pid: int, options: int) -> tuple[int, int]:
        if len(spawned) == 1 and not getattr(waitpid, "done", False):
            waitpid.done = True   # type: ignore[attr-defined]
            raise KeyboardInterrupt   # Ctrl-C while the parent waits
        return real_waitpid(pid, options)

    monkeypatch.setattr(forkmap, "_spawn", spawn)
    monkeypatch.setattr(os, "waitpid", waitpid)
    with pytest.raises(KeyboardInterrupt):
        forkmap.fork_map(lambda r: time.sleep(30) if r.start else 1, [range(0, 1), range(1, 2)], "sleepy")
    pid = spawned[0][0]
    with pytest.raises(ChildProcessError):
        real_waitpid(pid, os.WNOHANG)   # killed and already reaped
    assert _part_files() == []


# ---- sink: each piece's bytes appended to one file, in piece order --------------------------------------


def _pieces_bytes(r: range, write: object) -> tuple[int, int]:
    # 1.5 MB per piece in uneven writes (more than a child's 1 MB buffer), each byte its piece's number
    for size in (1, 700_000, 800_000 - 1):
        write(bytes([65 + r.start]) * size)   # type: ignore[operator]
    return os.getpid(), r.start


def _sink_run(tmp_path: Path, fn: object, k: int = 3) -> tuple[list, bytes]:
    out = tmp_path / "out.bin"
    with open(out, "wb") as fh:
        fh.write(b"head")
        got = forkmap.fork_map(fn, [range(i, i + 1) for i in range(k)], "writing out.bin", sink=fh)
        fh.write(b"tail")
    return got, out.read_bytes()


def test_sink_gets_each_pieces_bytes_in_order(tmp_path: Path) -> None:
    got, data = _sink_run(tmp_path, _pieces_bytes)
    assert data == b"head" + b"".join(bytes([65 + i]) * 1_500_000 for i in range(3)) + b"tail"
    assert [r for _, r in got] == [0, 1, 2]
    assert got[0][0] == os.getpid() and len({pid for pid, _ in got}) == 3   # three processes wrote


def test_sink_without_copy_file_range_copies_through_this_process(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    def refuse(*args: object) -> int:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "copy_file_range", refuse, raising=False)
    _, data = _sink_run(tmp_path, _pieces_bytes)
    assert data == b"head" + b"".join(bytes([65 + i]) * 1_500_000 for i in range(3)) + b"tail"


def test_sink_in_one_part_writes_straight_into_the_file(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHAKRA_PARTS", "1")
    got, data = _sink_run(tmp_path, lambda r, write: (write(b"x" * 3), os.getpid())[1], k=1)
    assert (got, data) == ([os.getpid()], b"headxxxtail")


def _sink_fails(r: range, write: object) -> int:
    write(b"partial")   # type: ignore[operator]
    if r.start == 1:
        raise TraceFormatError("node 7 has no id", "x.json")
    return r.start


def test_sink_a_child_error_is_raised_here(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="x.json: node 7 has no id"):
        _sink_run(tmp_path, _sink_fails)


def _sink_too_big(r: range, write: object) -> int:
    import resource

    if r.start > 0:   # (see _too_big_for_the_disk)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    write(b"x" * (2 << 20))   # type: ignore[operator]
    return r.start


def test_sink_bytes_that_cannot_be_written_are_reported_as_such(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    parts = tmp_path / "parts"
    parts.mkdir()
    _temp_folder(monkeypatch, str(parts))
    expected = (r"^the process writing out.bin could not write its result to " + re.escape(str(parts))
                + r" \(disk full\?\)")
    with pytest.raises(ChakraError, match=expected):
        _sink_run(tmp_path, _sink_too_big, k=2)


def test_no_fork_while_another_thread_runs(caplog: pytest.LogCaptureFixture,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # a child forked now would inherit whatever lock the other thread holds: everything runs here
    import logging
    import threading

    monkeypatch.setattr(forkmap, "_told", False)
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        with caplog.at_level(logging.INFO, logger="chakra.io.forkmap"):
            got = forkmap.fork_map(lambda r: os.getpid(), forkmap.split(9, 1, 3), "squares")
            again = forkmap.fork_map(lambda r: os.getpid(), forkmap.split(9, 1, 3), "cubes")
    finally:
        stop.set()
        other.join()
    assert got == again == [os.getpid()] * 3
    said = [r.getMessage() for r in caplog.records if r.name == "chakra.io.forkmap"]
    assert said == ["squares and the rest in one process: 1 other thread(s) running here, a forked part "
                    "could hang on a lock one of them holds"]
    assert len(set(forkmap.fork_map(lambda r: os.getpid(), forkmap.split(9, 1, 3), "squares"))) == 3


# ---- interrupts while a child is being started ---------------------------------------------------------


def test_signals_held_are_delivered_after_the_block() -> None:
    reached = []
    with pytest.raises(KeyboardInterrupt):
        with forkmap._signals_held():
            os.kill(os.getpid(), signal.SIGINT)
            reached.append("after the kill")   # not interrupted inside the block
    assert reached == ["after the kill"]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGALRM], ids=["SIGINT", "SIGALRM"])
def test_an_interrupt_right_after_the_fork_still_kills_and_reaps_the_child(
        signum: int, monkeypatch: pytest.MonkeyPatch) -> None:
    forked: list[int] = []
    real_fork = os.fork
    if signum == signal.SIGALRM:
        previous = signal.signal(signal.SIGALRM, _raise_interrupt)

    def fork() -> int:
        pid = real_fork()
        if pid:
            forked.append(pid)
            os.kill(os.getpid(), signum)   # Ctrl-C before fork_map has the child in its list
        return pid

    monkeypatch.setattr(os, "fork", fork)
    try:
        with pytest.raises(KeyboardInterrupt):
            forkmap.fork_map(lambda r: time.sleep(30) if r.start else 1, [range(0, 1), range(1, 2)],
                             "sleepy")
    finally:
        if signum == signal.SIGALRM:
            signal.signal(signal.SIGALRM, previous)
    assert len(forked) == 1
    with pytest.raises(ChildProcessError):
        os.waitpid(forked[0], os.WNOHANG)   # killed and already reaped, not left running
    assert _part_files() == []


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt   # what run_command's timer does with a Ctrl-C that came during an import


def test_an_interrupt_as_a_child_is_handed_over_to_be_waited_for_still_reaps_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    handed: list[int] = []
    real_collect = forkmap._collect

    def collect(child: tuple[int, int], *args: object) -> object:
        handed.append(child[0])
        os.kill(os.getpid(), signal.SIGINT)   # Ctrl-C before _collect answers for the child
        return real_collect(child, *args)     # type: ignore[arg-type]

    monkeypatch.setattr(forkmap, "_collect", collect)
    with pytest.raises(KeyboardInterrupt):
        forkmap.fork_map(lambda r: time.sleep(30) if r.start else 1, [range(0, 1), range(1, 2)], "sleepy")
    with pytest.raises(ChildProcessError):
        os.waitpid(handed[0], os.WNOHANG)   # killed and already reaped
    assert _part_files() == []


def test_an_interrupt_right_after_the_temporary_file_is_made_leaves_no_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # (a system without O_TMPFILE: tempfile's named file, unlinked at once)
    monkeypatch.delattr(os, "O_TMPFILE", raising=False)
    _temp_folder(monkeypatch, str(tmp_path))
    real_mkstemp = tempfile.mkstemp

    def mkstemp(*args: object, **kwargs: object) -> tuple[int, str]:
        made = real_mkstemp(*args, **kwargs)   # type: ignore[call-overload]
        os.kill(os.getpid(), signal.SIGINT)    # Ctrl-C while the file still has its name
        return made

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    with pytest.raises(KeyboardInterrupt):
        forkmap.fork_map(lambda r: r.start, [range(0, 1), range(1, 2)], "quick")
    assert os.listdir(tmp_path) == []   # unlinked before the interrupt was taken
    assert _part_files() == []


def test_a_child_runs_with_the_signal_mask_of_before() -> None:
    def blocked(r: range) -> bool:
        return signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])

    assert forkmap.fork_map(blocked, [range(0, 1), range(1, 2)], "mask") == [False, False]
