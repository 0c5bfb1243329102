from pydantic import BaseModel


class DiskUsage(BaseModel):
    output: str
