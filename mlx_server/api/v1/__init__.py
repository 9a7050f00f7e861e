"""Protocol endpoints, mounted under /v1."""

from fastapi import APIRouter

from mlx_server.api.v1 import (
    admin,
    backends,
    chat,
    cluster_nodes,
    completions,
    embeddings,
    lora,
    messages,
    model_admin,
    models,
    rerank,
    responses,
    sharded,
    speech,
    tokenize,
    transcriptions,
)

router = APIRouter()
router.include_router(models.router)
router.include_router(chat.router)
router.include_router(completions.router)
router.include_router(messages.router)
router.include_router(responses.router)
router.include_router(embeddings.router)
router.include_router(tokenize.router)
router.include_router(rerank.router)
router.include_router(speech.router)
router.include_router(transcriptions.router)
router.include_router(admin.router)
router.include_router(model_admin.router)
router.include_router(lora.router)
router.include_router(backends.router)
router.include_router(cluster_nodes.router)
router.include_router(sharded.router)
