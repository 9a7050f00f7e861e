"""Protocol endpoints, mounted under /v1."""

from fastapi import APIRouter

from mlx_server.api.v1 import models

router = APIRouter()
router.include_router(models.router)
