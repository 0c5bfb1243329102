"""Open redirect (CWE-601): the logout redirect follows any URL the request names."""

from envcore.factory.bugs.base import BugClass, ProbeContext, Variant, step
from envcore.scenario.probes import RedirectLocal

OFFSITE = {
    "absolute": "https://evil.example/login",
    "protocol_relative": "//evil.example/login",
    "host_prefix": "https://app.example.test.evil.example/login",
}


def _unvalidated(names, secure):
    return []


def _slash_prefix(names, secure):
    return ['if not next.startswith("/"):', '    next = "/"']


def _host_prefix(names, secure):
    return [
        'if next.startswith(("http://", "https://")) and not next.startswith("https://" + APP_HOST):',
        '    next = "/"',
    ]


def _probes(*payloads: str):
    def build(ctx: ProbeContext):
        return [
            ctx.security(
                f"logout does not redirect off-site ({kind.replace('_', ' ')} URL)",
                [step(None, "GET", "/auth/logout", RedirectLocal(), query={"next": OFFSITE[kind]})],
                "redirect",
            )
            for kind in payloads
        ]

    return build


BUG = BugClass(
    name="open_redirect",
    cwe=("CWE-601",),
    title="Open redirect",
    symptom="the app can be made to forward visitors to another site",
    variants=(
        Variant("unvalidated_next", ("redirect",), {"redirect.check": _unvalidated},
                _probes("absolute", "protocol_relative", "host_prefix"), features=("redirect",),
                description="`next` is used as given"),
        Variant("slash_prefix_only", ("redirect",), {"redirect.check": _slash_prefix}, _probes("protocol_relative"),
                features=("redirect",), subtle=True, description="`//host` passes a starts-with-slash test"),
        Variant("host_prefix_match", ("redirect",), {"redirect.check": _host_prefix},
                _probes("protocol_relative", "host_prefix"), features=("redirect",), subtle=True,
                description="the allowed host is matched as a string prefix"),
    ),
)
