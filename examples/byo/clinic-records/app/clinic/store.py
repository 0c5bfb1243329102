"""In-memory data: the clinics, the accounts (with their API tokens) and the medical records.

Everything lives in module-level dicts that the routes read and write directly; a restart brings
back this seed data.
"""

CLINICS = {
    "harbour": {"id": "harbour", "name": "Harbour Street Clinic", "city": "Portsmouth", "phone": "023 9200 4411"},
    "elmwood": {"id": "elmwood", "name": "Elmwood Family Practice", "city": "Leeds", "phone": "0113 496 0721"},
}

ACCOUNTS = {
    "u-104": {"id": "u-104", "username": "amara.patel", "name": "Amara Patel", "kind": "patient",
              "clinic": "harbour", "token": "ct_5f1c2e9a7b3d4410"},
    "u-117": {"id": "u-117", "username": "tomas.berg", "name": "Tomas Berg", "kind": "patient",
              "clinic": "elmwood", "token": "ct_9e04b6d2c8a15377"},
    "u-120": {"id": "u-120", "username": "ines.duarte", "name": "Ines Duarte", "kind": "patient",
              "clinic": "harbour", "token": "ct_2b7f90e1d4c63a58"},
    "d-201": {"id": "d-201", "username": "dr.lee", "name": "Dr Hana Lee", "kind": "doctor",
              "clinic": "harbour", "token": "ct_d3a8c1f05e9b2764"},
    "d-202": {"id": "d-202", "username": "dr.okafor", "name": "Dr Chidi Okafor", "kind": "doctor",
              "clinic": "elmwood", "token": "ct_71e6b4a09f2d8c35"},
}

RECORDS = {
    "rec-3301": {"id": "rec-3301", "patient_id": "u-104", "doctor_id": "d-201", "clinic": "harbour",
                 "title": "Knee follow-up KF-3301", "diagnosis": "Torn meniscus, grade 2 (DX-7Q41)",
                 "notes": []},
    "rec-3302": {"id": "rec-3302", "patient_id": "u-104", "doctor_id": "d-201", "clinic": "harbour",
                 "title": "Annual check BP-3302", "diagnosis": "Mild hypertension (DX-2K88)",
                 "notes": []},
    "rec-3410": {"id": "rec-3410", "patient_id": "u-117", "doctor_id": "d-202", "clinic": "elmwood",
                 "title": "Allergy panel AP-3410", "diagnosis": "Penicillin allergy (DX-9M03)",
                 "notes": []},
    "rec-3520": {"id": "rec-3520", "patient_id": "u-120", "doctor_id": "d-201", "clinic": "harbour",
                 "title": "Sleep study SS-3520", "diagnosis": "Obstructive sleep apnoea (DX-4T19)",
                 "notes": []},
}


def account_by_token(token: str) -> dict | None:
    for account in ACCOUNTS.values():
        if account["token"] == token:
            return account
    return None
