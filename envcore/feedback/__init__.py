"""The feedback loop: episode logs -> failure analysis -> sampling weights and factory jobs -> a
refreshed cache version.

* :mod:`~envcore.feedback.categories`: why an episode failed, from a declarative table;
* :mod:`~envcore.feedback.analysis`: categories and solve rates by bug class, tier, domain and agent,
  with example episodes (JSON summary and Markdown report);
* :mod:`~envcore.feedback.plan`: sampling weights favouring the edge of the agent's ability, and the
  factory job that asks for more of what it fails at;
* :mod:`~envcore.feedback.refresh`: a new cache version built from a job, with its lineage.

``python -m envcore feedback analyze | plan | refresh`` runs them (docs/feedback.md).
"""
