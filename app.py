"""egg's web app (Streamlit): the pages come with the web-app issue; the engine they call is `pipeline.api`."""
