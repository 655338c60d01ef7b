"""The gap detector of ``kernels.sequence`` on message headers: how many kernel messages may be
missing between the last one a dead nbrelay process handled and the first ones a new process
receives. Ids come from jupyter_client's own ``Session`` (what ipykernel sends with), not
written by hand, so a change of its format fails here."""

from __future__ import annotations

from typing import Any

from jupyter_client.session import Session

from nbrelay.kernels.sequence import Received, counter, missing


def sent(session: Session, count: int) -> list[dict[str, Any]]:
    """``count`` messages as the kernel's Session makes them (status, stream, reply …)."""
    kinds = ["status", "execute_input", "stream", "stream", "execute_reply"]
    return [session.msg(kinds[k % len(kinds)], {}) for k in range(count)]


def received(*msgs: dict[str, Any]) -> Received:
    got = Received()
    for msg in msgs:
        got.see(msg)
    return got


def test_counters_in_order_are_no_gap() -> None:
    kernel = Session()
    msgs = sent(kernel, 10)
    last = msgs[3]["header"]["msg_id"]
    assert missing(last, received(*msgs[4:])) == 0


def test_a_gap_counts_the_messages_between() -> None:
    kernel = Session()
    msgs = sent(kernel, 10)
    last = msgs[3]["header"]["msg_id"]
    assert missing(last, received(*msgs[7:])) == 3  # 4, 5 and 6 never arrived


def test_the_lowest_counter_received_counts_whatever_the_order() -> None:
    """Jupyter Server answers a reconnecting client's kernel_info nudge before it replays what
    it kept: newer messages can arrive before older ones."""
    kernel = Session()
    msgs = sent(kernel, 10)
    last = msgs[3]["header"]["msg_id"]
    assert missing(last, received(msgs[9], msgs[8], *msgs[5:8])) == 1  # only 4 is missing


def test_messages_of_other_senders_do_not_count() -> None:
    """The server's own session (its nudges) and another kernel's messages on the same
    connection have counters of their own."""
    kernel, server = Session(), Session()
    msgs = sent(kernel, 6)
    theirs = sent(server, 3)
    last = msgs[2]["header"]["msg_id"]
    assert missing(last, received(*theirs, *msgs[3:])) == 0
    assert missing(last, received(*theirs)) == 0  # nothing of the kernel yet: cannot tell


def test_a_new_kernel_session_after_a_restart_is_not_a_gap() -> None:
    before, after = Session(), Session()  # a restarted kernel sends with a new session id
    old = sent(before, 5)
    new = sent(after, 40)
    assert missing(old[-1]["header"]["msg_id"], received(*new[30:])) == 0


def test_ids_of_other_forms_tell_nothing() -> None:
    kernel = Session()
    msgs = sent(kernel, 5)
    for other in ("6f1c2a8e-7d1b-4a55-9a40-1f5c0b9e2d11", "", "msg", "a b_1_2", "x_1_y"):
        assert counter(other) is None
        assert missing(other, received(*msgs)) == 0
    assert counter(None) is None
    assert counter(12) is None
    uuids: list[dict[str, Any]] = [
        {"header": {"msg_id": "6f1c2a8e-7d1b-4a55-9a40-1f5c0b9e2d11"}},
        {"header": None},
        {},
    ]
    assert missing(msgs[0]["header"]["msg_id"], received(*uuids)) == 0


def test_both_jupyter_client_forms_are_read() -> None:
    kernel = Session()
    first = kernel.msg("status", {})["header"]["msg_id"]
    sender, n = counter(first) or ("", -1)
    assert n == 0
    assert sender.startswith(kernel.session)
    # jupyter_client 6.x: "{session}_{n}" (no process id).
    assert counter("abc123-def_41") == ("abc123-def", 41)
    assert missing("abc123-def_41", received({"header": {"msg_id": "abc123-def_44"}})) == 2
