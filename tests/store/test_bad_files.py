"""A store path that cannot be egg's database is refused in one line before anything is created beside it, a damaged
file before anything reads or writes it, and a relative path is made absolute before anything is stored."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pipeline.store import Store, StoreError
from tests.store.test_store import session


def test_dev_null_is_refused_before_a_migrate_lock_is_made_beside_it():
    lock = Path("/dev/null.migrate.lock")
    existed = lock.exists()
    with pytest.raises(StoreError, match="^the store /dev/null is not a regular file"):
        Store("/dev/null")
    assert lock.exists() == existed


def test_a_folder_a_text_file_and_a_damaged_database_are_refused_in_one_line_creating_nothing(tmp_path):
    folder = tmp_path / "folder"
    folder.mkdir()
    text = tmp_path / "notes.sqlite"
    text.write_text("not a database\n" * 50)
    damaged = tmp_path / "damaged.sqlite"
    good = Store(damaged)
    session(good)
    for i in range(200):
        good.add_event("s1", "info", "x" * 500)
    good.close()
    size = damaged.stat().st_size
    with damaged.open("r+b") as handle:  # a page in the middle overwritten, as a bad disk or a stray write does
        handle.seek(size // 2)
        handle.write(os.urandom(4096))
    before = sorted(p.name for p in tmp_path.iterdir())
    for path, message in ((folder, "is a folder"), (text, "is not an SQLite database"), (damaged, "is damaged")):
        with pytest.raises(StoreError) as refused:
            Store(path)
        assert message in str(refused.value) and "\n" not in str(refused.value) and str(path) in str(refused.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_relative_path_is_made_absolute_before_anything_is_stored(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    store = Store("data/egg.sqlite")
    assert store.path == tmp_path / "data" / "egg.sqlite" and store.path.is_absolute()
