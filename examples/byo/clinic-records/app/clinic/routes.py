"""HTTP routes. ``public`` needs no account; ``records`` is for signed-in patients and doctors."""

from fastapi import APIRouter, Header, HTTPException, Response

from clinic import store
from clinic.models import Account, Clinic, NoteIn, Record, RecordSummary

public = APIRouter(prefix="/api", tags=["public"])
records = APIRouter(prefix="/api", tags=["records"])


def caller_from(authorization: str | None) -> dict:
    """The account behind an ``Authorization: Bearer <token>`` header; 401 without a valid one."""
    scheme, _, token = (authorization or "").partition(" ")
    account = store.account_by_token(token.strip()) if scheme.lower() == "bearer" else None
    if account is None:
        raise HTTPException(status_code=401, detail="sign in first", headers={"WWW-Authenticate": "Bearer"})
    return account


def may_read(account: dict, record: dict) -> bool:
    """A record is readable by its patient and by the doctor treating them."""
    if account["kind"] == "doctor":
        return record["doctor_id"] == account["id"]
    return record["patient_id"] == account["id"]


@public.get("/health")
def health() -> dict:
    return {"status": "ok"}


@public.get("/clinics", response_model=list[Clinic])
def list_clinics():
    """The clinic directory is public: the booking site shows it to visitors."""
    return list(store.CLINICS.values())


@records.get("/me", response_model=Account)
def who_am_i(authorization: str | None = Header(default=None)):
    return caller_from(authorization)


@records.get("/records", response_model=list[RecordSummary])
def list_records(authorization: str | None = Header(default=None)):
    account = caller_from(authorization)
    return [r for r in store.RECORDS.values() if may_read(account, r)]


@records.get("/records/{record_id}", response_model=Record)
def read_record(record_id: str, response: Response, authorization: str | None = Header(default=None)):
    caller_from(authorization)
    record = store.RECORDS.get(record_id)
    if record is None:
        raise HTTPException(status_code=404, detail="no such record")
    response.headers["Cache-Control"] = "no-store"
    return record


@records.post("/records/{record_id}/notes", response_model=Record, status_code=201)
def add_note(record_id: str, note: NoteIn, authorization: str | None = Header(default=None)):
    """Doctors append clinical notes to the records of the patients they treat."""
    account = caller_from(authorization)
    record = store.RECORDS.get(record_id)
    if record is None or not may_read(account, record):
        raise HTTPException(status_code=404, detail="no such record")
    if account["kind"] != "doctor":
        raise HTTPException(status_code=403, detail="only the treating doctor may add notes")
    record["notes"].append(note.text)
    return record
