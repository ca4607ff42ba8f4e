"""egg's web app: `make app` (or `egg ui`) serves it on 127.0.0.1.

The entry only configures the page, opens the one store handle (EGG_DB, else data/egg.sqlite) and navigates to the
pages; every page reads the store and calls `pipeline.api`, and no page runs a model, a compile or a kernel: a
session's worker process does that.
"""

import streamlit as st

from pages._context import store_handle

st.set_page_config(page_title="egg", page_icon="🥚", layout="wide")
st.session_state["store"] = store_handle()
navigation = st.navigation(
    [
        st.Page("pages/new_session.py", title="New session", icon="➕", default=True),
        st.Page("pages/session.py", title="Session", icon="🔬", url_path="session"),
        st.Page("pages/candidates.py", title="Candidates", icon="📊", url_path="candidates"),
        st.Page("pages/sessions.py", title="Sessions", icon="🗂", url_path="sessions"),
        st.Page("pages/learn.py", title="Learn", icon="🎓", url_path="learn"),
        st.Page("pages/settings.py", title="Settings", icon="⚙", url_path="settings"),
    ]
)
navigation.run()
