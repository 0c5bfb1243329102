"""Clinic records service: patients read their own medical records, doctors the records of the
patients they treat."""
