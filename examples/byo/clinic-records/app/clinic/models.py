"""Response and request bodies."""

from pydantic import BaseModel, Field


class Clinic(BaseModel):
    id: str
    name: str
    city: str
    phone: str


class Account(BaseModel):
    id: str
    username: str
    name: str
    kind: str
    clinic: str


class RecordSummary(BaseModel):
    id: str
    title: str
    clinic: str


class Record(RecordSummary):
    patient_id: str
    doctor_id: str
    diagnosis: str
    notes: list[str]


class NoteIn(BaseModel):
    text: str = Field(min_length=1, max_length=2000)
