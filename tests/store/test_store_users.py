"""Users' tokens in the store, on SQLite and PostgreSQL: a token is found by its hash alone, a name is
taken once, and a removed user's token finds no one."""

from __future__ import annotations

import pytest

from corral.store import NotFound, Store, UserExists


def test_a_users_token_names_them_until_they_are_removed(store: Store) -> None:
    token = store.add_user("alice", admin=False, now=100.0)
    admin_token = store.add_user("bob", admin=True, now=101.0)
    assert token not in str(store.user_rows())  # only its hash is kept

    assert store.user_for_token(token, now=200.0) == {"name": "alice", "admin": False}
    assert store.user_for_token(admin_token, now=200.0) == {"name": "bob", "admin": True}
    assert store.user_for_token("not-a-token", now=200.0) is None
    with pytest.raises(UserExists, match="user 'alice' exists already"):
        store.add_user("alice", admin=True, now=300.0)

    store.user_for_token(token, now=230.0)  # within the minute: its last use is not written again
    assert [(u["name"], u["admin"], u["created_at"], u["last_used_at"]) for u in store.user_rows()] == [
        ("alice", False, 100.0, 200.0),
        ("bob", True, 101.0, 200.0),
    ]

    store.remove_user("alice", now=400.0)
    assert store.user_for_token(token, now=401.0) is None
    with pytest.raises(NotFound, match="no user 'alice'"):
        store.remove_user("alice", now=402.0)
    assert [(e["kind"], e["message"]) for e in store.list_events(kind="user.")] == [
        ("user.added", "user alice added"),
        ("user.added", "user bob added (admin)"),
        ("user.removed", "user alice removed: its token is refused"),
    ]


def test_a_users_open_jobs_are_counted_by_the_user_named_in_their_spec(store: Store) -> None:
    """What policy.users.max_submitted_jobs weighs a submission against: queued, claimed and
    running jobs, an array's tasks each; ended ones and other users' do not count."""
    from corral.core import retry
    from corral.core.model import GiB, Resources
    from corral.jobspec import JobRequest

    ids = store.submit(
        [
            JobRequest(command=["true"], user="alice"),
            JobRequest(command=["true"], user="alice", array="0-2"),
            JobRequest(command=["true"], user="bob"),
            JobRequest(command=["true"], user="alice"),
        ],
        100.0,
    )
    store.claim(ids[0], "d-test", ["n-1"], Resources(1, GiB), 101.0)
    ended = store.claim(ids[-1], "d-test", ["n-1"], Resources(1, GiB), 101.0)
    assert ended is not None
    assert store.finish_attempt(ended, "n-1", 0, 102.0, lambda job: retry.after_exit(job, 0, (ended,)))
    assert store.open_jobs_of(["alice", "bob", "carol"]) == {"alice": 4, "bob": 1, "carol": 0}


def test_a_user_as_long_as_a_job_may_name_is_kept_whole_and_counted(store: Store) -> None:
    from corral.jobspec import MAX_USER, JobRequest
    from corral.store import JobFilter

    longest = "u" * MAX_USER
    [job_id] = store.submit([JobRequest(command=["true"], user=longest)], 100.0)
    assert store.open_jobs_of([longest]) == {longest: 1}
    assert store.open_jobs_by_user() == {longest: {"queued": 1}}
    assert [row["id"] for row in store.list_job_rows(picked=JobFilter(user=longest))] == [job_id]
