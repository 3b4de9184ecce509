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
