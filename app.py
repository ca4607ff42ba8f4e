"""egg's web app: `make app` (or `egg ui`) serves it on 127.0.0.1.

The entry only configures the page, opens the one store handle (EGG_DB, else data/egg.sqlite) and navigates to the
pages; every page reads the store and calls `pipeline.api`, and no page runs a model, a compile or a kernel: a
session's worker process does that.
"""

import streamlit as st

from pages._context import store_handle
from pipeline.judge.isolation import make_undumpable
from pipeline.store import StoreError

make_undumpable()  # the server may hold API keys in its environment: no other process of this user reads its /proc files

st.set_page_config(page_title="egg", page_icon=":material/egg:", layout="wide")
try:
    store_handle()  # open (and migrate) the database before any page needs it
except StoreError as error:  # not an SQLite file, damaged, locked: one line, no page
    st.error(str(error))
    st.stop()
navigation = st.navigation(
    [
        st.Page("pages/new_session.py", title="New session", icon=":material/add_circle:", default=True),
        st.Page("pages/session.py", title="Session", icon=":material/biotech:", url_path="session"),
        st.Page("pages/candidates.py", title="Candidates", icon=":material/bar_chart:", url_path="candidates"),
        st.Page("pages/sessions.py", title="Sessions", icon=":material/folder_open:", url_path="sessions"),
        st.Page("pages/bench.py", title="Bench", icon=":material/leaderboard:", url_path="bench"),
        st.Page("pages/learn.py", title="Learn", icon=":material/school:", url_path="learn"),
        st.Page("pages/settings.py", title="Settings", icon=":material/settings:", url_path="settings"),
    ]
)
navigation.run()
