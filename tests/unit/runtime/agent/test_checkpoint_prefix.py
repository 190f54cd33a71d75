"""The loop vouches for the unchanged prefix of each checkpoint (``known_prefix``): the previous
checkpoint's length after an accepted commit, 0 after auto-compaction rewrote the history, and
the last accepted length after a commit the store refused. A FileSessionStore resumed after a
long run rebuilds the loop's own history."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from session_runtime import LoopCheckpoint, StoreError
from session_runtime.store import FileSessionStore
from session_runtime.store.memory import MemorySessionStore
from tests.unit.runtime.conftest import opts


class Recording(MemorySessionStore):
    """Records ``(turn, known_prefix, len(messages))`` of every commit; refuses the commits of
    the turns in ``refuse`` once each."""

    def __init__(self, refuse: set[int] | None = None) -> None:
        super().__init__()
        self.seen: list[tuple[int, int, int]] = []
        self.refuse = set(refuse or ())

    def commit_round(self, checkpoint: LoopCheckpoint) -> None:
        self.seen.append((checkpoint.turn, checkpoint.known_prefix, len(checkpoint.messages)))
        if checkpoint.turn in self.refuse:
            self.refuse.discard(checkpoint.turn)
            raise StoreError("volume hiccup")
        super().commit_round(checkpoint)


def bash_rounds(n: int) -> list[dict[str, Any]]:
    rounds = [
        {"tool_calls": [{"name": "bash", "arguments": {"command": f"echo {i}"}}]} for i in range(n)
    ]
    return [*rounds, {"text": "done"}]


async def test_each_commit_vouches_for_the_previous_checkpoint(
    scripted: Any, agent_for: Any, workspace: Path
) -> None:
    srv = await scripted(bash_rounds(4))
    store = Recording()
    session = agent_for(srv).session(str(workspace), opts(session_store=store))
    result = await session.send_async("go")
    # system + user, then an assistant message and a tool message per round
    assert store.seen == [(0, 0, 2), (1, 2, 4), (2, 4, 6), (3, 6, 8), (4, 8, 10)]
    cp = store.load_checkpoint(session.session_id, result.run_id)
    assert cp is not None and cp.messages == session.history()[: len(cp.messages)]


async def test_a_refused_commit_keeps_the_last_accepted_length(
    scripted: Any, agent_for: Any, workspace: Path
) -> None:
    srv = await scripted(bash_rounds(3))
    store = Recording(refuse={2})
    session = agent_for(srv).session(str(workspace), opts(session_store=store))
    result = await session.send_async("go")
    assert store.seen == [(0, 0, 2), (1, 2, 4), (2, 4, 6), (3, 4, 8)]
    cp = store.load_checkpoint(session.session_id, result.run_id)
    assert cp is not None and cp.turn == 3 and cp.messages == session.history()[:8]


async def test_auto_compaction_withdraws_the_promise(
    scripted: Any, agent_for: Any, workspace: Path
) -> None:
    (workspace / "big.txt").write_text("line of text\n" * 400)
    read = {"tool_calls": [{"name": "read", "arguments": {"file_path": "big.txt"}}]}
    srv = await scripted([read, read, read, {"text": "done"}])
    store = Recording()
    stored: list[bool] = []
    compactions: list[int] = []
    at_commit: list[int] = []  # compactions so far, at each commit
    real_commit = store.commit_round

    def commit_round(checkpoint: LoopCheckpoint) -> None:
        at_commit.append(len(compactions))
        real_commit(checkpoint)

    store.commit_round = commit_round  # type: ignore[method-assign]

    def check_after_commit(event: dict[str, Any]) -> None:
        cp = store.load_checkpoint(session.session_id, session.runs()[-1]["id"])
        stored.append(cp is not None and cp.messages == session.history())

    session = agent_for(srv).session(
        str(workspace),
        opts(
            session_store=store,
            auto_compact=True,
            context_window_tokens=6000,
            auto_compact_threshold=0.5,
        ),
    )
    session.register_hook("check", "turn_end", check_after_commit)
    session.register_hook("count", "context_compacted", lambda e: compactions.append(1))
    events = [ev async for ev in session.stream_async("read it thrice")]
    assert any(e["type"] == "context_compacted" for e in events)
    # A commit after a compaction promised nothing; every other one promised the previous
    # checkpoint's length.
    assert len(at_commit) == len(store.seen) > 2
    for i in range(1, len(store.seen)):
        compacted = at_commit[i] > at_commit[i - 1]
        assert store.seen[i][1] == (0 if compacted else store.seen[i - 1][2]), store.seen
    assert any(at_commit[i] > at_commit[i - 1] for i in range(1, len(at_commit)))
    # After every round the store held exactly the loop's history (the last turn_end is the
    # answer's, which has no checkpoint of its own).
    assert len(stored) == len(store.seen) and all(stored[:-1]) and not stored[-1]


async def test_file_store_resumed_after_many_rounds_has_the_loops_history(
    scripted: Any, agent_for: Any, workspace: Path, tmp_path: Path
) -> None:
    srv = await scripted(bash_rounds(60))
    root = tmp_path / "store"
    store = FileSessionStore(root, epoch=1, fsync=False, snapshot_min_bytes=4096)
    session = agent_for(srv).session(
        str(workspace), opts(session_store=store, session_id="long", max_tool_rounds=100)
    )
    result = await session.send_async("go")
    history = session.history()
    store.close()
    reopened = FileSessionStore(root, epoch=2, fsync=False)
    cp = reopened.load_checkpoint("long", result.run_id)
    assert cp is not None and cp.turn == 60
    assert cp.messages == history[: len(cp.messages)] and len(cp.messages) == 2 + 2 * 60
