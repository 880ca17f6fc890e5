"""The OpenAI-compatible HTTP server (`tokenstep serve`): see docs/server.md.

app.py (routes, `create_app`) -> http.py / guard.py (body, key, limits) -> protocol.py (request
models) -> serving.py (request <-> engine: request_params.py, jobs.py, events.py, choices.py) ->
responses.py (response models); metrics.py for /metrics, launch.py for the process around it.
"""
