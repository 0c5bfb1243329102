"""ASGI entry point: ``clinic.main:app``."""

from fastapi import FastAPI

from clinic.routes import records, public

app = FastAPI(title="Clinic records", version="2.3.0")
app.include_router(public)
app.include_router(records)
