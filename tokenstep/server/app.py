"""The HTTP routes, and `create_app`, which wires them to one engine. Routes only: validation lives in
protocol.py / http.py, translation and generation in serving.py, limits in guard.py."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, FastAPI
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.staticfiles import StaticFiles

from tokenstep.engine.async_engine import AsyncEngine
from tokenstep.sampling.lab import exercise
from tokenstep.server.errors import APIError, bad_request, from_value_error, internal_error
from tokenstep.server.guard import RequestGuard
from tokenstep.server.http import read_request
from tokenstep.server.metrics import CONTENT_TYPE, ServerMetrics
from tokenstep.server.protocol import ChatCompletionRequest, CompletionRequest
from tokenstep.server.serving import OpenAIServing
from tokenstep.server.settings import ServerSettings

logger = logging.getLogger(__name__)

SHUTDOWN_DRAIN_S = 1.0  # uvicorn has drained the HTTP requests already; the engine only finishes stragglers
STATIC_DIR = Path(__file__).parent / "static"  # the playground: plain HTML/CSS/JS, no build step
# The page talks only to its own origin and runs only its own files (no inline script, no CDN).
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
                               "form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
}
MAX_LAB_LOGITS = 100  # a lab vector is typed by hand; the trace's largest candidate list
MAX_LAB_LABEL_CHARS = 64

router = APIRouter()


@router.post("/v1/completions")
async def completions(request: Request) -> Response:
    body = await read_request(request, CompletionRequest)
    return await request.app.state.serving.completions(body, request)


@router.post("/v1/chat/completions")
async def chat_completions(request: Request) -> Response:
    body = await read_request(request, ChatCompletionRequest)
    return await request.app.state.serving.chat(body, request)


@router.get("/v1/models")
async def models(request: Request) -> Response:
    return JSONResponse(request.app.state.serving.models(request.app.state.started).model_dump())


@router.get("/v1/models/{model:path}")
async def model(model: str, request: Request) -> Response:
    serving: OpenAIServing = request.app.state.serving
    serving.check_model(model)
    return JSONResponse(serving.models(request.app.state.started).data[0].model_dump())


class LabRequest(BaseModel):
    """POST /v1/lab, our extension: the sampling lab's exercise on a logits vector you type."""

    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)
    logits: Annotated[list[float], Field(min_length=1, max_length=MAX_LAB_LOGITS)]
    labels: Annotated[list[Annotated[str, StringConstraints(max_length=MAX_LAB_LABEL_CHARS)]],
                      Field(max_length=MAX_LAB_LOGITS)] | None = None
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0


@router.post("/v1/lab")
async def lab(request: Request) -> Response:
    """`tokenstep.sampling.lab.exercise` as JSON: the sampler's own code, so the page shows what sampling does."""
    body = await read_request(request, LabRequest)
    if body.labels is not None and len(body.labels) != len(body.logits):
        raise bad_request(f"labels has {len(body.labels)} entries for {len(body.logits)} logits", "labels")
    try:
        result = exercise(body.logits, body.labels, body.temperature, body.top_k, body.top_p, body.min_p)
    except ValueError as error:
        raise from_value_error(error, LabRequest.model_fields) from None
    table = dataclasses.asdict(result)
    if not all(math.isfinite(value) for row in table["rows"] for value in row.values() if isinstance(value, float)):
        raise bad_request("logits / temperature overflows float64: use smaller logits or a larger temperature",
                          "temperature")
    return JSONResponse({"object": "lab", **table})


@router.get("/")
async def playground() -> Response:
    return FileResponse(STATIC_DIR / "index.html", headers=PAGE_HEADERS)


@router.get("/health")
async def health(request: Request) -> Response:
    if not request.app.state.engine.is_alive:
        return APIError(503, "the engine loop has stopped", type="server_error", code="engine_dead").response()
    return JSONResponse({"status": "ok"})


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    return Response(request.app.state.metrics.render(), media_type=CONTENT_TYPE)


def create_app(engine: AsyncEngine, settings: ServerSettings) -> FastAPI:
    """An app serving `engine` (already started); the app shuts the engine down when it stops."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        await asyncio.to_thread(engine.shutdown, SHUTDOWN_DRAIN_S)

    # No /docs or /openapi.json: nothing to serve there that the docs don't say, and less surface.
    app = FastAPI(title="tokenstep", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    metrics = ServerMetrics(engine)
    app.state.engine = engine
    app.state.settings = settings
    app.state.metrics = metrics
    app.state.serving = OpenAIServing(engine, settings, metrics)
    app.state.started = int(time.time())
    app.include_router(router)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    app.add_middleware(RequestGuard, api_key=settings.api_key, max_body_bytes=settings.max_body_bytes)
    _add_error_handlers(app)
    return app


def _add_error_handlers(app: FastAPI) -> None:
    """Every error leaves in OpenAI's shape; none carries a traceback."""

    async def api_error(request: Request, error: APIError) -> Response:
        return error.response()

    async def validation_error(request: Request, error: RequestValidationError) -> Response:
        return bad_request("invalid request").response()  # routes parse bodies themselves: a safety net

    async def http_error(request: Request, error: HTTPException) -> Response:
        code = "not_found" if error.status_code == 404 else None
        return APIError(error.status_code, str(error.detail), code=code, headers=error.headers).response()

    async def unexpected(request: Request, error: Exception) -> Response:
        logger.exception("unhandled error on %s", request.url.path)
        return internal_error().response()

    app.add_exception_handler(APIError, api_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(Exception, unexpected)
