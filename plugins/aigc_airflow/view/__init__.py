"""The "AIGC" view in the Airflow UI: read-only pages over the lake, served by the API server.

``app.py`` routes, ``auth.py`` who may see them, ``files.py`` which lake objects are served,
``pages.py``/``markup.py`` the HTML, ``urls.py`` where it all lives, ``lazy.py`` what the
plugin mounts so that only the API server ever builds the app. The data comes from the
core's ``aigc.catalog``, which knows nothing of Airflow.
"""
