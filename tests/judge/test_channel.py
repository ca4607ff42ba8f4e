"""The channel between the judge and a job, on real Unix sockets."""

from __future__ import annotations

import socket

import pytest

from pipeline.judge import channel


def pair() -> tuple[channel.Connection, channel.Connection]:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    return channel.Connection(a), channel.Connection(b)


def test_the_last_messages_of_a_job_that_closed_with_ours_unread_are_still_read():
    """A reference worker that needed fewer `next`s than the judge sent ends with them unread: Linux then reports
    ECONNRESET before its queued `done`, which the judge must still read (seen as a lost 'done' phase under load)."""
    judge, job = pair()
    judge.send({"type": "next"})
    judge.send({"type": "next"})
    job.send({"type": "phase", "name": "reference"})
    job.send({"type": "phase", "name": "done"})
    job.close()
    assert [judge.receive()[0]["name"] for _ in range(2)] == ["reference", "done"]
    with pytest.raises(channel.ChannelClosed, match="closed the channel"):
        judge.receive()


def test_a_peer_that_closes_with_nothing_sent_is_the_end():
    judge, job = pair()
    judge.send({"type": "next"})
    job.close()
    with pytest.raises(channel.ChannelClosed):
        judge.receive()
